"""Approvals in the history (format 4): ``approval_wait`` and ``approval``, the State API
(``pending_approvals``, ``approve``, ``reject``) and what load does with a waiting call.

The loop that records and settles them: tests/agent/test_approvals.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from statekeep import FileStore, State, Store, agent_info
from statekeep._run.history import Replay
from statekeep._run.resume import INTERRUPTED_TOOL
from tests.support.agents import call, kinds

AGENT = agent_info("a", "m", tools=["pay", "look"])


def waiting(*calls: dict[str, Any], wait: tuple[str, ...] | None = None) -> State:
    """A State whose last reply made ``calls``; those in ``wait`` (default: all) wait on approval."""
    state = State("pay the bill")
    state.begin_run(AGENT)
    state.request("m")
    state.add_reply("paying", calls)
    state._wait_for_approval(list(wait if wait is not None else [c["id"] for c in calls]))
    return state


def test_a_waiting_run_lists_its_calls_and_stops_for_approval() -> None:
    state = waiting(call("c1", "pay", amount=5), call("c2", "pay", amount=7))
    assert state.stopped_by == "approval"
    assert state.snapshot()["stopped_by"] == "approval" and state.snapshot()["v"] == 4
    pending = state.pending_approvals
    assert [(p["id"], p["name"], p["args"]) for p in pending] == [
        ("c1", "pay", {"amount": 5}),
        ("c2", "pay", {"amount": 7}),
    ]
    assert pending[0]["since"] == state.history[-1]["at"]
    state.approve("c1", note="ok by Ann")
    state.reject("c2")
    assert state.pending_approvals == []
    assert state.history[-2:] == [
        {**state.history[-2], "kind": "approval", "call_id": "c1", "approved": True, "note": "ok by Ann"},
        {**state.history[-1], "kind": "approval", "call_id": "c2", "approved": False, "note": None},
    ]


def test_bad_decisions_say_what_was_wrong_and_add_nothing() -> None:
    state = State("t")
    state.begin_run(AGENT)
    state.request("m")
    state.add_reply("", [call("c1", "pay", amount=5), call("c2", "look")])
    before = list(state.history)
    with pytest.raises(ValueError, match=r"'c2' is not waiting for approval .its tool did not ask"):
        state.reject("c2")
    assert state.history == before
    state.add_tool_result("c2", "seen")
    state._wait_for_approval(["c1"])
    assert [c["id"] for c in state.pending_approvals] == ["c1"]
    before = list(state.history)
    with pytest.raises(ValueError, match=r"State.approve\('nope'\).*no tool call 'nope'"):
        state.approve("nope")
    with pytest.raises(TypeError, match="note must be a str"):
        state.approve("c1", note=3)  # type: ignore[arg-type]
    assert state.history == before
    state.reject("c1", note="too much")
    with pytest.raises(ValueError, match=r"'c1' was rejected already .* a decision is final"):
        state.approve("c1")
    state.add_tool_result("c1", "rejected", is_error=True)
    with pytest.raises(ValueError, match="'c1' was rejected already"):
        state.reject("c1")
    with pytest.raises(ValueError, match="'c2' is not waiting for approval: it has its result"):
        state.approve("c2")


def test_a_wait_cannot_leave_other_calls_owing_results() -> None:
    state = State("t")
    state.begin_run(AGENT)
    state.request("m")
    state.add_reply("", [call("c1", "pay"), call("c2", "look")])
    with pytest.raises(ValueError, match="while tool calls wait for results: c2"):
        state._wait_for_approval(["c1"])
    with pytest.raises(ValueError, match="'c9', which is not a pending call"):
        state._wait_for_approval(["c9", "c1", "c2"])
    state.add_tool_result("c2", "seen")
    state._wait_for_approval(["c1"])
    assert state.stopped_by == "approval"


def test_a_run_may_start_while_calls_wait_on_approval_but_not_while_others_owe() -> None:
    state = waiting(call("c1", "pay"), call("c2", "pay"))
    state.begin_run(AGENT)  # undecided: the run stops again
    assert state.stopped_by is None
    state._wait_for_approval(["c1", "c2"])  # named again: allowed
    state.approve("c1")
    state.begin_run(AGENT)
    state._resume_call("c1", "approved")
    with pytest.raises(ValueError, match="a run start while tool calls wait for results: c1"):
        state.begin_run(AGENT)  # c1 may be running now
    with pytest.raises(ValueError, match="'c1', which is decided already"):
        state._wait_for_approval(["c1"])
    with pytest.raises(ValueError, match="while tool calls wait for results"):
        state.add_user("and?")


def test_replay_refuses_damaged_approval_entries() -> None:
    state = waiting(call("c1", "pay"))
    entries = [dict(e) for e in state.history]
    replay = Replay()
    for e in entries:
        replay.apply(e)
    at = entries[-1]["at"]
    with pytest.raises(ValueError, match="approval entry needs 'approved' of type bool"):
        replay.apply({"seq": len(entries), "kind": "approval", "at": at, "call_id": "c1", "approved": "yes"})
    with pytest.raises(ValueError, match="'call_ids', distinct call ids"):
        replay.apply({"seq": len(entries), "kind": "approval_wait", "at": at, "call_ids": []})


def test_load_leaves_waiting_and_approved_calls_open(tmp_path: Any) -> None:
    with FileStore(tmp_path / "s") as store:
        state = waiting(call("c1", "pay"), call("c2", "pay"), call("c3", "pay"))
        state.approve("c1")
        state.reject("c2")
        store.save(state)
        loaded = store.load(state.id)
        assert loaded == state  # nothing repaired: none of them ran
        assert [c["id"] for c in loaded.pending_calls] == ["c1", "c2", "c3"]
        assert [c["id"] for c in loaded.pending_approvals] == ["c3"]
        assert loaded.stopped_by == "approval"


def test_load_repairs_an_approved_call_that_had_started(tmp_path: Any) -> None:
    with FileStore(tmp_path / "s") as store:
        state = waiting(call("c1", "pay"), call("c2", "pay"))
        state.approve("c1")
        state.begin_run(AGENT)
        state._resume_call("c1", "approved")  # saved before the tool ran: then the process died
        store.save(state)
        loaded = store.load(state.id)
        repaired = [e for e in loaded.history if e["kind"] == "tool_result"]
        assert [(e["call_id"], e["outcome"], e["output"]) for e in repaired] == [
            ("c1", "unknown", INTERRUPTED_TOOL)
        ]
        assert [c["id"] for c in loaded.pending_calls] == ["c2"]


def test_every_store_keeps_decisions(store: Store) -> None:
    state = waiting(call("c1", "pay", amount=5))
    store.save(state)
    loaded = store.load(state.id)
    loaded.reject("c1", note="no")
    store.save(loaded)
    again = store.load(state.id)
    assert kinds(again.history)[-2:] == ["approval_wait", "approval"]
    assert again.pending_approvals == [] and again.stopped_by == "approval"
    assert [r.id for r in store.list(status="approval")] == [state.id]


def test_only_an_approved_call_is_resumed_by_approved() -> None:
    state = waiting(call("c1", "pay"), call("c2", "pay"))
    with pytest.raises(ValueError, match="tool_resume by approved of call 'c1', which is not approved"):
        state._resume_call("c1", "approved")
    with pytest.raises(ValueError, match="tool_resume by idempotent of call 'c1', which waits for approval"):
        state._resume_call("c1", "idempotent")
    state.reject("c2")
    with pytest.raises(ValueError, match="'c2', which is not approved"):
        state._resume_call("c2", "approved")
    state.approve("c1")
    state._resume_call("c1", "approved")
    assert state._attempt("c1") == 1  # an approval is no attempt after a crash


def test_a_step_of_a_call_that_waits_for_approval_is_refused_in_replay() -> None:
    # A waiting call has not run, so no step of it can have started; once approved and
    # resumed, it runs and its steps may follow.
    state = waiting(call("c1", "pay", amount=5))
    step = {"seq": len(state.history), "kind": "step_start", "at": state.history[-1]["at"]}
    step.update(name="charge", key="sk1_x", call_id="c1")
    replay = Replay()
    for e in state.history:
        replay.apply(e)
    with pytest.raises(ValueError, match="step 'charge' of tool call 'c1', which waits for approval"):
        replay.apply(step)
    state.approve("c1")
    state._resume_call("c1", "approved")
    replay = Replay()
    for e in state.history:
        replay.apply(e)
    replay.apply({**step, "seq": len(state.history)})
    assert replay.steps[("c1", "charge")]["key"] == "sk1_x"


@pytest.mark.parametrize("bad", [["c9"], ["c1", "c1"], "c1", [1]])
def test_a_reply_whose_approval_list_is_bad_is_refused_and_adds_nothing(bad: Any) -> None:
    state = State("t")
    state.begin_run(AGENT)
    state.request("m")
    before = list(state.history)
    with pytest.raises(ValueError, match="'approval' must list distinct call ids of the reply"):
        state.add_reply("", [call("c1", "pay", amount=5)], awaiting_approval=bad)
    assert state.history == before and state.waiting_on_model
    state.add_reply("", [call("c1", "pay", amount=5)], awaiting_approval=["c1"])
    assert [p["id"] for p in state.pending_approvals] == ["c1"] and state.snapshot()["v"] == 4
