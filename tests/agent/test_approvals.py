"""The reference loop and approvals: a reply's calls whose tool wants approval stop the run
(the reply's other calls run first); a decided State runs on: approved calls run once (their
``tool_resume`` saved before), rejected ones give the model an error with the note; calls
still undecided stop the run again without asking the model.

The history kinds and the State API: tests/run/test_approvals.py. Across processes and the
CLI: tests/cli/test_cli_approvals.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeep import Agent, FileStore, Reply, ScriptedModel, State, ToolContext, idempotency_key, tool
from statekeep._agent.approving import REJECTED
from tests.support.agents import call, kinds

RAN: list[tuple[str, int]] = []


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    RAN.append(("pay", amount))
    return f"paid {amount}"


@tool(needs_approval=lambda args: args["amount"] > 100)
def refund(amount: int) -> str:
    """Refund an amount; large ones need approval."""
    RAN.append(("refund", amount))
    return f"refunded {amount}"


def look(city: str) -> str:
    """Look something up."""
    RAN.append(("look", 0))
    return f"{city}: sunny"


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


def results(state: State) -> list[tuple[str, Any, bool, str]]:
    return [
        (e["call_id"], e["output"], e["is_error"], e["outcome"])
        for e in state.history
        if e["kind"] == "tool_result"
    ]


def test_a_run_stops_for_approval_after_the_other_calls_then_runs_the_approved(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Reply(
                "",
                [
                    call("c1", "pay", amount=5),
                    call("c2", "look", city="Oslo"),
                    call("c3", "refund", amount=3),
                ],
            ),
            "done",
        ]
    )
    with FileStore(tmp_path / "s") as store:
        agent = Agent(model, tools=[pay, refund, look], store=store)
        state = State("pay")
        assert agent.run(state) is None
        assert state.stopped_by == "approval" and len(model.calls) == 1
        assert RAN == [("look", 0), ("refund", 3)]  # the others ran first
        assert kinds(state.history)[-1] == "approval_wait"
        saved = store.load(state.id)
        assert saved == state and [p["id"] for p in saved.pending_approvals] == ["c1"]
        assert [r.id for r in store.list(status="approval")] == [state.id]

        saved.approve("c1", note="fine")
        store.save(saved)
        assert agent.run(saved) == "done"
        assert RAN[2:] == [("pay", 5)]
        resumed = [e for e in saved.history if e["kind"] == "tool_resume"]
        assert [(e["call_id"], e["by"]) for e in resumed] == [("c1", "approved")]
        order = kinds(saved.history)
        assert order.index("tool_resume") < len(order) - 1 - order[::-1].index("tool_result")
        assert ("c1", "paid 5", False, "done") in results(saved)
        assert store.load(state.id) == saved


def test_a_rejected_call_gives_the_model_an_error_with_the_note(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("", [call("c1", "pay", amount=5)]), "ok, I will not pay"])
    with FileStore(tmp_path / "s") as store:
        agent = Agent(model, tools=[pay], store=store)
        state = State("pay")
        agent.run(state)
        state.reject("c1", note="too expensive")
        assert agent.run(state) == "ok, I will not pay"
        assert RAN == []
        assert results(state) == [("c1", f"{REJECTED} Their note: too expensive", True, "error")]
        shown = model.calls[-1][-1]
        assert shown["role"] == "tool" and "too expensive" in shown["content"]


def test_undecided_calls_stop_the_run_again_without_asking_the_model(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("", [call("c1", "pay", amount=5), call("c2", "refund", amount=500)]), "x"])
    with FileStore(tmp_path / "s") as store:
        agent = Agent(model, tools=[pay, refund], store=store)
        state = State("pay")
        agent.run(state)
        assert [p["id"] for p in state.pending_approvals] == ["c1", "c2"]
        assert agent.run(state) is None  # nothing decided
        assert len(model.calls) == 1 and state.stopped_by == "approval"
        state.approve("c2")
        assert agent.run(state) is None  # c2 runs; c1 still waits
        assert RAN == [("refund", 500)] and len(model.calls) == 1
        assert [p["id"] for p in state.pending_approvals] == ["c1"]
        assert kinds(state.history)[-1] == "approval_wait"
        assert state.history[-1]["call_ids"] == ["c1"]
        state.reject("c1")
        assert agent.run(state) == "x"
        assert results(state)[-1] == ("c1", REJECTED, True, "error")
        assert store.load(state.id) == state


def test_a_predicate_that_raises_asks_for_approval(tmp_path: Path) -> None:
    @tool(needs_approval=lambda args: 1 / 0)
    def risky() -> str:
        """Risky."""
        RAN.append(("risky", 0))
        return "did it"

    agent = Agent(ScriptedModel([Reply("", [call("c1", "risky")]), "x"]), tools=[risky])
    state = State("t")
    agent.run(state)
    assert state.stopped_by == "approval" and RAN == []


def test_an_unsaved_state_waits_too() -> None:
    agent = Agent(ScriptedModel([Reply("", [call("c1", "pay", amount=1)]), "x"]), tools=[pay])
    state = State("t")
    assert agent.run(state) is None and state.stopped_by == "approval"
    state.approve("c1")
    assert agent.run(state) == "x" and RAN == [("pay", 1)]


def test_arun_and_a_leased_run_stop_and_go_on_the_same_way(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("", [call("c1", "pay", amount=9)]), "paid"])
    with FileStore(tmp_path / "s") as store:
        agent = Agent(model, tools=[pay], store=store, lease_ttl=30, owner="worker-a")
        state = State("pay", id="job")
        assert asyncio.run(agent.arun(state)) is None
        assert store.current_lease("job") is None  # released while it waits for a person
        state.approve("c1")
        assert asyncio.run(agent.arun(state)) == "paid"
        assert RAN == [("pay", 9)] and store.load("job") == state


def test_an_approved_call_gets_its_tool_context_with_the_calls_key(tmp_path: Path) -> None:
    seen: list[ToolContext] = []

    @tool(needs_approval=True)
    def wire(amount: int, ctx: ToolContext) -> str:
        """Wire an amount."""
        seen.append(ctx)
        return f"wired {amount}"

    model = ScriptedModel([Reply("", [call("w1", "wire", amount=9)]), "done"])
    with FileStore(tmp_path / "s") as store:
        state = State("wire")
        assert Agent(model, tools=[wire], store=store).run(state) is None
        loaded = store.load(state.id)
        loaded.approve("w1")
        assert Agent(model, tools=[wire], store=store).run(loaded) == "done"
    assert [(c.call_id, c.args, c.attempt) for c in seen] == [("w1", {"amount": 9}, 1)]
    assert seen[0].idempotency_key == idempotency_key(state.id, state.incarnation, "w1")


@pytest.mark.parametrize("settles", ["idempotent", "reconcile"])
def test_an_approved_call_cut_off_while_it_ran_is_settled_by_its_tool(tmp_path: Path, settles: str) -> None:
    attempts: list[int] = []

    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge an amount."""
        attempts.append(ctx.attempt)
        return f"charged {amount}"

    found = lambda ctx: "charged 7 (found)"  # noqa: E731  (its reconcile: the charge went through)
    options: dict[str, Any] = {"idempotent": True} if settles == "idempotent" else {"reconcile": found}
    gated = tool(needs_approval=True, **options)(charge)
    with FileStore(tmp_path / "s") as store:
        agent = Agent(
            ScriptedModel([Reply("", [call("c1", "charge", amount=7)]), "done"]), tools=[gated], store=store
        )
        state = State("charge")
        assert agent.run(state) is None
        cut = store.load(state.id)
        cut.approve("c1")
        cut.begin_run(agent.info())
        cut._resume_call("c1", "approved")  # the run's process died in the tool, after this save
        store.save(cut)
        again = store.load(state.id)
        agent.model = ScriptedModel(["done"])
        assert agent.run(again) == "done"
        result = [e for e in store.load(state.id).history if e["kind"] == "tool_result"]
    if settles == "idempotent":
        assert attempts == [2] and result[0]["output"] == "charged 7" and result[0]["outcome"] == "done"
    else:
        assert (
            attempts == [] and result[0]["output"] == "charged 7 (found)" and result[0]["reconciled"] is True
        )


def test_a_crash_before_the_run_stops_for_approval_leaves_the_call_waiting_not_in_doubt(
    tmp_path: Path,
) -> None:
    # The reply records which of its calls wait for approval, so a kill while the reply's
    # other calls run (before the approval_wait) cannot make the waiting call look as if it
    # may have run: it has not, and it still waits for a person.
    class Killed(BaseException):
        pass

    def explode(city: str) -> str:
        """Look something up (the process dies here)."""
        raise Killed

    model = ScriptedModel([Reply("", [call("c1", "pay", amount=5), call("c2", "look", city="Oslo")]), "done"])
    with FileStore(tmp_path / "s") as store:
        state = State("pay", id="crash")
        with pytest.raises(Killed):
            Agent(model, tools=[pay, tool(name="look")(explode)], store=store).run(state)
        reply = next(e for e in store.load("crash").history if e["kind"] == "model_reply")
        assert reply["approval"] == ["c1"]
        loaded = store.load("crash")
        assert [p["id"] for p in loaded.pending_approvals] == ["c1"]
        assert [(r[0], r[3]) for r in results(loaded)] == [("c2", "unknown")]  # only c2 is in doubt
        agent = Agent(ScriptedModel(["done"]), tools=[pay, look], store=store)
        assert agent.run(loaded) is None and loaded.stopped_by == "approval"
        loaded.approve("c1")
        assert agent.run(loaded) == "done" and RAN == [("pay", 5)]
        assert ("c1", "paid 5", False, "done") in results(loaded)
