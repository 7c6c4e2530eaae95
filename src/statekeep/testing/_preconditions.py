"""The write precondition part of the contract: ``expect_next=N`` refuses a write, and writes
nothing, unless the State's next seq is exactly N (a writer with a stale view of a State that
was deleted and made again shorter must not append to it); ``save`` passes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from .._core.errors import StateConflictError
from .._core.records import Record
from .._run.state import State
from .._store.expect import takes_expect_next
from .._store.incarnations import takes_incarnation
from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio


class PreconditionContract:
    """Mixed into :class:`StoreContract`.

    ``supports_expect_next``: the store's ``write``/``awrite`` take ``expect_next=`` and check
    it atomically with the write. None (the default): whether its write takes the parameter;
    a store without it has these tests skipped, saying so.
    """

    supports_expect_next: ClassVar[bool | None] = None

    if TYPE_CHECKING:

        def raises(self, kind: type[BaseException], match: str) -> Any: ...
        def needs(self, *flags: str) -> None: ...

    def expects(self, api: Api) -> None:
        flag = self.supports_expect_next
        takes = takes_expect_next(api.store)
        if flag is None and not takes:
            pytest.skip(
                f"{type(api.store).__name__}.write() takes no expect_next (set "
                f"{type(self).__name__}.supports_expect_next = True once it does)"
            )
        if flag is False:
            pytest.skip(f"{type(self).__name__}.supports_expect_next is False")
        if not takes:
            pytest.fail(
                f"{type(self).__name__}.supports_expect_next is True, but "
                f"{type(api.store).__name__}.write() takes no expect_next: add it, or set the flag False"
            )

    async def rebuilt_shorter(self, api: Api) -> None:
        """State "a": written with 3 entries, deleted, and made again with 2 (another writer)."""
        self.needs("supports_delete")
        await api.write("a", entries(0, 3), snapshot("old"), create=True)
        await api.delete("a")
        await api.write("a", entries(0, 2, other=True), snapshot("new"), create=True)

    @asyncio_test
    async def test_expect_next_accepts_the_next_seq(self, api: Api) -> None:
        self.expects(api)
        await api.write("a", entries(0, 2), snapshot(), create=True, expect_next=0)
        await api.write("a", entries(2, 1), snapshot(turn=1), expect_next=2)
        # The last entry sent again (skipped as stored), then a new one: expect the end seen.
        await api.write("a", entries(2, 2), snapshot(turn=2), expect_next=3)
        await api.write("a", [], snapshot(turn=3), expect_next=4)
        assert await api.read("a") == Record(entries(0, 4), snapshot(turn=3))

    @asyncio_test
    async def test_expect_next_refuses_a_stale_writer_and_writes_nothing(self, api: Api) -> None:
        self.expects(api)
        await self.rebuilt_shorter(api)
        # The stale writer saw 3 entries: it sends its last one again, and a new one.
        stale = entries(2, 2)
        with self.raises(StateConflictError, "has next seq 2, but this write expected 3"):
            await api.write("a", stale, snapshot("stale", turn=9), expect_next=3)
        with self.raises(StateConflictError, "has next seq 2, but this write expected 3"):
            await api.write("a", [], snapshot("stale", turn=9), expect_next=3)
        assert await api.read("a") == Record(entries(0, 2, other=True), snapshot("new"))

    @asyncio_test
    async def test_save_of_a_stale_state_is_a_conflict(self, api: Api) -> None:
        self.expects(api)
        state = State("task", id="s")
        state.add_user("one")
        state.add_user("two")
        await api.save(state)
        self.needs("supports_delete")
        await api.delete("s")
        again = State("task", id="s")
        await api.save(again)
        kept = await api.read("s")
        state.add_user("three")
        # A store that keeps incarnations checks that first: the State was made again.
        why = "created again" if takes_incarnation(type(api.store)) else "expected"
        with self.raises(StateConflictError, why):
            await api.save(state)
        assert await api.read("s") == kept
