"""What the contract tests are written with: sample entries and snapshots, and one store seen
through its sync or its async methods (:class:`Api`)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any, Protocol

from .._core.records import Record, SavedState
from .._run.state import State
from .._store.contract import Store


def snapshot(
    task: str = "task", *, turn: int = 0, updated: str = "2026-01-01T00:00:00+00:00"
) -> dict[str, Any]:
    """A snapshot that ``SavedState.from_snapshot`` accepts, so ``list()`` shows its State."""
    return {
        "task": task,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": updated,
        "turn": turn,
        "stopped_by": None,
        "finished": False,
    }


def entries(start: int, count: int, **extra: Any) -> list[dict[str, Any]]:
    """``count`` history entries with seqs from ``start``, each with ``extra`` keys."""
    return [{"seq": s, "kind": "note", "text": f"entry {s}", **extra} for s in range(start, start + count)]


class Api:
    """One store seen through its sync or its async methods (``mode``), always awaited by tests.

    The sync methods are called straight from the test's running event loop, which is one of
    the situations they must handle.
    """

    def __init__(self, store: Store, mode: str) -> None:
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        self.store, self.mode = store, mode

    async def write(
        self,
        state_id: str,
        ents: list[dict[str, Any]],
        snap: dict[str, Any] | None,
        *,
        create: bool = False,
        **options: Any,
    ) -> None:
        """``options``: e.g. ``expect_next``, passed only when given (not every store takes them)."""
        if self.mode == "async":
            await self.store.awrite(state_id, ents, snap, create=create, **options)
        else:
            self.store.write(state_id, ents, snap, create=create, **options)

    async def read(self, state_id: str, *, since: int | None = None) -> Record | None:
        # Without since, the plain call: the oldest stores of one's own take no keyword.
        if since is None:
            return await self.store.aread(state_id) if self.mode == "async" else self.store.read(state_id)
        if self.mode == "async":
            return await self.store.aread(state_id, since=since)
        return self.store.read(state_id, since=since)

    async def list(self, **filters: Any) -> list[SavedState]:
        return await self.store.alist(**filters) if self.mode == "async" else self.store.list(**filters)

    async def delete(self, state_id: str, *, children: bool = False) -> None:
        # Without children, the plain call: a store of one's own may not take the keyword.
        if self.mode == "async":
            await (self.store.adelete(state_id, children=True) if children else self.store.adelete(state_id))
        elif children:
            self.store.delete(state_id, children=True)
        else:
            self.store.delete(state_id)

    async def walk(self, **filters: Any) -> builtins.list[SavedState]:
        """Every row ``iter_states`` / ``aiter_states`` gives."""
        if self.mode == "async":
            return [row async for row in self.store.aiter_states(**filters)]
        return list(self.store.iter_states(**filters))

    async def save(self, state: State) -> None:
        if self.mode == "async":
            await self.store.asave(state)
        else:
            self.store.save(state)

    async def load(self, state_id: str) -> State:
        return await self.store.aload(state_id) if self.mode == "async" else self.store.load(state_id)

    async def fork(self, state_id: str, **options: Any) -> State:
        if self.mode == "async":
            return await self.store.afork(state_id, **options)
        return self.store.fork(state_id, **options)

    async def gc(self, **options: Any) -> int:
        return await self.store.agc(**options) if self.mode == "async" else self.store.gc(**options)


class MakesStores(Protocol):
    """What the model's state machine needs of a :class:`StoreContract`: how to make the store,
    and what it offers."""

    supports_list: bool
    supports_delete: bool
    durable: bool
    statekeep_messages: bool

    def make_store(self, tmp_path: Path) -> Store: ...
