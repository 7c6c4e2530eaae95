"""The runs part of the Store contract: what a saved State's listing row carries (agent,
parent, labels, expiry, fork source, status), labels checked at save time, older snapshots,
subagent lineage (``child``, ``list(parent=)``, ``delete(children=True)``) and ``fork``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

import pytest

from .._core.errors import StateExistsError, StateNotFoundError
from .._core.records import SavedState
from .._run.state import State, agent_info
from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio
FAR = datetime(2100, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def run_with_cut_call(state_id: str) -> State:
    """A finished run of 8 entries whose seq 3 is a reply calling a tool (result at seq 4):
    0 task, 1 run_start, 2 request, 3 reply + call, 4 tool result, 5 request, 6 reply, 7 stop."""
    state = State("Plan the trip", id=state_id, labels={"env": "prod"})
    state.begin_run(agent_info("planner", "some-model"))
    state.request("some-model")
    state.add_reply("Looking.", [{"id": "call-1", "name": "search", "args": {"q": "trains"}}])
    state.add_tool_result("call-1", "3 trains")
    state.request("some-model")
    state.add_reply("Take the 9:15.")
    state.finish("the 9:15")
    return state


class LineageContract:
    """Mixed into :class:`StoreContract`: SavedState fields, labels, lineage and fork."""

    supports_query: ClassVar[bool]
    supports_delete: ClassVar[bool]
    supports_list: ClassVar[bool]

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...

    async def row(self, api: Api, state_id: str) -> SavedState:
        self.needs("supports_list")
        found = [r for r in await api.list() if r.id == state_id]
        assert len(found) == 1, f"{state_id!r} listed {len(found)} times"
        return found[0]

    # -- what a saved State's row carries ---------------------------------------------------

    @asyncio_test
    async def test_fields_saved_state_carries_agent_labels_expiry_and_status(self, api: Api) -> None:
        state = State("Book a table", id="booking", labels={"user": "u42", "env": "prod"})
        state.begin_run(agent_info("booker", "some-model"))
        state.expire_at(FAR)
        await api.save(state)
        row = await self.row(api, "booking")
        assert (row.agent, row.parent, row.labels) == ("booker", None, {"user": "u42", "env": "prod"})
        assert (row.expires_at, row.forked_from, row.status) == (FAR, None, "running")
        state.stop("limit")
        await api.save(state)
        assert (await self.row(api, "booking")).status == "limit"
        state.finish("booked")
        state.labels["user"] = "u43"
        del state.labels["env"]
        state.expire_at(None)
        await api.save(state)
        row = await self.row(api, "booking")
        assert (row.status, row.finished, row.labels, row.expires_at) == (
            "finished",
            True,
            {"user": "u43"},
            None,
        )

    @asyncio_test
    async def test_fields_labels_and_expiry_come_back_on_load(self, api: Api) -> None:
        state = State("t", id="kept", labels={"team": "search"})
        state.expire_at(FAR)
        await api.save(state)
        loaded = await api.load("kept")
        assert (loaded.labels, loaded.expires_at, loaded.parent, loaded.forked_from) == (
            {"team": "search"}, FAR, None, None,
        )  # fmt: skip
        loaded.labels["more"] = "yes"
        loaded.add_user("go on")
        await api.save(loaded)
        assert (await api.load("kept")).labels == {"team": "search", "more": "yes"}

    @pytest.mark.parametrize(
        "key, value", [("bad key!", "x"), ("", "x"), ("k", "nul\x00"), ("k", 5), (".dot", "x")]
    )
    @asyncio_test
    async def test_fields_bad_label_is_refused_at_save_naming_it(
        self, api: Api, key: str, value: object
    ) -> None:
        state = State("t", id="labelled")
        await api.save(state)
        state.add_user("more")
        state.labels[key] = value  # type: ignore[assignment]
        with pytest.raises(ValueError, match=repr(key)):
            await api.save(state)
        record = await api.read("labelled")
        assert record is not None and len(record.entries) == 1  # nothing written
        del state.labels[key]
        state.labels["fine"] = "yes"
        await api.save(state)  # fixed: the next save works
        loaded = await api.load("labelled")
        assert (len(loaded.history), loaded.labels) == (2, {"fine": "yes"})

    @asyncio_test
    async def test_fields_bad_label_on_a_first_save_creates_nothing(self, api: Api) -> None:
        state = State("t", id="fresh", labels={"ok": "1"})
        state.labels["no spaces"] = "x"
        with pytest.raises(ValueError, match="'no spaces'"):
            await api.save(state)
        assert await api.read("fresh") is None
        del state.labels["no spaces"]
        await api.save(state)
        assert (await api.load("fresh")).labels == {"ok": "1"}

    @asyncio_test
    async def test_fields_older_snapshots_without_the_keys_list_and_load(self, api: Api) -> None:
        old = State("An older run", id="older")
        snap = {
            k: v
            for k, v in old.snapshot().items()
            if k not in ("agent", "parent", "labels", "expires_at", "forked_from")
        }
        await api.write("older", old.history, snap | {"v": 1}, create=True)
        await api.write("raw", entries(0, 1), snapshot("raw"), create=True)
        loaded = await api.load("older")
        assert (loaded.task, loaded.labels, loaded.parent, loaded.expires_at) == (
            "An older run",
            {},
            None,
            None,
        )
        if self.supports_list:
            rows = {r.id: r for r in await api.list()}
            for sid in ("older", "raw"):
                row = rows[sid]
                assert (row.agent, row.parent, row.labels, row.expires_at, row.forked_from) == (
                    None,
                    None,
                    {},
                    None,
                    None,
                )
                assert row.status == "running"

    # -- subagents ------------------------------------------------------------------------

    @asyncio_test
    async def test_lineage_child_records_its_parent_and_call(self, api: Api) -> None:
        parent = State("Research", id="boss")
        await api.save(parent)
        kid = parent.child("Find sources", id="kid", labels={"role": "searcher"}, call_id="call-7")
        await api.save(kid)
        loaded = await api.load("kid")
        assert (loaded.parent, loaded.call_id, loaded.labels) == ("boss", "call-7", {"role": "searcher"})
        first = loaded.history[0]
        assert (first["kind"], first["parent"], first["call_id"]) == ("task", "boss", "call-7")
        plain = parent.child("No call")
        await api.save(plain)
        assert (await api.load(plain.id)).call_id is None
        if self.supports_list:
            assert (await self.row(api, "kid")).parent == "boss"

    @asyncio_test
    async def test_lineage_list_parent_lists_the_children(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        root = State("root", id="root")
        await api.save(root)
        for sid in ("k1", "k2"):
            await api.save(root.child(sid, id=sid))
        await api.save(State("grandchild", id="g1", parent="k1"))
        await api.save(State("other", id="other"))
        assert sorted(r.id for r in await api.list(parent="root")) == ["k1", "k2"]
        assert [r.id for r in await api.list(parent="k1")] == ["g1"]
        assert await api.list(parent="other") == []

    @asyncio_test
    async def test_lineage_delete_children_removes_the_tree(self, api: Api) -> None:
        self.needs("supports_list", "supports_query", "supports_delete")
        root = State("root", id="root")
        await api.save(root)
        for sid in ("k1", "k2"):
            await api.save(root.child(sid, id=sid))
        await api.save(State("grandchild", id="g1", parent="k1"))
        await api.save(State("other", id="other"))
        await api.delete("k2")  # the default deletes one State only
        assert await api.read("k2") is None and await api.read("root") is not None
        await api.save(State("k2 again", id="k2", parent="root"))
        await api.delete("root", children=True)
        for sid in ("root", "k1", "k2", "g1"):
            assert await api.read(sid) is None, sid
        assert [r.id for r in await api.list()] == ["other"]
        await api.delete("nobody", children=True)  # nothing there: nothing happens

    @asyncio_test
    async def test_lineage_delete_without_children_keeps_them(self, api: Api) -> None:
        self.needs("supports_delete")
        root = State("root", id="root")
        await api.save(root)
        await api.save(root.child("kid", id="kid"))
        await api.delete("root")
        assert await api.read("root") is None
        assert (await api.load("kid")).parent == "root"

    # -- fork -------------------------------------------------------------------------------

    @asyncio_test
    async def test_fork_copies_the_whole_history_by_default(self, api: Api) -> None:
        source = run_with_cut_call("src")
        await api.save(source)
        before = await api.read("src")
        fork = await api.fork("src", new_id="copy")
        assert (fork.id, fork.history, fork.labels) == ("copy", source.history, {"env": "prod"})
        assert fork.forked_from == {"id": "src", "seq": 7} and fork.finished
        loaded = await api.load("copy")
        assert loaded.history == source.history and loaded.forked_from == {"id": "src", "seq": 7}
        assert await api.read("src") == before  # the source is never changed
        if self.supports_list:
            row = await self.row(api, "copy")
            assert (row.forked_from, row.labels, row.agent) == (
                {"id": "src", "seq": 7},
                {"env": "prod"},
                "planner",
            )

    @asyncio_test
    async def test_fork_at_seq_cuts_and_repairs_as_load_does(self, api: Api) -> None:
        source = run_with_cut_call("src")
        await api.save(source)
        before = await api.read("src")
        fork = await api.fork("src", at_seq=3, labels={"try": "2"})
        assert fork.id != "src" and fork.labels == {"try": "2"}
        assert fork.forked_from == {"id": "src", "seq": 3}
        assert fork.history[:4] == source.history[:4]
        repair = fork.history[4]
        assert (repair["kind"], repair["call_id"], repair["outcome"]) == ("tool_result", "call-1", "unknown")
        assert fork.pending_calls == [] and not fork.finished
        record = await api.read(fork.id)
        assert record is not None and record.entries == source.history[:4]  # the repair waits for a save
        # call-1 was the source's: resolved in the fork, it keeps the source's idempotency key
        assert before is not None and record.snapshot is not None
        assert record.snapshot["key_origins"] == {"call-1": ["src", before.incarnation]}
        assert await api.load(fork.id) == fork
        fork.request("some-model")
        await api.save(fork)
        saved = await api.read(fork.id)
        assert saved is not None and [e["kind"] for e in saved.entries[4:]] == [
            "tool_result",
            "model_request",
        ]
        assert await api.read("src") == before

    @asyncio_test
    async def test_fork_to_a_taken_id_writes_nothing(self, api: Api) -> None:
        await api.save(run_with_cut_call("src"))
        taken = State("already here", id="taken")
        await api.save(taken)
        source_before, taken_before = await api.read("src"), await api.read("taken")
        with pytest.raises(StateExistsError):
            await api.fork("src", new_id="taken")
        assert (await api.read("src"), await api.read("taken")) == (source_before, taken_before)

    @asyncio_test
    async def test_fork_refuses_unknown_sources_and_seqs(self, api: Api) -> None:
        with pytest.raises(StateNotFoundError):
            await api.fork("nobody")
        await api.save(run_with_cut_call("src"))
        for bad in (8, -1, "3"):
            with pytest.raises(ValueError, match="at_seq"):
                await api.fork("src", at_seq=bad, new_id="never")
        with pytest.raises(ValueError, match="invalid State id"):
            await api.fork("src", new_id="not an id")
        with pytest.raises(ValueError, match="'bad key!'"):
            await api.fork("src", new_id="never", labels={"bad key!": "x"})
        assert await api.read("never") is None

    @asyncio_test
    async def test_fork_of_a_fork_and_of_a_child(self, api: Api) -> None:
        parent = State("boss", id="boss")
        await api.save(parent)
        kid = parent.child("kid", id="kid")
        kid.add_user("one")
        await api.save(kid)
        first = await api.fork("kid", new_id="f1", at_seq=0)
        second = await api.fork("f1", new_id="f2")
        assert (first.parent, second.parent) == ("boss", "boss")  # the history says who spawned it
        assert second.forked_from == {"id": "f1", "seq": 0} and len(second.history) == 1
