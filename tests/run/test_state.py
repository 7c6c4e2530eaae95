"""The State model: what history can follow, and what is derived from it."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

import pytest

from statekeep import MemoryStore, SavedState, State, agent_info

AGENT = agent_info("helper", "model-x", system="be brief", tools=["b", "a"])
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


def running(task: str = "do it") -> State:
    state = State(task, id="s1")
    state.begin_run(AGENT)
    return state


def test_new_state_has_a_task_entry_and_a_random_id() -> None:
    a, b = State("write a poem"), State("write a poem")
    assert re.fullmatch(r"[0-9a-f]{32}", a.id) and a.id != b.id
    assert a.history == [{"seq": 0, "kind": "task", "at": a.created_at, "text": "write a poem"}]
    assert ISO.fullmatch(a.created_at)
    assert a.messages == [{"role": "user", "content": "write a poem"}]
    assert (a.turn, a.finished, a.answer, a.stopped_by, a.pending_calls) == (0, False, None, None, [])


@pytest.mark.parametrize("bad", ["", "../up", "x" * 129, "naïve"])
def test_state_id_follows_the_store_rule(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid State id"):
        State("t", id=bad)


def test_task_must_be_text() -> None:
    with pytest.raises(TypeError, match="task must be a str"):
        State(42)  # type: ignore[arg-type]


def test_a_full_turn_derives_messages_and_turn() -> None:
    state = running()
    state.request("model-x")
    assert state.waiting_on_model
    state.add_reply(
        "looking", [{"id": "c1", "name": "a", "args": {"q": 1}}], usage={"in": 3}, stop_reason="tool_use"
    )
    assert state.turn == 1 and [c["id"] for c in state.pending_calls] == ["c1"]
    state.add_tool_result("c1", {"rows": 2})
    state.request("model-x")
    state.add_reply("done")
    state.finish("done")
    assert state.messages == [
        {"role": "user", "content": "do it"},
        {
            "role": "assistant",
            "content": "looking",
            "tool_calls": [{"id": "c1", "name": "a", "args": {"q": 1}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "a", "content": {"rows": 2}, "is_error": False},
        {"role": "assistant", "content": "done"},
    ]
    assert (state.turn, state.finished, state.answer, state.stopped_by) == (2, True, "done", "finish")
    result = state.history[4]
    assert (result["outcome"], result["is_error"], result["name"]) == ("done", False, "a")
    assert [e["seq"] for e in state.history] == list(range(len(state.history)))


def test_error_results_default_to_outcome_error() -> None:
    state = running()
    state.request("m")
    state.add_reply("", [{"id": "c1", "name": "a", "args": {}}])
    state.add_tool_result("c1", "boom", is_error=True)
    assert state.history[-1]["outcome"] == "error"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (lambda s: s.add_reply("hi"), "reply with no request"),
        (lambda s: s.add_model_error("x"), "no request waiting"),
        (lambda s: s.add_tool_result("nope", 1), "'nope', which is not a pending call"),
        (lambda s: (s.request("m"), s.request("m")), "while a model request waits"),
        (
            lambda s: (
                s.request("m"),
                s.add_reply("", [{"id": "c", "name": "a", "args": {}}]),
                s.request("m"),
            ),
            "wait for results: c",
        ),
        (
            lambda s: (
                s.request("m"),
                s.add_reply("", [{"id": "c", "name": "a", "args": {}}]),
                s.add_user("hey"),
            ),
            "wait for results",
        ),
        (
            lambda s: (
                s.request("m"),
                s.add_reply("", [{"id": "c", "name": "a", "args": {}}, {"id": "c", "name": "b", "args": {}}]),
            ),
            "used twice",
        ),
        (
            lambda s: (
                s.request("m"),
                s.add_reply("", [{"id": "c", "name": "a", "args": {}}]),
                s.add_tool_result("c", 1),
                s.add_tool_result("c", 2),
            ),
            "answered already",
        ),
        (
            lambda s: (
                s.request("m"),
                s.add_reply("", [{"id": "c", "name": "a", "args": {}}]),
                s.add_tool_result("c", 1, outcome="maybe"),
            ),
            "outcome 'maybe'",
        ),
        (lambda s: (s.request("m"), s.stop("limit")), "a stop while a model request waits"),
    ],
)
def test_calls_history_cannot_follow_raise(steps, message: str) -> None:
    state = running()
    before = None
    with pytest.raises(ValueError, match=message):
        before = len(state.history)
        steps(state)
    assert all(e["seq"] == i for i, e in enumerate(state.history))
    assert before is not None


def test_refused_call_adds_nothing() -> None:
    state = running()
    n = len(state.history)
    with pytest.raises(ValueError):
        state.add_reply("no request")
    assert len(state.history) == n


def test_nothing_follows_finish() -> None:
    state = running()
    state.finish("42")
    for call in (lambda: state.add_user("more"), lambda: state.set_data("k", 1), lambda: state.stop("x")):
        with pytest.raises(ValueError, match="finished"):
            call()
    with pytest.raises(ValueError, match="finished State cannot run again") as info:
        state.begin_run(AGENT)
    assert "new State" in str(info.value) and "messages" in str(info.value)


def test_stopped_state_can_run_again() -> None:
    state = running()
    state.stop("limit")
    assert (state.stopped_by, state.finished) == ("limit", False)
    state.add_user("go on")
    state.begin_run(AGENT)
    assert state.stopped_by is None


def test_begin_run_needs_the_agent_keys_and_sorts_tools() -> None:
    state = State("t")
    with pytest.raises(ValueError, match="agent needs"):
        state.begin_run({"name": "x"})
    state.begin_run(AGENT)
    assert state.last_agent == {**AGENT, "tools": ["a", "b"]}
    assert len(AGENT["system_sha256"]) == 64


def test_data_set_and_delete() -> None:
    state = State("t")
    state.set_data("plan", ["a", "b"])
    state.set_data("n", 1)
    state.delete_data("n")
    state.delete_data("never-set")
    assert state.data == {"plan": ["a", "b"]}
    assert state.history[-2] == {
        "seq": 3,
        "kind": "data",
        "at": state.history[-2]["at"],
        "key": "n",
        "deleted": True,
    }


def test_error_entry_marks_the_run_stopped_by_error() -> None:
    state = running()
    state.add_error("RuntimeError: boom")
    assert state.stopped_by == "error" and not state.finished


def test_snapshot_is_what_listing_reads() -> None:
    state = running("list me")
    state.request("m")
    state.add_reply("ok")
    snap = state.snapshot()
    assert snap == {
        "v": 2,  # the lowest version that reads it: no compaction, no base
        "task": "list me",
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "turn": 1,
        "stopped_by": None,
        "finished": False,
        "seq": 3,
        "agent": "helper",
        "parent": None,
        "labels": {},
        "expires_at": None,
        "forked_from": None,
    }
    row = SavedState.from_snapshot(state.id, snap)
    assert (row.id, row.task, row.turn, row.finished) == ("s1", "list me", 1, False)


def test_saved_state_status_is_finished_else_stopped_by_else_running() -> None:
    state = State("t")
    assert SavedState.from_snapshot(state.id, state.snapshot()).status == "running"
    state.stop("limit")
    assert SavedState.from_snapshot(state.id, state.snapshot()).status == "limit"
    state.finish("done")
    assert SavedState.from_snapshot(state.id, state.snapshot()).status == "finished"


def entry(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": "2026-01-01T00:00:00+00:00", **fields}


def test_replay_ignores_unknown_keys_of_tool_calls_and_agents() -> None:
    # Another writer adds keys of its own to a tool call and to a run_start agent.
    history = [
        entry(0, "task", text="t"),
        entry(1, "run_start", agent=AGENT | {"temperature": 0.2}),
        entry(2, "model_request", model="m"),
        entry(3, "model_reply", tool_calls=[{"id": "c1", "name": "a", "args": {}, "type": "function"}]),
    ]
    state = State._from_history("other", history)
    assert state.history == history
    assert state.last_agent == {**AGENT, "tools": ["a", "b"]}
    assert state.pending_calls == [{"id": "c1", "name": "a", "args": {}}]
    assert state.messages[-1] == {"role": "assistant", "content": "", "tool_calls": state.pending_calls}


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [
        ("usage", [], "an array"),
        ("stop_reason", 1, "a number"),
        ("text", {}, "an object"),
        ("tool_calls", "c1", "a string"),
    ],
)
def test_an_optional_field_of_the_wrong_type_is_refused(key: str, value: Any, found: str) -> None:
    history = [
        entry(0, "task", text="t"),
        entry(1, "model_request", model="m"),
        entry(2, "model_reply", **{key: value}),
    ]
    with pytest.raises(
        ValueError, match=rf"seq 2: model_reply entry's '{key}' must be null or of type \w+; it has {found}"
    ):
        State._from_history("odd", history)


def test_replay_of_a_long_history_is_linear() -> None:
    state = running()
    for i in range(3_400):  # about 10,000 entries
        state.request("m")
        state.add_reply("", [{"id": f"c{i}", "name": "a", "args": {}}])
        state.add_tool_result(f"c{i}", i)
    copy = State._from_history(state.id, state.history)
    assert copy == state and copy.turn == 3_400 and len(copy.messages) == 1 + 2 * 3_400


def test_a_listing_time_beyond_the_year_9999_in_utc_is_a_value_error() -> None:
    snap = State("t").snapshot() | {"updated_at": "9999-12-31T23:59:59-01:00"}
    with pytest.raises(ValueError, match=r"invalid 'updated_at'.*years 1 to 9999 in UTC"):
        SavedState.from_snapshot("odd", snap)


def with_call(state: State) -> State:
    state.request("m")
    state.add_reply("", [{"id": "c1", "name": "a", "args": {}}])
    return state


NOT_JSON: dict[str, tuple[Any, str]] = {
    "nan data": (lambda s: s.set_data("k", math.nan), r"State.set_data\('k'\) value is nan"),
    "a set": (lambda s: s.set_data("k", {1, 2}), r"State.set_data\('k'\) value is a set"),
    "nested inf": (
        lambda s: s.set_data("plan", {"a": [1, math.inf]}),
        r"State.set_data\('plan'\) value\['a'\]\[1\] is inf",
    ),
    "tool output": (
        lambda s: with_call(s).add_tool_result("c1", object()),
        r"State.add_tool_result\('c1'\) output is a object",
    ),
    "answer key": (lambda s: s.stop("limit", {1: "x"}), r"State.stop\('limit'\) answer has a key 1"),
    "call args": (
        lambda s: (s.request("m"), s.add_reply("", [{"id": "c", "name": "a", "args": {"x": math.nan}}])),
        r"State.add_reply\(\) tool_calls\[0\]\['args'\]\['x'\] is nan",
    ),
    "usage": (
        lambda s: (s.request("m"), s.add_reply("", usage={"in": 2**70})),
        r"State.add_reply\(\) usage\['in'\] = \d+ does not fit",
    ),
    "lone surrogate": (lambda s: s.add_user("bad \udcff"), r"State.add_user\(\) text holds a lone surrogate"),
    "bytes": (lambda s: s.add_error(b"boom"), r"State.add_error\(\) message is a bytes"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(NOT_JSON))
def test_a_value_json_cannot_hold_is_refused_naming_the_method_and_key(case: str) -> None:
    step, message = NOT_JSON[case]
    state = running()
    state.set_data("kept", [1])
    store = MemoryStore()
    store.save(state)
    with pytest.raises(TypeError, match=message):
        step(state)
    assert "entries[" not in message
    assert state.history[-1]["kind"] in ("data", "model_request", "model_reply")
    store.save(state)  # nothing bad entered: saving still works
    assert store.load("s1").data == {"kept": [1]}


def test_history_keeps_its_own_copy_of_each_value() -> None:
    plan = {"steps": ["a"], "pair": (1, 2)}
    state = State("t", id="copies")
    state.set_data("plan", plan)
    plan["steps"].append({"bad": {1}})  # later changes to the caller's object do not reach the State
    assert state.data == {"plan": {"steps": ["a"], "pair": [1, 2]}}
    store = MemoryStore()
    store.save(state)
    assert store.load("copies") == state  # tuples are lists already, as after a load


def test_data_is_read_only_so_in_place_edits_fail_loudly() -> None:
    state = State("t")
    state.set_data("plan", {"steps": ["a", "b"], "meta": {"n": 1}})
    data = state.data
    edits = [
        lambda: data.__setitem__("x", 1),
        lambda: data.pop("plan"),
        lambda: data.update(x=1),
        lambda: data["plan"].__setitem__("extra", 1),
        lambda: data["plan"]["steps"].append("c"),
        lambda: data["plan"]["steps"].__setitem__(0, "z"),
        lambda: data["plan"]["steps"].sort(),
        lambda: data["plan"]["meta"].clear(),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match=r"State.data is read-only.*set_data"):
            edit()
    with pytest.raises(TypeError, match="read-only"):
        del data["plan"]
    assert state.data == {"plan": {"steps": ["a", "b"], "meta": {"n": 1}}}
    assert len(state.history) == 2
    # A deep copy is plain and changeable, and frozen values can be set again.
    mine = copy.deepcopy(state.data)
    mine["plan"]["steps"].append("c")
    assert type(mine) is dict and type(mine["plan"]["steps"]) is list
    state.set_data("again", state.data["plan"])
    assert json.loads(json.dumps(state.data))["again"] == {"steps": ["a", "b"], "meta": {"n": 1}}
