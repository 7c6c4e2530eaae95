"""Lineage: what a fork saves, and the order a tree of States is deleted in (pure, no I/O)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .._core.errors import CorruptStateError
from .._core.ids import new_incarnation, validate_id
from .._core.labels import check_labels
from .._core.records import Record
from .state import State


def fork_state(
    source_id: str, record: Record, at_seq: object, new_id: str | None, labels: dict[str, str] | None
) -> tuple[State, list[dict[str, Any]], dict[str, Any]]:
    """The fork of ``record`` at ``at_seq``: the State (not repaired), the entries to save
    (the source's, unchanged) and its snapshot. ValueError for a bad ``at_seq``, new id or
    label; CorruptStateError if the source cannot be replayed."""
    first = record.entries[0] if record.entries else {}
    start = first["seq"] if first.get("kind") == "base" and type(first.get("seq")) is int else 0
    held = start + len(record.entries)
    if at_seq is None:
        at_seq = held - 1
    if start and type(at_seq) is int and 0 <= at_seq < start:
        raise ValueError(
            f"State {source_id!r} was trimmed: its entries before seq {start} were removed, and its "
            f"base record at seq {start} stands for them, so it cannot be forked at seq {at_seq}. "
            f"Fork it at seq {start} or later; nothing was written"
        )
    if type(at_seq) is not int or not start <= at_seq < held:
        raise ValueError(
            f"at_seq must be an int from {start} to {held - 1} (State {source_id!r} holds seqs {start} to "
            f"{held - 1}), got {at_seq!r}"
        )
    if new_id is not None:
        validate_id(new_id)
    entries = record.entries[: at_seq - start + 1]
    try:
        state = State._from_history(new_id or uuid.uuid4().hex, entries)
    except ValueError as exc:
        raise CorruptStateError(
            f"State {source_id!r} cannot be forked: its history cannot be replayed: {exc}"
        ) from None
    state._restore(record.snapshot)
    if labels is not None:
        state.labels = check_labels(labels)
    state._expires_at = None  # a fork starts its own life: the source's expiry is not copied
    state._forked_from = {"id": source_id, "seq": at_seq}
    state._inherit_origins(source_id, record.incarnation)  # before it gets its own incarnation
    state._incarnation = new_incarnation()  # a new State: its own life in the store
    return state, entries, state.snapshot()


async def walk_tree(root: str, child_ids: Callable[[str], Awaitable[list[str]]]) -> list[str]:
    """``root`` and every descendant (``child_ids`` gives a State's children), deepest first."""
    found: dict[str, str | None] = {root: None}
    frontier = [root]
    while frontier:
        sid = frontier.pop()
        for child in await child_ids(sid):
            if child not in found:
                found[child] = sid
                frontier.append(child)
    return tree_order(root, found)


def tree_order(root: str, parents: dict[str, str | None]) -> list[str]:
    """The ids of a tree (child -> parent, the root's parent None), deepest first, root last."""
    depth: dict[str, int] = {}

    def depth_of(sid: str) -> int:
        if sid not in depth:
            parent = parents[sid]
            depth[sid] = 0 if parent is None else depth_of(parent) + 1
        return depth[sid]

    for sid in parents:
        depth_of(sid)
    return sorted(parents, key=lambda sid: (-depth[sid], sid))
