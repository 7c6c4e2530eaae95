"""LangGraph's objects from a folded thread, and the entries for its writes (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._langgraph_history import Stored, Thread, checkpoint_entry, unpack, write_indexes, writes_entry
from ._langgraph_values import Known, Lists, Remembered, encode
from ._langgraph_values import channels as held_channels

#: A write's entries, the snapshot's ``known`` after them and the lists to remember once written.
Built = tuple[list[dict[str, Any]], Known, list[Remembered]]
#: What makes a write's entries from ``(first seq, gen, known, byte count)``.
Build = Callable[[int, str, Known, int], Built]


def where(config: RunnableConfig) -> tuple[Any, str, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id)`` of a config."""
    configurable = config["configurable"]
    return configurable["thread_id"], configurable.get("checkpoint_ns", ""), get_checkpoint_id(config)


def config_of(thread_id: Any, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


def put_entry(
    serde: SerializerProtocol,
    lists: Lists,
    sid: str,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Build:
    """What builds the ``lg.checkpoint`` entry of a ``put`` once its seq and the thread's
    snapshot are known: every channel value the checkpoint holds for a channel it
    versions, each stored once per version (see :mod:`._langgraph_values`)."""
    _, ns, parent = where(config)
    rest: dict[str, Any] = dict(checkpoint)
    values: dict[str, Any] = rest.pop("channel_values")
    versions: ChannelVersions = checkpoint["channel_versions"]
    meta = get_checkpoint_metadata(config, metadata)
    run = meta.get("run_id")
    head = checkpoint_entry(
        ns,
        checkpoint["id"],
        parent,
        run if isinstance(run, str) else None,
        serde.dumps_typed(rest),
        serde.dumps_typed(meta),
        {},
    )

    def build(first: int, gen: str, known: Known, at: int) -> Built:
        parts, known, remember = encode(
            serde,
            lists,
            sid,
            gen,
            ns,
            first,
            checkpoint["id"],
            parent,
            values,
            versions,
            known,
            at,
            set(new_versions),
        )
        return [{**head, **parts}], known, remember

    return build


def put_writes_entry(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> dict[str, Any]:
    _, ns, checkpoint_id = where(config)
    if checkpoint_id is None:
        raise ValueError(
            "put_writes needs a config with a checkpoint_id (the checkpoint the writes belong to)"
        )
    indexes = write_indexes(writes)
    return writes_entry(
        ns,
        checkpoint_id,
        task_id,
        task_path,
        [
            (idx, channel, serde.dumps_typed(value))
            for idx, (channel, value) in zip(indexes, writes, strict=True)
        ],
    )


def to_tuple(serde: SerializerProtocol, thread_id: Any, thread: Thread, stored: Stored) -> CheckpointTuple:
    entry = stored.entry
    checkpoint = serde.loads_typed(unpack(entry["checkpoint"]))
    checkpoint["channel_values"] = thread.values(serde, stored)
    parent = entry["parent"]
    return CheckpointTuple(
        config=config_of(thread_id, stored.ns, stored.id),
        checkpoint=checkpoint,
        metadata=serde.loads_typed(unpack(entry["metadata"])),
        parent_config=config_of(thread_id, stored.ns, parent) if parent else None,
        pending_writes=[
            (task, channel, serde.loads_typed(blob))
            for task, channel, blob in thread.pending(stored.ns, stored.id)
        ],
    )


def selected(
    serde: SerializerProtocol,
    thread_id: Any,
    thread: Thread,
    config: RunnableConfig | None,
    wanted: Mapping[str, Any] | None,
    before: RunnableConfig | None,
) -> list[CheckpointTuple]:
    """The thread's checkpoints that ``list`` returns, newest first within each namespace."""
    only_ns = config["configurable"].get("checkpoint_ns") if config else None
    only_id = get_checkpoint_id(config) if config else None
    before_id = get_checkpoint_id(before) if before else None
    out: list[CheckpointTuple] = []
    for ns in thread.checkpoints:
        if only_ns is not None and ns != only_ns:
            continue
        for stored in thread.newest_first(ns):
            if only_id and stored.id != only_id:
                continue
            if before_id and stored.id >= before_id:
                continue
            if wanted:
                metadata = serde.loads_typed(unpack(stored.entry["metadata"]))
                if not all(metadata.get(key) == value for key, value in wanted.items()):
                    continue
            out.append(to_tuple(serde, thread_id, thread, stored))
    return out


def delta_history(
    serde: SerializerProtocol, thread: Thread, config: RunnableConfig, channels: Sequence[str]
) -> dict[str, DeltaChannelHistory]:
    """``get_delta_channel_history`` over a thread read once: LangGraph's default walk of
    the parent chain, without reading each ancestor again."""
    _, ns, checkpoint_id = where(config)
    if checkpoint_id is None:
        newest = thread.newest_first(ns)
        target = newest[0] if newest else None
    else:
        target = thread.get(ns, checkpoint_id)
    collected: dict[str, list[PendingWrite]] = {channel: [] for channel in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    cursor = target.entry["parent"] if target else None
    while cursor is not None and remaining:
        stored = thread.get(ns, cursor)
        if stored is None:
            break
        for task, channel, blob in reversed(thread.pending(ns, cursor)):
            if channel in remaining:
                collected[channel].append((task, channel, serde.loads_typed(blob)))
        held = set(held_channels(stored.entry))
        for channel in [channel for channel in remaining if channel in held]:
            seeds[channel] = thread.value(serde, stored.entry, channel)
            remaining.discard(channel)
        cursor = stored.entry["parent"]
    result: dict[str, DeltaChannelHistory] = {}
    for channel in channels:
        item: DeltaChannelHistory = {"writes": list(reversed(collected[channel]))}
        if channel in seeds:
            item["seed"] = seeds[channel]
        result[channel] = item
    return result


def within(items: list[CheckpointTuple], limit: int | None) -> tuple[list[CheckpointTuple], int | None]:
    """The first ``limit`` of ``items`` (all of them when None), and what is left of ``limit``."""
    if limit is None:
        return items, None
    return items[:limit], limit - min(limit, len(items))
