"""``StatekeepSaver``: a LangGraph checkpointer that keeps each thread in a statekeep store.

Swap it in where a checkpointer goes::

    graph = builder.compile(checkpointer=StatekeepSaver(FileStore("runs")))

Needs ``pip install 'statekeep[langgraph]'``. Validated against langgraph 1.2.22 and
langgraph-checkpoint 4.3.2 with the ``langgraph-checkpoint-conformance`` suite, on every
built-in store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from ._needs import framework_missing

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:
    raise framework_missing("langgraph", "LangGraph", "langgraph", exc) from exc

from .._core.errors import CorruptStateError
from .._core.publish import publish
from .._store.contract import Store
from . import _langgraph_flows as flows
from . import _langgraph_moves as moves
from ._flow import Emit, Flow, adrive, adrive_each, drive, drive_each
from ._home import Home
from ._ids import state_id_for
from ._langgraph_history import LABELS, LIFE, MARK, Thread
from ._langgraph_keys import KeepsLives, tool_call_key
from ._langgraph_memory import StatekeepMemoryStore
from ._langgraph_memory_ops import RevisedItem, RevisedSearchItem
from ._langgraph_tuples import (
    config_of,
    delta_history,
    put_entry,
    put_writes_entry,
    selected,
    to_tuple,
    where,
    within,
)
from ._langgraph_values import Lists
from ._langgraph_where import other_id, snapshot_only

__all__ = ["RevisedItem", "RevisedSearchItem", "StatekeepMemoryStore", "StatekeepSaver", "tool_call_key"]
publish(
    __name__, globals(), ["RevisedItem", "RevisedSearchItem", "StatekeepMemoryStore", "tool_call_key"]
)  # reported as statekeep.adapters.langgraph's


class StatekeepSaver(BaseCheckpointSaver[int], KeepsLives):
    """A LangGraph checkpointer on a statekeep ``store`` (any of them: File, SQLite,
    Postgres, Redis, Memory, or your own).

    One State per thread: its id is :func:`statekeep.adapters._ids.state_id_for` of the
    thread id (reversible, or a hash for a very long id), and its ``task`` is the thread id,
    which is what ``statekeep list`` shows. The State carries the label
    ``framework=langgraph``. Its history is append-only: each checkpoint and each batch of
    pending writes is one entry, holding the serializer's bytes losslessly (base64). Each
    channel value is stored once per version: a checkpoint's entry holds the values its
    step changed and refers to earlier entries for the others; a plain list that grows (the
    ``messages`` channel) is stored as the items it appends to the list it extends, with a
    full copy again once more bytes were written since the last one than it holds, so a
    thread's bytes grow linearly with its steps and reading its newest checkpoint reads
    about one copy of each value. ``prune`` and ``delete_for_runs`` rewrite the thread
    without what they drop (crash-safely: see :meth:`prune`); ``delete_thread`` removes it.

    Every write method is durable on return as the store's ``write`` is (FileStore, SQLite
    and Postgres: on disk). Several savers, in one process or many, may write to one thread:
    a write that finds the seq it meant to use taken reads the thread's end again and tries
    again. Each write ends with a small ``lg.tip`` entry (a random token) that the next one
    sends again first, so a saver whose view is stale (the thread was deleted and written
    again meanwhile, even to the same length) retries too, never writes over it. The sync
    methods use the store's sync methods; the async ones await its native coroutines (each
    pair runs one body). ``serde`` is LangGraph's serializer (its default
    ``JsonPlusSerializer`` if None).

    Namespace: given a built-in store in its ``default`` namespace, the threads are kept in
    its namespace ``langgraph`` (:attr:`store`), so other frameworks and statekeep's own runs
    sharing the storage never meet them; a thread saved in ``default`` before adapters had
    namespaces is still found and continued there. A store in a namespace you chose, or one
    without namespaces, is used as it is; ``namespace=`` picks another namespace.
    """

    def __init__(
        self, store: Store, *, serde: SerializerProtocol | None = None, namespace: str | None = None
    ) -> None:
        super().__init__(serde=serde)
        self._home = Home(store, namespace, "langgraph", LABELS)
        #: Where the threads are kept: ``store`` in its namespace ``langgraph`` (see above).
        self.store = self._home.store
        self._heads = flows.Heads()
        self._lists = Lists()

    def __repr__(self) -> str:
        return f"StatekeepSaver({self.store!r})"

    # -- the API: each method's body is a flow (see :mod:`._flow`), run by the sync method
    # with the store's sync methods and by its async twin awaiting the store's coroutines

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the newest of its
        thread and namespace, with its pending writes in LangGraph's order; None if absent.
        The newest is read from where it starts in the history, not from the beginning."""
        return drive(self._get_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await adrive(self._get_tuple(config))

    def _get_tuple(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        thread_id, ns, checkpoint_id = where(config)
        found = yield from flows.newest(self._home, self._heads, str(thread_id), ns, checkpoint_id)
        if found is None:
            return None
        thread, stored = found
        if thread is None:  # an older checkpoint: read the thread whole
            thread = yield from flows.whole(self._home, self._heads, str(thread_id))
            stored = None if thread is None or checkpoint_id is None else thread.get(ns, checkpoint_id)
        if thread is None or stored is None:
            return None
        return to_tuple(self.serde, thread_id, thread, stored)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace and checkpoint id,
        when it names them), or of every thread in the store when ``config`` is None; only
        those whose metadata has every item of ``filter``, and whose id sorts before
        ``before``'s; at most ``limit``."""
        yield from drive_each(self._list(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        async for item in adrive_each(self._list(config, filter, before, limit)):
            yield item

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Flow[None]:
        if limit is not None and limit <= 0:
            return
        if config:
            threads = [config["configurable"]["thread_id"]]
        else:
            threads = yield from flows.thread_ids(self._home)
        for thread_id in threads:
            thread = yield from flows.whole(self._home, self._heads, str(thread_id))
            if thread is None:
                continue
            items, limit = within(selected(self.serde, thread_id, thread, config, filter, before), limit)
            yield Emit(items)
            if limit == 0:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a checkpoint to its thread (created by its first checkpoint); returns the
        config that names it. Durable on return as the store's ``write``."""
        return drive(self._put(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`; durable on return as the store's ``awrite``."""
        return await adrive(self._put(config, checkpoint, metadata, new_versions))

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Flow[RunnableConfig]:
        thread_id, ns, _ = where(config)
        sid = state_id_for(str(thread_id))
        build = put_entry(self.serde, self._lists, sid, config, checkpoint, metadata, new_versions)
        yield from flows.append(self._home, self._heads, str(thread_id), build, self._lists)
        return config_of(thread_id, ns, checkpoint["id"])

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Append a task's pending writes for the checkpoint ``config`` names. A write for a
        ``(task_id, index)`` already held is ignored, except for the special channels
        (errors, interrupts, ...), whose newest write wins. Durable on return as the
        store's ``write``."""
        drive(self._put_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Async :meth:`put_writes`; durable on return as the store's ``awrite``."""
        await adrive(self._put_writes(config, writes, task_id, task_path))

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Flow[None]:
        if writes:
            body = put_writes_entry(self.serde, config, writes, task_id, task_path)
            thread_id = str(config["configurable"]["thread_id"])
            yield from flows.append(self._home, self._heads, thread_id, flows.fixed([body]))

    def delete_thread(self, thread_id: str) -> None:
        """Remove the thread's State whole (one delete: durable on return as the store's)."""
        drive(self._delete_thread(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await adrive(self._delete_thread(thread_id))

    def _delete_thread(self, thread_id: str) -> Flow[None]:
        own = state_id_for(str(thread_id))
        self._heads.forget(own, deleted=True)  # written again, it is a new life (a new token)
        self._lists.forget(own)
        # its other State first (see prune): cut between the two, the thread reads as gone
        yield from self._home.deleting(other_id(own))
        yield from self._home.deleting(own)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy the source thread's checkpoints and pending writes (what it holds now: not
        what was dropped) to the target thread, in one write: all or nothing. The target is
        created if absent, else the copies are appended to it. Nothing happens for an
        unknown source. The target keeps its own life (a new one if created here), so a
        call copied from the source gets another :func:`tool_call_key` there. Durable on
        return as the store's ``write``."""
        drive(flows.copy(self._home, self._heads, str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread` (one write: all or nothing)."""
        await adrive(flows.copy(self._home, self._heads, str(source_thread_id), str(target_thread_id)))

    def thread_life(self, thread_id: str) -> str | None:
        """The thread's life token: the incarnation part of its tools' :func:`tool_call_key`
        (``idempotency_key(str(thread_id), life, tool_call_id)``), for a program that needs a
        call's key outside the tool (a job reconciling calls in doubt with a service).

        A random id made when the thread is first stored and kept in its snapshot: the same
        for every saver and process, through ``prune`` and ``delete_for_runs``; a thread
        deleted (``delete_thread``) and written again gets a new one, as does the target of
        ``copy_thread`` that it creates. Read once (the snapshot alone), then remembered
        with what the saver last saw of the thread. None for a thread first stored by a
        statekeep that made none: its keys stay the thread and call ids' alone.

        A thread not stored yet (a tool runs before the graph's first checkpoint of it is
        put, as with ``durability="exit"``) is promised a new token, which this saver's write
        that creates the thread stores (nothing is written by this call)."""
        return drive(self._life(str(thread_id)))

    async def athread_life(self, thread_id: str) -> str | None:
        """Async :meth:`thread_life`."""
        return await adrive(self._life(str(thread_id)))

    def _life(self, thread_id: str) -> Flow[str | None]:
        own = state_id_for(thread_id)
        seen = self._heads.snapshot(own)
        if seen is None:
            sid, record = yield from snapshot_only(self._home, thread_id)
            if record is None or record.snapshot is None:
                promised = self._heads.born(own)
                # Read again: a put that created the thread meanwhile, its snapshot then
                # forgotten by a read that found nothing before it, has a token of its own.
                sid, record = yield from snapshot_only(self._home, thread_id)
                if record is None or record.snapshot is None:
                    return promised
            self._heads.remember(own, sid, record.snapshot)
            seen = record.snapshot
        life = seen[MARK].get(LIFE)
        if life is not None and (not isinstance(life, str) or not life):
            raise CorruptStateError(f"thread {thread_id!r}: its snapshot's life token is damaged: {life!r}")
        return life

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drop every checkpoint whose metadata ``run_id`` is one of ``run_ids``, and its
        writes, in every thread of the store, reclaiming their space: each thread that held
        one is rewritten without them (as :meth:`prune` rewrites), keeping the values the
        checkpoints left refer to.

        Durable on return as the store's ``write`` and ``delete``: each thread reads, and
        keeps reading after a crash, as before or as after its rewrite, never in between;
        atomic per thread, not across threads (statekeep has no transaction over several
        States), so an interrupted call has dropped them from some threads only: call it
        again to finish. As LangGraph warns, dropping a run whose writes a later run's
        ``DeltaChannel`` is rebuilt from loses them for that channel."""
        drive(self._delete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`; durable on return as the store's ``awrite``/``adelete``
        (atomic per thread, not across threads)."""
        await adrive(self._delete_for_runs(run_ids))

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Flow[None]:
        if run_ids:
            for thread_id in (yield from flows.thread_ids(self._home)):
                yield from moves.rewrite(self._home, self._heads, str(thread_id), moves.drop_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Reclaim the space of old checkpoints. ``keep_latest``: keep only the newest
        checkpoint of each namespace, its pending writes, the values it refers to, and, for
        LangGraph's ``DeltaChannel`` channels, the ancestors (and their writes) back to the
        nearest one holding the channel's value, which LangGraph rebuilds it from; the thread
        is rewritten without the rest (nothing is written when there is nothing to drop).
        ``delete``: remove the threads. Another strategy is a ValueError.

        The rewrite writes the new history into a second State, then marks the old one moved
        (one append: the commit), then removes the old one, so a crash at any step leaves
        the thread as before or as after. Durable on return as the store's ``write`` and
        ``delete``: the space is reclaimed as the store reclaims a deleted State's
        (FileStore: the file is gone; SQLite: its pages are free for reuse). Writers beside
        a prune are safe (a write it did not see makes it start again). Rewrites of one
        thread (``prune``, ``delete_for_runs``) are serialised by a lease of the store's: one
        waits for another (for a crashed one, until its lease expires, 60 s); on a store
        without leases, run them from one process at a time. Atomic per thread, not across
        threads."""
        drive(self._prune(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`; durable on return as the store's ``awrite``/``adelete``
        (atomic per thread, not across threads)."""
        await adrive(self._prune(thread_ids, strategy))

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> Flow[None]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self._delete_thread(thread_id)
            else:
                keep = moves.keep_newest(self.serde)
                yield from moves.rewrite(self._home, self._heads, str(thread_id), keep)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's parent-chain walk for delta channels, over one read of the thread."""
        return drive(self._delta_history(config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`get_delta_channel_history`."""
        return await adrive(self._delta_history(config, channels))

    def _delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Flow[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id = str(config["configurable"]["thread_id"])
        thread = yield from flows.whole(self._home, self._heads, thread_id)
        return delta_history(self.serde, thread or Thread(), config, channels)
