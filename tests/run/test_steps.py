"""Durable steps in the history (format 4): what ``step_start`` / ``step_end`` entries can
follow, how a State that holds them is stamped, what a trim's base record keeps of them, and
``ctx.step`` inside a tool run by the Agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeep import (
    Agent,
    CorruptStateError,
    FileStore,
    LeaseHeldError,
    MemoryStore,
    Reply,
    ScriptedModel,
    State,
    StepFailedError,
    StepInDoubtError,
    ToolContext,
    tool,
)
from statekeep._run.base import build_base
from statekeep._run.history import Replay


def entry(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": "2026-01-01T00:00:00+00:00", **fields}


def replay(*entries: dict[str, Any]) -> Replay:
    r = Replay()
    for e in [entry(0, "task", text="t"), *entries]:
        r.apply(e)
    return r


START = {"name": "a", "key": "sk1_x"}
END = {"name": "a", "output": 1, "is_error": False, "outcome": "done"}


def test_a_step_replays_into_its_record_and_stamps_format_4() -> None:
    r = replay(entry(1, "step_start", **START), entry(2, "step_end", **END))
    assert r.steps[(None, "a")] == {"name": "a", "key": "sk1_x", "attempt": 1, **END}
    assert r.step_order == {None: ["a"]} and r.version == 4
    assert r.messages == [{"role": "user", "content": "t"}]  # the model never sees steps


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([entry(1, "step_end", **END)], "the end of step 'a', which is not started"),
        ([entry(1, "step_start", **START), entry(2, "step_end", **END), entry(3, "step_end", **END)],
         "has its end recorded already"),
        ([entry(1, "step_start", **START), entry(2, "step_end", **END), entry(3, "step_start", **START)],
         "its end is recorded already"),
        ([entry(1, "step_start", **START, attempt=2)], "starts at attempt 2, not 1"),
        ([entry(1, "step_start", **START), entry(2, "step_start", **START, attempt=3)],
         "at attempt 3, after attempt 1"),
        ([entry(1, "step_start", **START), entry(2, "step_end", **{**END, "outcome": "maybe"})],
         "outcome 'maybe'"),
        ([entry(1, "step_start", **START), entry(2, "step_end", **{k: v for k, v in END.items() if k != "output"})],
         "needs 'output'"),
        ([entry(1, "step_start", **START, call_id="c1")], "tool call 'c1', which is not a pending call"),
        ([entry(1, "step_start", name="a")], "needs 'key'"),
    ],
)  # fmt: skip
def test_step_entries_that_cannot_follow_are_refused(entries: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay(*entries)


def test_a_base_record_carries_the_steps_and_a_history_starting_there_replays_them() -> None:
    removed = [
        entry(0, "task", text="t"),
        entry(1, "step_start", **START),
        entry(2, "step_end", **END),
        entry(3, "step_start", name="b", key="sk1_y"),
    ]
    base = build_base(removed)
    assert base["steps"] == [
        {"name": "a", "key": "sk1_x", "attempt": 1, **END},
        {"name": "b", "key": "sk1_y", "attempt": 1},
    ]
    r = Replay()
    r.apply(base)
    assert r.steps == replay(*removed[1:]).steps and r.step_order == {None: ["a", "b"]} and r.version == 4
    r.apply(entry(4, "step_end", name="b", output=None, is_error=True, outcome="unknown"))
    assert "steps" not in build_base([entry(0, "task", text="t")])  # none: the base as before
    with pytest.raises(ValueError, match="steps each need"):
        Replay().apply({**base, "steps": [{"name": "a"}]})


def test_a_damaged_step_entry_makes_the_state_damaged(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        state = State("t", id="s1")
        store.step(state, "a", lambda: 1)
        record = store.read("s1")
        assert record is not None
        store.delete("s1")
        store.write("s1", [*record.entries, entry(3, "step_end", **END)], record.snapshot, create=True)
        with pytest.raises(CorruptStateError, match="seq 3: the end of step 'a'"):
            store.load("s1")


async def test_ctx_step_inside_a_tool_is_saved_per_call_and_replays(tmp_path: Path) -> None:
    runs: list[str] = []

    @tool
    async def pay(amount: int, ctx: ToolContext) -> Any:
        """Pay."""
        got = await ctx.step("charge", lambda: runs.append(ctx.call_id) or {"charged": amount})
        again = await ctx.step("receipt", lambda: f"receipt {amount}")
        return [got, again]

    model = ScriptedModel(
        [
            Reply("", [{"id": "c1", "name": "pay", "args": {"amount": 5}}]),
            Reply("", [{"id": "c2", "name": "pay", "args": {"amount": 7}}]),
            "paid",
        ]
    )
    with FileStore(tmp_path / "s") as store:
        state = State("pay twice", id="s1")
        assert await Agent(model, tools=[pay], store=store).arun(state) == "paid"
        loaded = store.load("s1")
        results = [e["output"] for e in loaded.history if e["kind"] == "tool_result"]
        assert results == [[{"charged": 5}, "receipt 5"], [{"charged": 7}, "receipt 7"]]
        steps = [
            (e["kind"], e["call_id"], e["name"]) for e in loaded.history if e["kind"].startswith("step_")
        ]
        assert steps == [
            (kind, call, name) for call in ("c1", "c2") for name in ("charge", "receipt")
            for kind in ("step_start", "step_end")
        ]  # fmt: skip
        assert runs == ["c1", "c2"]
        # Each call's steps have their own keys, apart from the State's own steps.
        keys = {e["key"] for e in loaded.history if e["kind"] == "step_start"}
        assert len(keys) == 4


async def test_ctx_step_without_a_store_says_why() -> None:
    @tool
    async def pay(ctx: ToolContext) -> Any:
        """Pay."""
        return await ctx.step("charge", lambda: 1)

    model = ScriptedModel([Reply("", [{"id": "c1", "name": "pay", "args": {}}]), "done"])
    state = State("pay")
    await Agent(model, tools=[pay]).arun(state)
    result = next(e for e in state.history if e["kind"] == "tool_result")
    assert result["is_error"] and "needs a call run by an Agent with a store" in result["output"]


def test_a_step_on_a_finished_state_is_refused_and_nothing_runs() -> None:
    store = MemoryStore()
    state = State("t", id="s1")
    state.finish("over")
    ran: list[int] = []
    with pytest.raises(ValueError, match="finished"):
        store.step(state, "a", lambda: ran.append(1))
    assert ran == [] and [e["kind"] for e in state.history] == ["task", "stop"]
    store.close()


def test_the_errors_say_which_step() -> None:
    store = MemoryStore()
    state = State("t", id="s1")
    with pytest.raises(StepFailedError, match=r"step 'a' of State 's1' failed .*ZeroDivisionError"):
        store.step(state, "a", lambda: 1 / 0)
    assert issubclass(StepInDoubtError, RuntimeError) and issubclass(StepFailedError, RuntimeError)
    store.close()


def test_a_step_whose_start_was_not_saved_is_not_in_doubt(tmp_path: Path) -> None:
    """A refused save of the start (nothing written) leaves the step to start again, in
    this State object, and ``fn`` never ran; with ``lease=`` the step saves under it."""
    ran: list[int] = []
    with FileStore(tmp_path / "s") as store:
        state = State("t", id="s1")
        store.save(state)
        lease = store.acquire("s1", "another-worker", 60)
        with pytest.raises(LeaseHeldError):
            store.step(state, "a", lambda: ran.append(1) or 1)
        assert ran == []
        assert store.step(state, "a", lambda: ran.append(2) or 2, lease=lease) == 2  # not in doubt
        assert ran == [2]
        store.release(lease)
        assert store.step(store.load("s1"), "a", lambda: 3) == 2
