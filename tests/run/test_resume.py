"""Saving, loading and repairing a State (the agent loop itself: tests/agent/test_agent.py).

- ``save`` writes only what is new, and every history kind round-trips through every store;
- crash tests: a real child process running an agent is killed with SIGKILL in the middle of a
  tool call and while waiting on the model; the State is loaded, repaired and finished;
- ResumeWarning, damaged and newer-format States, conflicts, failed saves, a 10,000-entry State.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from statekeep import (
    FORMAT_VERSION,
    Agent,
    CorruptStateError,
    FileStore,
    MemoryStore,
    Reply,
    ResumeWarning,
    SavedState,
    ScriptedModel,
    State,
    StateConflictError,
    Store,
    agent_info,
)
from statekeep._run.resume import INTERRUPTED_MODEL, INTERRUPTED_TOOL
from statekeep.stores import OsIO
from tests.support.agents import (
    call,
    changed_agent,
    kinds,
    lookup,
    no_warnings,
    one_resume_warning,
    saved_after_one_run,
    t1,
    t2,
)
from tests.support.children import agent_child as child

CHILD = child.__file__
CHILD_TIMEOUT = 60.0  # a watchdog against a hung child, never reached when things work
SNAPSHOT_KEYS = {"v", "task", "created_at", "updated_at", "turn", "stopped_by", "finished", "seq"} | {
    "agent",
    "parent",
    "labels",
    "expires_at",
    "forked_from",
}
AT = "2026-01-01T00:00:00+00:00"


# -- save writes only what is new ---------------------------------------------------------


@dataclass
class Write:
    entries: list[dict[str, Any]]
    snapshot: dict[str, Any] | None
    create: bool


class Recording:
    """A store mixin that records every write it is asked to do (before doing it)."""

    async def awrite(
        self,
        state_id: str,
        entries: Any,
        snapshot: dict[str, Any] | None,
        *,
        create: bool = False,
    ) -> None:
        self.__dict__.setdefault("writes", []).append(Write(list(entries), snapshot, create))
        await super().awrite(state_id, entries, snapshot, create=create)  # type: ignore[misc]


class RecordingMemoryStore(Recording, MemoryStore):
    writes: list[Write]


class RecordingFileStore(Recording, FileStore):
    writes: list[Write]


@pytest.fixture(params=["memory", "file"])
def recording(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    s = RecordingMemoryStore() if request.param == "memory" else RecordingFileStore(tmp_path / "rec")
    yield s
    s.close()


def test_save_writes_only_what_is_new(recording: Any) -> None:
    state = State("incremental", id="inc")
    recording.save(state)
    state.add_user("one more")
    recording.save(state)
    recording.save(state)  # nothing new: the snapshot only
    first, second, third = recording.writes
    assert first == Write(state.history[:1], first.snapshot, True)
    assert second.entries == [state.history[1]] and not second.create
    assert second.snapshot == state.snapshot() and second.snapshot["seq"] == 1  # type: ignore[index]
    assert third.entries == [] and not third.create
    assert recording.load("inc") == state


async def test_asave_writes_only_what_is_new(recording: Any) -> None:
    state = State("incremental async", id="inc-async")
    await recording.asave(state)
    state.set_data("k", 1)
    await recording.asave(state)
    assert [len(w.entries) for w in recording.writes] == [1, 1]
    assert recording.writes[1].entries == [state.history[1]]
    assert await recording.aload("inc-async") == state


def test_an_agent_run_saves_one_new_entry_per_write(recording: Any) -> None:
    state = State("one at a time", id="one-at-a-time")
    model = ScriptedModel([Reply("", [call("c1", "lookup", city="Paris"), call("c2", "t1")]), "done"])
    Agent(model, tools=[lookup, t1], store=recording).run(state)
    writes = recording.writes
    assert writes[0].create and kinds(writes[0].entries) == ["task", "run_start"]
    assert all(len(w.entries) == 1 and not w.create for w in writes[1:])
    assert [e for w in writes for e in w.entries] == state.history
    assert writes[-1].snapshot == state.snapshot()


def every_kind_state(state_id: str) -> State:
    """A State whose history uses every kind, with awkward values."""
    state = State('Every kind: ünïcode ✓ \u2028 "quotes" \\ back', id=state_id)
    state.add_user("a user message")
    state.begin_run(agent_info("agent-1", "model-1", system="sys", tools=["b", "a"]))
    state.request("model-1")
    state.add_reply(
        "calling",
        [call("c1", "a", n=1, nested={"x": [1, 2.5, None, True]}), call("c2", "b")],
        usage={"input_tokens": 12, "output_tokens": 3},
        stop_reason="tool_use",
    )
    state.add_tool_result("c1", {"rows": [1, 2], "text": "é"})
    state.add_tool_result("c2", "it broke", is_error=True)
    state.set_data("cart", {"items": ["x"], "total": 9.75})
    state.request("model-1")
    state.add_model_error("timeout after 30s")
    state.add_error("TimeoutError: timeout after 30s")
    state.delete_data("cart")
    state.set_data("kept", [1, "two"])
    state.stop("limit", answer={"partial": True})
    state.begin_run(agent_info("agent-2", "model-2", tools=["a"]))
    state.request("model-2")
    state.add_reply("the answer")
    state.finish("the answer")
    return state


def test_every_history_kind_round_trips_through_every_store(store: Store) -> None:
    state = every_kind_state("every-kind")
    assert set(kinds(state.history)) == {
        "task",
        "user",
        "run_start",
        "model_request",
        "model_reply",
        "model_error",
        "tool_result",
        "stop",
        "data",
        "error",
    }
    assert any(e["kind"] == "data" and e.get("deleted") is True for e in state.history)
    store.save(state)

    loaded = store.load(state.id)
    assert loaded == state
    assert loaded.history == state.history and loaded.messages == state.messages
    assert loaded.data == {"kept": [1, "two"]} and loaded.answer == "the answer"
    assert loaded.last_agent == state.last_agent and loaded.turn == 2

    snap = store.read(state.id).snapshot  # type: ignore[union-attr]
    assert snap is not None and set(snap) == SNAPSHOT_KEYS
    assert snap == {
        "v": 2,  # the lowest version that reads it: no compaction, no base
        "task": state.task,
        "created_at": state.history[0]["at"],
        "updated_at": state.history[-1]["at"],
        "turn": 2,
        "stopped_by": "finish",
        "finished": True,
        "seq": len(state.history) - 1,
        "agent": state.last_agent["name"],  # type: ignore[index]
        "parent": None,
        "labels": {},
        "expires_at": None,
        "forked_from": None,
    }
    assert store.list() == [
        SavedState(
            state.id,
            state.task,
            datetime.fromisoformat(state.created_at),
            datetime.fromisoformat(state.updated_at),
            2,
            "finish",
            True,
            agent=state.last_agent["name"],  # type: ignore[index]
        )
    ]


async def test_every_history_kind_round_trips_async(store: Store) -> None:
    state = every_kind_state("every-kind-async")
    await store.asave(state)
    assert await store.aload(state.id) == state
    [row] = await store.alist()
    assert (row.id, row.turn, row.stopped_by, row.finished) == (state.id, 2, "finish", True)


def test_snapshot_of_an_unfinished_state(store: Store) -> None:
    state = State("half way", id="half")
    state.begin_run(agent_info("a", "m"))
    state.request("m")
    store.save(state)
    snap = store.read("half").snapshot  # type: ignore[union-attr]
    assert snap == {**state.snapshot(), "turn": 0, "stopped_by": None, "finished": False, "seq": 2}
    [row] = store.list()
    assert (row.id, row.task, row.turn, row.stopped_by, row.finished) == ("half", "half way", 0, None, False)


# -- crash tests: a real agent process killed with SIGKILL -------------------------------


def kill_when_blocked(mode: str, root: Path, state_id: str) -> None:
    """Run tests/support/children/agent_child.py, wait for its marker line, SIGKILL it, wait for it to die."""
    stderr_path = root.parent / f"child-{mode}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, CHILD, mode, str(root), state_id],
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        line = lines.get(timeout=CHILD_TIMEOUT)
    except queue.Empty:
        line = f"(nothing for {CHILD_TIMEOUT}s)"
    if line != child.MARKER:
        proc.kill()
        proc.wait()
        pytest.fail(f"the child printed {line!r}, not the marker; stderr:\n{stderr_path.read_text()}")
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=CHILD_TIMEOUT) == -signal.SIGKILL


def book(place: str, people: int) -> str:
    """Book a table (the resumed runs never call it)."""
    raise AssertionError("book must not be called again")


def resumed_agent(model: ScriptedModel, store: Store) -> Agent:
    """The agent of tests/support/children/agent_child.py, as another process builds it."""
    return Agent(model, tools=[child.lookup, book], system=child.SYSTEM, store=store)


def check_repair_is_stable(store: Store, state_id: str, state: State) -> State:
    """Loading twice gives equal States; saving the repair and loading again adds nothing."""
    assert store.load(state_id) == state
    store.save(state)
    record = store.read(state_id)
    assert record is not None and record.entries == state.history
    again = store.load(state_id)
    assert again == state and len(again.history) == len(state.history)
    return again


def test_sigkill_in_the_middle_of_a_tool_call(tmp_path: Path) -> None:
    root, sid = tmp_path / "store", "killed-in-tool"
    kill_when_blocked("tool", root, sid)

    store = FileStore(root)
    saved = store.read(sid)
    assert saved is not None
    assert kinds(saved.entries) == [
        "task",
        "run_start",
        "model_request",
        "model_reply",
        "tool_result",
        "model_request",
        "model_reply",
        "tool_result",
    ]
    assert saved.snapshot is not None and saved.snapshot["seq"] == 7 and saved.snapshot["turn"] == 2

    state = store.load(sid)
    assert state.history[:8] == saved.entries and len(state.history) == 9
    results = {e["call_id"]: e for e in state.history if e["kind"] == "tool_result"}
    assert {cid: r["outcome"] for cid, r in results.items()} == {
        "call-1": "done",
        "call-2": "done",
        "call-3": "unknown",
    }
    unknown = results["call-3"]
    assert unknown["name"] == "book" and unknown["is_error"] is True
    assert unknown["output"] == INTERRUPTED_TOOL and "may or may not have run" in unknown["output"]
    assert unknown["at"] == saved.entries[-1]["at"]
    assert state.pending_calls == [] and not state.waiting_on_model and not state.finished
    assert state.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call-3",
        "name": "book",
        "content": INTERRUPTED_TOOL,
        "is_error": True,
    }

    state = check_repair_is_stable(store, sid, state)
    history_before = list(state.messages)

    model = ScriptedModel(
        [Reply("Checking the booking first.", [call("call-4", "lookup", city="Paris")]), "Booked (checked)."]
    )
    with no_warnings():
        assert resumed_agent(model, store).run(state) == "Booked (checked)."
    assert model.calls[0] == [{"role": "system", "content": child.SYSTEM}, *history_before]
    assert state.finished and state.turn == 4
    assert kinds(state.history)[9:] == [
        "run_start",
        "model_request",
        "model_reply",
        "tool_result",
        "model_request",
        "model_reply",
        "stop",
    ]
    assert FileStore(root).load(sid) == state


def test_sigkill_while_waiting_on_the_model(tmp_path: Path) -> None:
    root, sid = tmp_path / "store", "killed-waiting"
    kill_when_blocked("model", root, sid)

    store = FileStore(root)
    saved = store.read(sid)
    assert saved is not None
    assert kinds(saved.entries) == [
        "task",
        "run_start",
        "model_request",
        "model_reply",
        "tool_result",
        "model_request",
    ]

    state = store.load(sid)
    assert state.history[:-1] == saved.entries
    last = state.history[-1]
    assert last["kind"] == "model_error" and last["message"] == INTERRUPTED_MODEL
    assert last["seq"] == 6 and last["at"] == saved.entries[-1]["at"]
    assert not state.waiting_on_model and state.pending_calls == [] and state.turn == 1

    state = check_repair_is_stable(store, sid, state)
    expected = [
        {"role": "system", "content": child.SYSTEM},
        {"role": "user", "content": child.TASK},
        {"role": "assistant", "content": "Looking.", "tool_calls": [call("call-1", "lookup", city="Paris")]},
        {
            "role": "tool",
            "tool_call_id": "call-1",
            "name": "lookup",
            "content": "Paris: Chez Janou",
            "is_error": False,
        },
    ]
    assert [{"role": "system", "content": child.SYSTEM}, *state.messages] == expected

    model = ScriptedModel(["Booked."])
    with no_warnings():
        assert resumed_agent(model, store).run(state) == "Booked."
    assert model.calls == [expected]  # the model is asked again, with the history as it was
    assert kinds(state.history)[7:] == ["run_start", "model_request", "model_reply", "stop"]
    assert FileStore(root).load(sid) == state and state.finished


# -- ResumeWarning ----------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_resume_warning_points_at_the_callers_line(store: Store) -> None:
    sid = saved_after_one_run(store)
    base = dict(name="agent", model="scripted", system="A", tools=["t1"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.load(sid).begin_run(agent_info(**{**base, "system": "B"}))  # type: ignore[arg-type]
    warning = one_resume_warning(caught)
    assert warning.filename == __file__
    message = str(warning.message)
    assert "system prompt changed" in message and sha("A") not in message and sha("B") not in message
    assert warning.message.changes == {"system_sha256": (sha("A"), sha("B"))}  # type: ignore[union-attr]

    for how in ("run", "asyncio.run(arun)"):
        agent, _ = changed_agent(store, name=f"other-{how}", limit=1, call_id=f"c-{how}")
        state = store.load(sid)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            agent.run(state) if how == "run" else asyncio.run(agent.arun(state))
        assert one_resume_warning(caught).filename == __file__, how


async def test_resume_warning_points_at_the_callers_line_in_async_code(store: Store) -> None:
    sid = saved_after_one_run(store)
    for how in ("await arun", "run inside a running loop"):
        agent, _ = changed_agent(store, model_name=f"m-{how}", limit=1, call_id=f"c-{how}")
        state = await store.aload(sid)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if how == "await arun":
                await agent.arun(state)
            else:
                agent.run(state)
        assert one_resume_warning(caught).filename == __file__, how


def test_the_same_agent_resumes_silently(store: Store) -> None:
    sid = saved_after_one_run(store)
    state = store.load(sid)
    with no_warnings():
        model = ScriptedModel([Reply("", [call("c1", "t1")])])
        Agent(model, tools=[t1], system="A", store=store, limit=1).run(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = store.load(sid)
        Agent(ScriptedModel(["done"]), tools=[t1], system="A", store=store).run(state)
    assert state.finished


CHANGES = {
    "name": (dict(name="other"), {"name": ("agent", "other")}),
    "model": (dict(model_name="m2"), {"model": ("scripted", "m2")}),
    "system": (dict(system="B"), {"system_sha256": (sha("A"), sha("B"))}),
    "no system": (dict(system=None), {"system_sha256": (sha("A"), sha(""))}),
    "tools": (dict(tools=[t1, t2]), {"tools": (["t1"], ["t1", "t2"])}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_each_kind_of_change_warns(store: Store, change: str) -> None:
    sid = saved_after_one_run(store)
    state = store.load(sid)
    kwargs, expected = CHANGES[change]
    agent, _ = changed_agent(store, **kwargs)
    with pytest.warns(ResumeWarning) as caught:
        assert agent.run(state) == "done"
    [warning] = caught.list
    assert warning.message.changes == expected  # type: ignore[union-attr]
    message = str(warning.message)
    assert f"State {sid!r} is resumed by a different agent" in message
    for field, (old, new) in expected.items():
        shown = "system prompt changed" if field == "system_sha256" else f"{field}: {old!r} -> {new!r}"
        assert shown in message


def test_all_changes_are_listed(store: Store) -> None:
    sid = saved_after_one_run(store)
    agent, _ = changed_agent(store, name="n2", model_name="m2", system="B", tools=[t2])
    with pytest.warns(ResumeWarning) as caught:
        agent.run(store.load(sid))
    [warning] = caught.list
    changes = warning.message.changes  # type: ignore[union-attr]
    assert changes == {
        "name": ("agent", "n2"),
        "model": ("scripted", "m2"),
        "system_sha256": (sha("A"), sha("B")),
        "tools": (["t1"], ["t2"]),
    }
    message = str(warning.message)
    for field in ("name", "model", "tools"):
        assert f"{field}: " in message
    assert "system prompt changed" in message


def test_only_the_first_run_after_a_load_warns(store: Store) -> None:
    sid = saved_after_one_run(store)
    state = store.load(sid)
    agent, _ = changed_agent(store, name="other", limit=1)
    with pytest.warns(ResumeWarning):
        agent.run(state)
    assert state.stopped_by == "limit"
    # A second run in the same process is silent, whichever agent runs it.
    with no_warnings():
        agent2, _ = changed_agent(store, name="third", system="C", call_id="c2")
        assert agent2.run(state) == "done"


async def test_the_first_arun_after_a_load_warns(store: Store) -> None:
    sid = saved_after_one_run(store)
    state = await store.aload(sid)
    agent, _ = changed_agent(store, model_name="async-model")
    with pytest.warns(ResumeWarning) as caught:
        assert await agent.arun(state) == "done"
    assert caught.list[0].message.changes == {"model": ("scripted", "async-model")}  # type: ignore[union-attr]


def test_a_fresh_state_never_warns(store: Store) -> None:
    state = State("fresh", id="fresh")
    with no_warnings():
        Agent(ScriptedModel([Reply("", [call("c0", "t1")])]), tools=[t1], store=store, limit=1).run(state)
        agent, _ = changed_agent(store, name="other", system="Z", tools=[t2], model_name="m9")
        agent.run(state)
    assert state.finished
    # A loaded State that never ran has no agent to compare with.
    never_ran = State("never ran", id="never-ran")
    store.save(never_ran)
    with no_warnings():
        Agent(ScriptedModel(["done"]), store=store).run(store.load("never-ran"))


# -- damaged and newer-format States are refused -------------------------------------------


def raw(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": AT, **fields}


def raw_snapshot(**changes: Any) -> dict[str, Any]:
    snap = {
        "v": 2,  # the lowest version that reads it: no compaction, no base
        "task": "t",
        "created_at": AT,
        "updated_at": AT,
        "turn": 0,
        "stopped_by": None,
        "finished": False,
        "seq": 0,
    }
    snap.update(changes)
    return snap


def test_a_snapshot_without_a_version_is_refused(store: Store) -> None:
    snap = raw_snapshot()
    del snap["v"]
    store.write("no-version", [raw(0, "task", text="t")], snap, create=True)
    with pytest.raises(ValueError, match="version") as info:
        store.load("no-version")
    assert "damaged or not a statekeep State" in str(info.value)
    store.write("no-snapshot", [raw(0, "task", text="t")], None, create=True)
    with pytest.raises(ValueError, match="no version"):
        store.load("no-snapshot")


@pytest.mark.parametrize("version", ["1", 1.0, 0, -3, True])
def test_a_version_that_is_not_one_is_damage_not_a_newer_format(store: Store, version: object) -> None:
    store.write("odd-version", [raw(0, "task", text="t")], raw_snapshot(v=version), create=True)
    with pytest.raises(CorruptStateError, match="damaged or not a statekeep State") as info:
        store.load("odd-version")
    assert "upgrade" not in str(info.value)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 99])
def test_a_newer_format_is_refused_before_its_entries_are_read(store: Store, version: int) -> None:
    entries = [raw(0, "task", text="t"), raw(1, "hologram", beam=True), {"seq": 2, "kind": "no at"}]
    store.write("newer", entries, raw_snapshot(v=version), create=True)
    with pytest.raises(ValueError, match="upgrade statekeep") as info:
        store.load("newer")
    message = str(info.value)
    assert f"format version {version}" in message and f"version {FORMAT_VERSION}" in message
    assert "hologram" not in message and "kind" not in message and "damaged" not in message


def test_an_unknown_kind_is_damaged(store: Store) -> None:
    store.write("odd-kind", [raw(0, "task", text="t"), raw(1, "hologram")], raw_snapshot(seq=1), create=True)
    with pytest.raises(ValueError, match="damaged") as info:
        store.load("odd-kind")
    assert "'hologram'" in str(info.value) and "odd-kind" in str(info.value)


BAD_HISTORIES = {
    "reply without request": [raw(1, "model_reply", text="", tool_calls=[], usage={}, stop_reason=None)],
    "result for an unknown call": [
        raw(1, "tool_result", call_id="nope", name="x", output=1, is_error=False, outcome="done")
    ],
    "model error without request": [raw(1, "model_error", message="m")],
    "result answered twice": [
        raw(1, "model_request", model="m"),
        raw(2, "model_reply", text="", tool_calls=[call("c1", "x")], usage={}, stop_reason=None),
        raw(3, "tool_result", call_id="c1", name="x", output=1, is_error=False, outcome="done"),
        raw(4, "tool_result", call_id="c1", name="x", output=1, is_error=False, outcome="done"),
    ],
    "bad outcome": [
        raw(1, "model_request", model="m"),
        raw(2, "model_reply", text="", tool_calls=[call("c1", "x")], usage={}, stop_reason=None),
        raw(3, "tool_result", call_id="c1", name="x", output=1, is_error=False, outcome="maybe"),
    ],
    "entry after finish": [raw(1, "stop", by="finish", answer=None), raw(2, "user", text="late")],
    "second task": [raw(1, "task", text="again")],
    "missing key": [raw(1, "user")],
}


@pytest.mark.parametrize("case", sorted(BAD_HISTORIES))
def test_a_history_that_cannot_be_replayed_is_refused(store: Store, case: str) -> None:
    entries = [raw(0, "task", text="t"), *BAD_HISTORIES[case]]
    store.write("bad", entries, raw_snapshot(seq=len(entries) - 1), create=True)
    with pytest.raises(ValueError, match="damaged: its history cannot be replayed"):
        store.load("bad")


def test_a_history_not_starting_with_a_task_is_refused(store: Store) -> None:
    store.write("no-task", [raw(0, "user", text="hi")], raw_snapshot(), create=True)
    with pytest.raises(ValueError, match="damaged"):
        store.load("no-task")
    store.write("empty", [], raw_snapshot(), create=True)
    with pytest.raises(ValueError, match="damaged"):
        store.load("empty")


# -- histories of other writers: null optional fields, unknown keys --------------------------

AGENT_1 = agent_info("agent-1", "m", tools=["lookup"])


def derived(state: State) -> dict[str, Any]:
    """Everything a State derives from its history."""
    return {
        "messages": state.messages,
        "turn": state.turn,
        "pending_calls": state.pending_calls,
        "waiting_on_model": state.waiting_on_model,
        "finished": state.finished,
        "answer": state.answer,
        "stopped_by": state.stopped_by,
        "data": state.data,
        "last_agent": state.last_agent,
    }


def test_null_in_every_optional_field_loads_as_if_absent(store: Store) -> None:
    # Another writer spells every optional field null: a reply's text, tool_calls, usage and
    # stop_reason, a stop's answer, a data entry's deleted.
    nulls = {"text": None, "tool_calls": None, "usage": None, "stop_reason": None}
    entries = [
        raw(0, "task", text="t"),
        raw(1, "run_start", agent=AGENT_1),
        raw(2, "model_request", model="m"),
        raw(3, "model_reply", **nulls | {"tool_calls": [call("c1", "lookup", city="Paris")]}),
        raw(4, "tool_result", call_id="c1", name="lookup", output=None, is_error=False, outcome="done"),
        raw(5, "model_request", model="m"),
        raw(6, "model_reply", **nulls | {"text": "sunny"}),
        raw(7, "stop", by="finish-later", answer=None),
        raw(8, "data", key="k", value=None, deleted=None),
        raw(9, "run_start", agent=AGENT_1),
        raw(10, "model_request", model="m"),
        raw(11, "model_reply", **nulls),
        raw(12, "stop", by="limit", answer=None),
    ]
    store.write("nulls", entries, raw_snapshot(seq=12), create=True)

    # The same history written without those fields, through State.
    expected = State("t", id="expected")
    expected.begin_run(AGENT_1)
    expected.request("m")
    expected.add_reply(tool_calls=[call("c1", "lookup", city="Paris")])
    expected.add_tool_result("c1", None)
    expected.request("m")
    expected.add_reply("sunny")
    expected.stop("finish-later")
    expected.set_data("k", None)
    expected.begin_run(AGENT_1)
    expected.request("m")
    expected.add_reply()
    expected.stop("limit")

    loaded = store.load("nulls")
    assert loaded.history == entries  # as written, nulls kept
    assert derived(loaded) == derived(expected)
    assert loaded.messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("c1", "lookup", city="Paris")],
    }
    assert (loaded.answer, loaded.turn, loaded.data) == (None, 3, {"k": None})

    # It saves and continues like any State: nothing is rewritten, the nulls stay.
    store.save(loaded)
    assert store.read("nulls").entries == entries  # type: ignore[union-attr]
    loaded.add_user("go on")
    store.save(loaded)
    assert store.read("nulls").entries == [*entries, loaded.history[-1]]  # type: ignore[union-attr]
    assert store.load("nulls") == loaded


def test_unknown_keys_on_known_kinds_are_kept_and_ignored(store: Store) -> None:
    extra = {"x-writer": {"name": "other", "v": [1, None]}}
    agent = AGENT_1 | {"temperature": 0.2}
    tool_call = call("c1", "lookup", city="Paris") | {"type": "function"}
    entries = [
        raw(0, "task", text="t", **extra),
        raw(1, "user", text="hi", **extra),
        raw(2, "run_start", agent=agent, **extra),
        raw(3, "model_request", model="m", **extra),
        raw(4, "model_reply", text="", tool_calls=[tool_call], usage={}, stop_reason=None, **extra),
        raw(5, "tool_result", call_id="c1", name="lookup", output=1, is_error=False, outcome="done", **extra),
        raw(6, "model_request", model="m", **extra),
        raw(7, "model_error", message="timeout", **extra),
        raw(8, "data", key="k", value=2, **extra),
        raw(9, "error", message="boom", **extra),
        raw(10, "stop", by="limit", answer="partial", **extra),
        raw(11, "run_start", agent=agent, **extra),
        raw(12, "model_request", model="m", **extra),
        raw(
            13,
            "model_reply",
            text="",
            tool_calls=[tool_call | {"id": "c2"}],
            usage={},
            stop_reason=None,
            **extra,
        ),
    ]
    store.write("extra", entries, raw_snapshot(seq=13), create=True)

    expected = State("t", id="expected")
    expected.add_user("hi")
    expected.begin_run(AGENT_1)
    expected.request("m")
    expected.add_reply("", [call("c1", "lookup", city="Paris")])
    expected.add_tool_result("c1", 1)
    expected.request("m")
    expected.add_model_error("timeout")
    expected.set_data("k", 2)
    expected.add_error("boom")
    expected.stop("limit", "partial")
    expected.begin_run(AGENT_1)
    expected.request("m")
    expected.add_reply("", [call("c2", "lookup", city="Paris")])

    loaded = store.load("extra")  # seq 13's call c2 has no result: load closes it
    assert loaded.history[:14] == entries
    assert kinds(loaded.history[14:]) == ["tool_result"] and loaded.history[14]["call_id"] == "c2"
    expected.add_tool_result("c2", INTERRUPTED_TOOL, is_error=True, outcome="unknown")
    assert derived(loaded) == derived(expected)

    # Saving sends only the repair; the unknown keys stay as written, load after load.
    store.save(loaded)
    assert store.read("extra").entries == loaded.history  # type: ignore[union-attr]
    again = store.load("extra")
    assert again == loaded and again.history[:14] == entries
    store.save(again)  # nothing new: no conflict
    assert store.read("extra").entries == loaded.history  # type: ignore[union-attr]


REQUIRED_NULLS = {
    "task": ([raw(0, "task", text=None)], 0, "text"),
    "user": ([raw(1, "user", text=None)], 1, "text"),
    "run_start": ([raw(1, "run_start", agent=None)], 1, "agent"),
    "agent name": ([raw(1, "run_start", agent=AGENT_1 | {"name": None})], 1, "name"),
    "model_request": ([raw(1, "model_request", model=None)], 1, "model"),
    "tool_result": (
        [
            raw(1, "model_request", model="m"),
            raw(2, "model_reply", tool_calls=[call("c1", "lookup")]),
            raw(3, "tool_result", call_id="c1", name="lookup", output=1, is_error=False, outcome=None),
        ],
        3,
        "outcome",
    ),
    "model_error": ([raw(1, "model_request", model="m"), raw(2, "model_error", message=None)], 2, "message"),
    "stop": ([raw(1, "stop", by=None, answer=1)], 1, "by"),
    "data": ([raw(1, "data", key=None, value=1)], 1, "key"),
    "error": ([raw(1, "error", message=None)], 1, "message"),
}


def test_null_in_a_required_field_is_damage_naming_the_seq_and_key(store: Store) -> None:
    for case, (tail, seq, key) in REQUIRED_NULLS.items():
        entries = tail if seq == 0 else [raw(0, "task", text="t"), *tail]
        state_id = "null-" + case.replace(" ", "-")
        store.write(state_id, entries, raw_snapshot(seq=len(entries) - 1), create=True)
        with pytest.raises(CorruptStateError, match="damaged: its history cannot be replayed") as info:
            store.load(state_id)
        message = str(info.value)
        assert f"seq {seq}:" in message and repr(key) in message and "null" in message, case


def test_a_snapshot_ahead_of_the_history_is_corruption_naming_the_missing_seqs(store: Store) -> None:
    # The snapshot acknowledges seqs 0-4 and a finish; the history holds only 0-2.
    entries = [
        raw(0, "task", text="t"),
        raw(1, "run_start", agent=agent_info("a", "m")),
        raw(2, "model_request", model="m"),
    ]
    snap = raw_snapshot(seq=4, turn=1, stopped_by="finish", finished=True)
    store.write("ahead", entries, snap, create=True)
    for load in (store.load, lambda sid: asyncio.run(store.aload(sid))):
        with pytest.raises(
            CorruptStateError,
            match=r"covers the history up to seq 4, but .*ends at seq 2, so the saved entries seq 3 to 4 are missing",
        ):
            load("ahead")
    store.write("ahead-by-one", entries, raw_snapshot(seq=3), create=True)
    with pytest.raises(CorruptStateError, match=r"entry seq 3 is missing"):
        store.load("ahead-by-one")
    store.write("behind", entries, raw_snapshot(seq=1), create=True)  # an older snapshot is fine
    assert len(store.load("behind").history) == 4  # the request closed by a model_error


async def test_an_unknown_id_is_a_lookup_error(store: Store) -> None:
    with pytest.raises(LookupError, match="no State 'nobody'"):
        store.load("nobody")
    with pytest.raises(LookupError, match="no State 'nobody'"):
        await store.aload("nobody")


def test_a_state_is_saved_in_one_store_only(store: Store, tmp_path: Path) -> None:
    state = State("one store", id="one-store")
    store.save(state)
    for other in (MemoryStore(), FileStore(tmp_path / "other")):
        state.add_user("more")
        with pytest.raises(ValueError, match="saved in one store only"):
            other.save(state)
        assert other.read("one-store") is None
    store.save(state)  # its own store still takes it
    assert store.load("one-store") == state


def test_a_loaded_state_is_saved_in_its_store_only(store: Store) -> None:
    store.save(State("the real one", id="same-id"))
    other = MemoryStore()
    other.save(State("an unrelated State", id="same-id"))
    loaded = store.load("same-id")
    loaded.add_user("meant for the first store")
    try:
        with pytest.raises(ValueError, match="saved in one store only"):
            other.save(loaded)
    finally:
        assert kinds(other.read("same-id").entries) == ["task"]  # type: ignore[union-attr]


def test_a_concurrent_writer_gets_a_conflict_saying_to_load_again(store: Store) -> None:
    state = State("contested", id="contested")
    store.save(state)
    first, second = store.load("contested"), store.load("contested")
    first.add_user("from the first writer")
    store.save(first)
    second.add_user("from the second writer")
    with pytest.raises(StateConflictError, match=r"load it again with store\.load\('contested'\)"):
        store.save(second)
    assert store.load("contested") == first
    # The loser loads again and continues from there.
    third = store.load("contested")
    third.add_user("from the second writer, again")
    store.save(third)
    assert [m["content"] for m in store.load("contested").messages] == [
        "contested",
        "from the first writer",
        "from the second writer, again",
    ]


async def test_a_concurrent_async_writer_gets_a_conflict(store: Store) -> None:
    await store.asave(State("contested", id="contested-async"))
    first, second = await store.aload("contested-async"), await store.aload("contested-async")
    first.set_data("who", 1)
    second.set_data("who", 2)
    await store.asave(first)
    with pytest.raises(StateConflictError, match="load it again"):
        await store.asave(second)


class FlakyIO(OsIO):
    """Raises OSError(EIO) from the next ``fail`` fsyncs (from any thread)."""

    def __init__(self) -> None:
        self.fail = 0
        self.failed = 0
        self._lock = threading.Lock()

    def fsync(self, fd: int) -> None:
        with self._lock:
            failing = self.fail > 0
            if failing:
                self.fail -= 1
                self.failed += 1
        if failing:
            raise OSError(errno.EIO, "injected fsync failure")
        super().fsync(fd)


def test_after_a_failed_save_the_next_save_sends_everything_unsaved(tmp_path: Path) -> None:
    io = FlakyIO()
    store = RecordingFileStore(tmp_path / "flaky", io=io)
    state = State("flaky disk", id="flaky")
    store.save(state)
    state.add_user("one")
    state.add_user("two")
    io.fail = 1
    with pytest.raises(OSError, match="injected"):
        store.save(state)
    assert io.failed == 1
    assert store.read("flaky").entries == state.history[:1]  # type: ignore[union-attr]

    store.save(state)
    assert store.writes[-2].entries == store.writes[-1].entries == state.history[1:3]
    state.add_user("three")
    store.save(state)
    assert store.writes[-1].entries == [state.history[3]]
    assert FileStore(tmp_path / "flaky").load("flaky") == state


def test_after_a_failed_first_save_the_next_save_creates_the_state(tmp_path: Path) -> None:
    io = FlakyIO()
    (tmp_path / "flaky").mkdir()
    store = RecordingFileStore(tmp_path / "flaky", io=io)
    state = State("flaky create", id="flaky-create")
    state.add_user("one")
    io.fail = 1
    with pytest.raises(OSError, match="injected"):
        store.save(state)
    assert store.read("flaky-create") is None
    store.save(state)
    assert store.writes[-1].entries == state.history and store.writes[-1].create
    assert FileStore(tmp_path / "flaky").load("flaky-create") == state


# -- replay is linear ---------------------------------------------------------------------


def test_a_ten_thousand_entry_state_saves_and_loads(tmp_path: Path) -> None:
    state = State("long run", id="long")
    state.begin_run(agent_info("agent", "m", tools=["work"]))
    turns = 3_334
    for i in range(turns):
        state.request("m")
        state.add_reply(f"turn {i}", [call(f"c{i}", "work", i=i)], usage={"tokens": i})
        state.add_tool_result(f"c{i}", {"i": i, "text": "x" * 20})
    state.finish("done")
    assert len(state.history) == 3 * turns + 3 >= 10_000

    store = FileStore(tmp_path / "long")
    store.save(state)
    started = time.perf_counter()
    loaded = store.load("long")
    elapsed = time.perf_counter() - started
    print(f"\nloaded {len(loaded.history)} entries in {elapsed:.3f}s")
    assert loaded == state
    assert loaded.turn == turns and loaded.finished and len(loaded.messages) == 1 + 2 * turns
    assert loaded.messages[-1]["content"] == {"i": turns - 1, "text": "x" * 20}
    assert store.list()[0].turn == turns


def test_resume_warning_as_error_adds_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    state = State("t", id="strict")
    state.begin_run(agent_info("a", "m1"))
    store.save(state)
    loaded = store.load("strict")
    before = list(loaded.history)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResumeWarning)
        with pytest.raises(ResumeWarning):
            loaded.begin_run(agent_info("a", "m2"))
    assert loaded.history == before


def test_a_slow_tool_never_holds_up_other_saves(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    entered, release = threading.Event(), threading.Event()
    running = threading.Event()

    def slow(x: int) -> int:
        """A tool that waits for the test."""
        running.set()
        entered.set()
        release.wait(30)
        running.clear()
        return x

    model = ScriptedModel([Reply("", [{"id": "c1", "name": "slow", "args": {"x": 1}}]), "done"])
    agent = Agent(model, tools=[slow], store=store)
    runner = threading.Thread(target=agent.run, args=(State("t", id="slowpoke"),))
    runner.start()
    try:
        assert entered.wait(30)
        store.save(State("another run", id="other"))  # must not wait for the tool
        assert running.is_set(), "the save waited for the slow tool"
    finally:
        release.set()
        runner.join(60)
    assert store.load("slowpoke").finished
