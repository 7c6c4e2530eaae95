"""The contract of ``trim`` (issue 24): a State's entries before a seq, which its latest
compaction's summary stands for, replaced by one base record, every kept seq unchanged,
through the sync and the async API. Skipped for a store without the capability group
"trim" (or with ``supports_trim = False``)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from .._core.errors import LeaseHeldError, StateConflictError, StateNotFoundError
from .._run.state import State, agent_info
from .._store.capabilities import capabilities
from ._helpers import Api
from ._trimrace import TrimRaceContract

asyncio_test = pytest.mark.asyncio

#: Everything a loaded State exposes that a trim must leave as it was (``messages`` apart:
#: the compaction's summary stands for the removed ones).
SAME = (
    "id", "task", "turn", "data", "last_agent", "parent", "call_id", "created_at", "updated_at",
    "stopped_by", "answer", "finished", "pending_calls", "waiting_on_model", "labels", "incarnation",
)  # fmt: skip


def compacted_run(sid: str = "t1", turns: int = 6) -> tuple[State, int]:
    """A saved-to-be State of ``turns`` turns (each a reply with one tool call, its result and
    a stop) with data, a subagent's lineage, labels, and a compaction through its last
    turn's end, then a user message; returns it and that compaction's ``through``."""
    state = State("plan the trip", id=sid, parent="p1", call_id="call-0", labels={"team": "a"})
    state.set_data("plan", {"legs": [1, 2], "ok": True})
    state.set_data("gone", 1)
    for i in range(turns):
        state.begin_run(agent_info("planner", "m1", system="be brief", tools=["search"]))
        state.request("m1")
        state.add_reply(f"turn {i}", [{"id": f"c{i}", "name": "search", "args": {"q": i}}])
        state.add_tool_result(f"c{i}", {"hits": i})
        state.stop("limit", answer=f"answer {i}")
    state.delete_data("gone")
    through = len(state.history) - 1
    state.compact("the story so far", through=through)
    state.add_user("and now?")
    return state, through


def result_seq(state: State, call_id: str) -> int:
    """The seq of ``call_id``'s tool_result in ``state``."""
    seqs = [e["seq"] for e in state.history if e["kind"] == "tool_result" and e.get("call_id") == call_id]
    return int(seqs[0])


class TrimContract(TrimRaceContract):
    """Mixed into :class:`~statekeep.testing.StoreContract`."""

    supports_trim: ClassVar[bool | None] = None  # None: as capabilities(store) says ("trim")
    durable: ClassVar[bool]

    def _needs_trim(self, api: Api) -> None:
        offered = "trim" in capabilities(api.store)
        if self.supports_trim is False or (self.supports_trim is None and not offered):
            pytest.skip(f"{type(api.store).__name__} does not offer trim()")

    async def _trim(self, api: Api, sid: str, before: Any, **options: Any) -> None:
        if api.mode == "async":
            await api.store.atrim(sid, before=before, **options)
        else:
            api.store.trim(sid, before=before, **options)

    async def _trimmed(self, api: Api, sid: str = "t1", **options: Any) -> tuple[State, State, int]:
        self._needs_trim(api)
        state, through = compacted_run(sid, **options)
        await api.save(state)
        before = await api.load(sid)
        await self._trim(api, sid, through + 1)
        return state, before, through

    @asyncio_test
    async def test_trim_keeps_a_base_record_in_place_of_the_removed_entries(self, api: Api) -> None:
        state, _, through = await self._trimmed(api)
        record = await api.read("t1")
        assert record is not None
        base = record.entries[0]
        assert (base["seq"], base["kind"]) == (through, "base")
        assert record.entries[1:] == state.history[through + 1 :]  # every kept seq as it was
        assert [e["seq"] for e in record.entries] == list(range(through, len(state.history)))
        assert base["task"]["text"] == "plan the trip" and base["trimmed"] == through + 1

    @asyncio_test
    async def test_a_trimmed_state_loads_as_the_same_state(self, api: Api) -> None:
        _, before, _ = await self._trimmed(api)
        after = await api.load("t1")
        for name in SAME:
            assert getattr(after, name) == getattr(before, name), name
        assert after.snapshot() == before.snapshot()
        assert after.messages == before.messages[len(before.messages) - len(after.messages) :]
        assert after.history[0]["kind"] == "base"
        assert after.history[1:] == before.history[len(before.history) - len(after.history) + 1 :]

    @asyncio_test
    async def test_a_trim_with_a_call_left_open_keeps_it_open_for_its_result(self, api: Api) -> None:
        self._needs_trim(api)
        state, _ = compacted_run("t2")
        await api.save(state)
        await self._trim(api, "t2", result_seq(state, "c5"))  # the reply removed, its result kept
        record = await api.read("t2")
        assert record is not None
        assert record.entries[0]["open_calls"] == [{"id": "c5", "name": "search", "args": {"q": 5}}]
        loaded = await api.load("t2")
        assert loaded.pending_calls == [] and loaded.stopped_by == "limit" and loaded.answer == "answer 5"

    @asyncio_test
    @pytest.mark.parametrize("since", [0, 1, "base", "after"])
    async def test_read_since_below_the_base_reads_from_the_base(self, api: Api, since: Any) -> None:
        state, _, through = await self._trimmed(api)
        k = {"base": through, "after": through + 2}.get(since, since)
        record = await api.read("t1", since=k)
        assert record is not None
        first = max(k, through)
        assert [e["seq"] for e in record.entries] == list(range(first, len(state.history)))

    @asyncio_test
    async def test_a_trimmed_state_goes_on(self, api: Api) -> None:
        state, before, _ = await self._trimmed(api)
        after = await api.load("t1")
        after.set_data("next", 2)
        after.begin_run(agent_info("planner", "m1", system="be brief", tools=["search"]))
        await api.save(after)
        again = await api.load("t1")
        assert again.data["next"] == 2 and again.turn == before.turn
        assert again.history == after.history
        # The State object saved before the trim goes on too: its next seq is what the store has.
        state.set_data("stale", True)
        with pytest.raises(StateConflictError):
            await api.save(state)  # (another writer appended meanwhile: the usual conflict)

    @asyncio_test
    async def test_a_state_saved_before_the_trim_saves_after_it(self, api: Api) -> None:
        state, _, _ = await self._trimmed(api)
        state.set_data("more", 1)
        await api.save(state)
        assert (await api.load("t1")).data["more"] == 1

    @asyncio_test
    async def test_a_write_resending_entries_up_to_the_base_skips_them(self, api: Api) -> None:
        state, _, through = await self._trimmed(api)
        held = await api.read("t1")
        await api.write("t1", state.history, None)  # the whole history again, the removed part too
        assert await api.read("t1") == held
        changed = dict(state.history[through + 1], changed=True)
        with pytest.raises(StateConflictError):
            await api.write("t1", [changed], None)  # a different entry above the base: a conflict
        assert await api.read("t1") == held

    @asyncio_test
    async def test_fork_below_the_base_is_refused_and_at_it_works(self, api: Api) -> None:
        _, _, through = await self._trimmed(api)
        with pytest.raises(ValueError, match="trimmed"):
            await api.fork("t1", at_seq=through - 1, new_id="f1")
        assert await api.read("f1") is None
        fork = await api.fork("t1", at_seq=through + 1, new_id="f2")
        assert fork.history[0]["kind"] == "base" and fork.task == "plan the trip"
        assert (await api.load("f2")).history[:2] == fork.history[:2]
        whole = await api.fork("t1", new_id="f3")
        assert whole.data == (await api.load("t1")).data

    @asyncio_test
    async def test_trim_where_the_base_is_changes_nothing(self, api: Api) -> None:
        _, _, through = await self._trimmed(api)
        held = await api.read("t1")
        await self._trim(api, "t1", through + 1)
        assert await api.read("t1") == held

    @asyncio_test
    async def test_trim_refuses_what_it_cannot_do_and_changes_nothing(self, api: Api) -> None:
        self._needs_trim(api)
        with pytest.raises(StateNotFoundError):
            await self._trim(api, "nobody", 3)
        plain = State("no compaction", id="plain")
        plain.add_user("hi")
        plain.add_user("again")
        await api.save(plain)
        for before in (1, 2):  # (1 would remove nothing: refused all the same, saying why)
            with pytest.raises(ValueError, match="compact"):
                await self._trim(api, "plain", before)
        state, through = compacted_run("t1")
        await api.save(state)
        held = await api.read("t1")
        with pytest.raises(ValueError, match="at most"):
            await self._trim(api, "t1", through + 2)
        for bad, kind in ((0, ValueError), (-3, ValueError), ("2", TypeError), (2.0, TypeError)):
            with pytest.raises(kind):
                await self._trim(api, "t1", bad)
        assert await api.read("t1") == held
        await self._trim(api, "t1", 5)
        with pytest.raises(ValueError, match="trimmed already"):
            await self._trim(api, "t1", 3)
        record = await api.read("t1")
        assert record is not None and record.entries[0]["seq"] == 4

    @asyncio_test
    async def test_trim_twice_moves_the_base_on(self, api: Api) -> None:
        self._needs_trim(api)
        state, through = compacted_run("t1")
        await api.save(state)
        before = await api.load("t1")
        await self._trim(api, "t1", 6)
        await self._trim(api, "t1", through + 1)
        after = await api.load("t1")
        for name in SAME:
            assert getattr(after, name) == getattr(before, name), name
        record = await api.read("t1")
        assert record is not None and record.entries[0]["trimmed"] == through + 1

    @asyncio_test
    async def test_a_trim_is_there_for_a_new_store_on_the_same_storage(self, api: Api, tmp_path: Any) -> None:
        if not self.durable:
            pytest.skip("the store is not durable")
        _, before, through = await self._trimmed(api)
        other = self.make_store(tmp_path)
        try:
            record = other.read("t1")
            assert record is not None and record.entries[0]["seq"] == through
            assert other.load("t1").data == before.data
        finally:
            other.close()

    @asyncio_test
    async def test_gc_trims_each_state_to_its_latest_compaction_when_asked(
        self, api: Api, tmp_path: Any
    ) -> None:
        self._needs_trim(api)
        make = getattr(self, "make_store_with", None)
        if make is None:
            pytest.skip(f"{type(self).__name__} does not define make_store_with()")
        store = make(tmp_path, trim_compacted=True)
        try:
            other = Api(store, api.mode)
            state, through = compacted_run("g1")
            plain = State("never compacted", id="g2")
            await other.save(state)
            await other.save(plain)
            before = await other.load("g1")
            assert await other.gc() == 0
            record = await other.read("g1")
            assert record is not None and record.entries[0]["seq"] == through
            assert (await other.load("g1")).data == before.data
            assert (await other.load("g2")).history == plain.history
            assert await other.gc() == 0  # again: nothing more to trim
        finally:
            store.close()
        record = await api.read("g1")  # a store without it trims nothing at gc
        if record is not None:
            assert record.entries[0]["seq"] == through

    @asyncio_test
    async def test_a_leased_state_is_trimmed_only_with_its_lease(self, api: Api) -> None:
        self._needs_trim(api)
        if not getattr(self, "supports_leases", False):
            pytest.skip(f"{type(self).__name__}.supports_leases is False")
        state, through = compacted_run("t1")
        await api.save(state)
        held = await api.read("t1")
        store = api.store
        lease = store.acquire("t1", "worker-1", 600)  # type: ignore[attr-defined]
        try:
            with pytest.raises(LeaseHeldError, match="worker-1"):
                await self._trim(api, "t1", through + 1)
            assert await api.read("t1") == held
            await self._trim(api, "t1", through + 1, lease=lease)
            record = await api.read("t1")
            assert record is not None and record.entries[0]["seq"] == through
        finally:
            store.release(lease)  # type: ignore[attr-defined]
