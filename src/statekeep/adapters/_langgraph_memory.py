"""``StatekeepMemoryStore``: LangGraph's long-term memory (a ``BaseStore``) on statekeep's
agent memory, with revisions and compare-and-set that LangGraph's own stores lack."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    validate_op_namespace,
)

from .._core.codec import check as check_json
from .._runtime.bridge import run_sync
from .._store.contract import Store
from ._langgraph_memory_match import check_filter, texts_of
from ._langgraph_memory_ops import MemoryOps

#: The agent memory scope the store uses unless told (``scope=``).
SCOPE = "langgraph"
#: Puts of a batch written at once.
_WRITES_AT_ONCE = 64
_TTL_KEYS = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")
Vectors = dict[int, dict[str, list[float]]]


class StatekeepMemoryStore(BaseStore):
    """LangGraph's long-term memory store on a statekeep ``store`` (any of them): a one-line
    swap for ``InMemoryStore`` or ``PostgresStore``::

        graph = builder.compile(store=StatekeepMemoryStore(SQLiteStore("agent.db")))

    Items live in the store's agent memory (``store.memory(scope)``, scope ``"langgraph"``
    unless given), one key per item (see the docs page for how a namespace
    and key become one, hashed when long). ``put``/``delete``/``batch`` with a put are durable
    on return as the store's ``write`` is (FileStore, SQLite, Postgres: on disk); every
    process that opens the same storage sees the same items.

    - ``index={"embed": ..., "dims": ..., "fields": [...]}``: semantic search as LangGraph's
      stores do it; embeddings are computed on put (the sync API calls ``embed_documents``,
      the async one ``aembed_documents``) and stored with the item; a search scores every
      item under its namespace prefix by cosine (brute force: fine up to about 10k items
      in a namespace; see the docs for the figure).
    - ``ttl={"default_ttl": minutes, "refresh_on_read": True}`` (LangGraph's ``TTLConfig``)
      and ``put(..., ttl=minutes)``: the item's record gets the store's own expiry, judged by
      the store's clock, so an expired item is absent to every read at once; a read (get or
      search, ``refresh_ttl`` as LangGraph's) moves it a full TTL on only once less than half
      is left, so most reads write nothing. ``sweep_ttl()`` removes expired items (the
      store's ``gc`` of this scope); there is no background sweeper thread. A deleted item's
      record stays seven days (so a stale ``revision`` still fails), then ``sweep_ttl()``
      removes it too.
    - A batch's values are all checked (JSON) before any is written; a failure of the storage
      itself may still leave some of a batch's puts written (it is not one transaction).
    - With the store's ``redact=``, an item's value is judged as any agent memory value; its
      namespace, key and embeddings never are.
    - Beyond LangGraph: items read back are :class:`RevisedItem`/:class:`RevisedSearchItem`
      with a ``revision`` (1 after the first put, one more per change), and
      ``put(..., revision=N)``/``delete(..., revision=N)`` write only if the item is at
      revision ``N`` (``0``: only if absent), else raise :class:`~statekeep.StateConflictError`
      and write nothing: compare-and-set across processes.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        scope: str = SCOPE,
    ) -> None:
        self.store = store
        self.ttl_config = _checked_ttl(ttl)
        if index is not None and (not isinstance(index, Mapping) or "embed" not in index):
            raise ValueError(f'index must be a dict with "embed" (and "dims", "fields"), got {index!r}')
        self.index_config = None if index is None else IndexConfig(**index)
        self.embeddings = None
        self._fields: list[str] = ["$"]
        if index is not None:
            self.embeddings = ensure_embeddings(index["embed"])
            self._fields = list(index.get("fields") or ["$"])
        self._ops = MemoryOps(store.memory(scope))

    def __repr__(self) -> str:
        return f"StatekeepMemoryStore({self.store!r}, scope={self._ops.memory.scope!r})"

    # -- LangGraph's batch API -----------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (reads see the store as it was before the batch's puts, as
        LangGraph's stores do; several puts of one item: the last wins). Puts are durable
        when it returns."""
        listed = _checked_ops(ops)
        texts, queries = self._texts(listed)
        documents = self.embeddings.embed_documents(texts) if texts and self.embeddings else []
        vectors = self._vectors(listed, texts, documents)
        found = {q: self.embeddings.embed_query(q) for q in queries} if self.embeddings else {}
        return run_sync(self._run(listed, vectors, found), "abatch")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The async :meth:`batch` (embeddings by the model's async methods)."""
        listed = _checked_ops(ops)
        texts, queries = self._texts(listed)
        documents = await self.embeddings.aembed_documents(texts) if texts and self.embeddings else []
        vectors = self._vectors(listed, texts, documents)
        found = {q: await self.embeddings.aembed_query(q) for q in queries} if self.embeddings else {}
        return await self._run(listed, vectors, found)

    async def _run(self, ops: list[Op], vectors: Vectors, queries: dict[str, list[float]]) -> list[Result]:
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp]] = {}
        clock = self._ops.clock()  # the store's time, asked at most once for the batch
        for n, op in enumerate(ops):
            if isinstance(op, GetOp):
                results.append(await self._ops.get(op, clock))
            elif isinstance(op, SearchOp):
                query = queries.get(op.query) if op.query else None
                results.append(await self._ops.search(op, query, clock))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._ops.list_namespaces(op))
            else:
                puts[(tuple(op.namespace), op.key)] = (n, op)
                results.append(None)
        # Items apart are written at once (a store commits them together where it can);
        # every put is done, or failed, before the batch returns. Not atomic across items:
        # every value was checked before anything is written (_checked_ops), but a failure
        # of the storage itself (a lost connection) may leave some of the puts written.
        pending = list(puts.values())
        if any(op.value is None or op.ttl is not None for _, op in pending):
            await clock()  # asked once here, not by each write at once
        for at in range(0, len(pending), _WRITES_AT_ONCE):
            part = pending[at : at + _WRITES_AT_ONCE]
            done = await asyncio.gather(
                *(self._ops.put(op, vectors.get(n), clock) for n, op in part), return_exceptions=True
            )
            failed = [e for e in done if isinstance(e, BaseException)]
            if failed:
                raise failed[0]
        return results

    def _texts(self, ops: list[Op]) -> tuple[list[str], list[str]]:
        """The distinct texts the puts embed, and the distinct search queries."""
        if self.embeddings is None:
            return [], []
        texts: dict[str, None] = {}
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None and op.index is not False:
                texts.update((t, None) for _, t in texts_of(op.value, self._paths(op)))
        queries = {op.query: None for op in ops if isinstance(op, SearchOp) and op.query}
        return list(texts), list(queries)

    def _paths(self, op: PutOp) -> list[str]:
        return self._fields if op.index is None else list(op.index)  # type: ignore[arg-type]

    def _vectors(self, ops: list[Op], texts: list[str], embedded: Sequence[Sequence[float]]) -> Vectors:
        if len(embedded) != len(texts):
            raise ValueError(f"the embeddings model returned {len(embedded)} vectors for {len(texts)} texts")
        by_text = dict(zip(texts, embedded, strict=True))
        out: Vectors = {}
        for n, op in enumerate(ops):
            if isinstance(op, PutOp) and op.value is not None and op.index is not False and by_text:
                paths = texts_of(op.value, self._paths(op))
                out[n] = {path: list(by_text[text]) for path, text in paths}
        return out

    # -- compare-and-set ---------------------------------------------------------------

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        revision: int | None = None,
    ) -> None:
        """As LangGraph's ``put``; with ``revision``, only if the item is at that revision
        now (``0``: only if absent), else StateConflictError and nothing is written. Durable
        on return as the store's ``write`` is."""
        op = self._put_op(namespace, key, value, index, ttl)
        if revision is None:
            self.batch([op])
            return
        texts, _ = self._texts([op])
        documents = self.embeddings.embed_documents(texts) if texts and self.embeddings else []
        vectors = self._vectors([op], texts, documents).get(0)
        run_sync(self._ops.put(op, vectors, self._ops.clock(), revision), "aput")

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
        revision: int | None = None,
    ) -> None:
        """The async :meth:`put`."""
        op = self._put_op(namespace, key, value, index, ttl)
        if revision is None:
            await self.abatch([op])
            return
        texts, _ = self._texts([op])
        documents = await self.embeddings.aembed_documents(texts) if texts and self.embeddings else []
        await self._ops.put(op, self._vectors([op], texts, documents).get(0), self._ops.clock(), revision)

    def delete(self, namespace: tuple[str, ...], key: str, *, revision: int | None = None) -> None:
        """As LangGraph's ``delete``; with ``revision``, only if the item is at that revision
        (else StateConflictError, nothing removed). Durable on return as ``put`` is."""
        op = PutOp(_labels(namespace), str(key), None, ttl=None)
        _checked_ops([op])
        run_sync(self._ops.put(op, None, self._ops.clock(), revision), "adelete")

    async def adelete(self, namespace: tuple[str, ...], key: str, *, revision: int | None = None) -> None:
        """The async :meth:`delete`."""
        op = PutOp(_labels(namespace), str(key), None, ttl=None)
        _checked_ops([op])
        await self._ops.put(op, None, self._ops.clock(), revision)

    def _put_op(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None,
        ttl: float | NotProvided | None,
    ) -> PutOp:
        if ttl is NOT_PROVIDED:
            ttl = (self.ttl_config or {}).get("default_ttl")
        op = PutOp(tuple(namespace), str(key), value, index=index, ttl=ttl)  # type: ignore[arg-type]
        _checked_ops([op])
        return op

    # -- TTL ---------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Remove the expired items, and the records of items deleted more than seven days
        ago, now; return how many records went. Both are absent to reads and listings
        already: this frees their space. Durable on return."""
        return run_sync(self._ops.sweep(), "asweep_ttl")

    async def asweep_ttl(self) -> int:
        """The async :meth:`sweep_ttl`."""
        return await self._ops.sweep()


def _labels(namespace: Iterable[str]) -> tuple[str, ...]:
    labels = tuple(namespace)
    validate_op_namespace(GetOp(labels, ""))
    return labels


def _checked_ops(ops: Iterable[Op]) -> list[Op]:
    """``ops`` as a list, each checked before anything is read or written."""
    listed = list(ops)
    for op in listed:
        if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
            raise ValueError(f"unknown operation {op!r}: give GetOp, SearchOp, ListNamespacesOp or PutOp")
        validate_op_namespace(op)
        _check_text(op)
        if isinstance(op, SearchOp):
            check_filter(op.filter)
        if isinstance(op, PutOp) and op.value is not None:
            if not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(
                    f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
                )
            if not isinstance(op.value, Mapping):
                raise TypeError(f"a store item's value must be a dict, got {type(op.value).__name__}")
            _check_minutes(op.ttl, "ttl")
            try:  # as the store's codec will, before anything of the batch is written
                check_json(dict(op.value), "value", 1)
            except TypeError as exc:
                raise TypeError(
                    f"store item {op.key!r} in namespace {op.namespace}: {exc}; nothing was written"
                ) from exc
    return listed


def _check_text(op: Op) -> None:
    """ValueError for a namespace label or key that is no valid text (a lone surrogate):
    statekeep stores text as UTF-8, which cannot hold one."""
    labels = op.namespace_prefix if isinstance(op, SearchOp) else getattr(op, "namespace", ())
    texts = [*labels, *([op.key] if isinstance(op, GetOp | PutOp) else [])]
    for text in texts:
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{text!r} (in {tuple(labels)}, key {getattr(op, 'key', None)!r}) holds a lone "
                f"surrogate ({exc.reason}), which UTF-8 text cannot: decode the text it came from "
                "properly, or replace it"
            ) from None


def _check_minutes(value: object, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{what} must be a number of minutes > 0, or None for no expiry; got {value!r}")


def _checked_ttl(ttl: TTLConfig | None) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise TypeError(f"ttl must be a dict (LangGraph's TTLConfig), got {type(ttl).__name__}")
    unknown = set(ttl) - set(_TTL_KEYS)
    if unknown:
        raise ValueError(f"unknown ttl setting(s) {sorted(unknown)}: use {', '.join(_TTL_KEYS)}")
    _check_minutes(ttl.get("default_ttl"), "default_ttl")
    if type(ttl.get("refresh_on_read", True)) is not bool:
        raise ValueError(f"refresh_on_read must be True or False, got {ttl.get('refresh_on_read')!r}")
    return TTLConfig(**ttl)
