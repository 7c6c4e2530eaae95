"""A run of the OpenAI Agents SDK paused for approvals is kept in its StatekeepSession
(save_run_state / load_run_state / clear_run_state), so another process approves or rejects
and runs on, its tool keyed by session.tool_call_key the same in every process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.exceptions import UserError
from agents.testing import ScriptedModel, assistant_message, function_call

from statekeep import CorruptStateError, MemoryStore, Store, idempotency_key, open_store
from statekeep._run.shown_openai import shown
from statekeep.adapters.openai_agents import StatekeepSession
from tests.support.children.openai_approval_child import CALL_ID
from tests.support.frameworks import BACKENDS, REPO, backend_url, require_installed

SESSION = "user:42/invoices"


def in_child(url: str, ledger: Path, phase: str) -> tuple[int, dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.children.openai_approval_child",
            url,
            SESSION,
            str(ledger),
            phase,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return done.returncode, json.loads(lines[-1])


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
def test_a_new_process_approves_and_the_tool_runs_once(backend: str, tmp_path: Path) -> None:
    require_installed("openai-agents", "0.24.0")
    url, ledger = backend_url(backend, tmp_path), tmp_path / "ledger"
    code, started = in_child(url, ledger, "start")
    assert code == -signal.SIGKILL  # killed right after save_run_state returned
    assert started == {"waiting": [{"tool": "pay", "call_id": CALL_ID}], "final": None}
    assert ledger_lines(ledger) == []  # waiting: the tool has not run

    code, done = in_child(url, ledger, "approve")
    assert code == 0
    assert done["waiting"] == started["waiting"] and done["final"] == "paid"
    with open_store(url) as store:  # once, with the key of this session's State
        session = StatekeepSession(SESSION, store)
        record = session.store.read(session.state_id)
    assert record is not None and record.incarnation is not None
    assert ledger_lines(ledger) == [idempotency_key(SESSION, record.incarnation, CALL_ID)]
    assert done["left"] is False  # cleared once the run went on
    outputs = [item for item in done["items"] if item.get("type") == "function_call_output"]
    assert outputs == [{"call_id": CALL_ID, "output": "paid 5", "type": "function_call_output"}]


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_new_process_rejects_and_the_tool_never_runs(backend: str, tmp_path: Path) -> None:
    require_installed("openai-agents", "0.24.0")
    url, ledger = backend_url(backend, tmp_path), tmp_path / "ledger"
    assert in_child(url, ledger, "start")[0] == -signal.SIGKILL
    code, done = in_child(url, ledger, "reject")
    assert code == 0 and done["final"] == "not paid" and done["left"] is False
    assert ledger_lines(ledger) == []
    outputs = [item for item in done["items"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in outputs] == ["the manager said no"]  # what the model was told


# -- in one process, on every store ---------------------------------------------------------


def clerk(steps: list[Any], ran: list[int]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        ran.append(amount)
        return f"paid {amount}"

    return Agent(name="clerk", model=ScriptedModel(steps), tools=[pay])


async def paused(session: StatekeepSession, amount: int, call_id: str, ran: list[int]) -> Any:
    """A run that stops for approval of pay(amount), on ``session``."""
    agent = clerk([[function_call("pay", {"amount": amount}, call_id=call_id)]], ran)
    result = await Runner.run(agent, f"pay {amount}", session=session)
    assert [item.call_id for item in result.interruptions] == [call_id]
    return result


async def test_nothing_saved_loads_as_none_and_clearing_it_writes_nothing(store: Store) -> None:
    session = StatekeepSession("s", store)
    assert await session.load_run_state(clerk([], [])) is None
    await session.clear_run_state()
    assert await store.aread(session.state_id) is None
    await session.add_items([{"role": "user", "content": "hi"}])
    await session.clear_run_state()
    record = await store.aread(session.state_id)
    assert record is not None and [e["kind"] for e in record.entries] == ["session", "item"]


async def test_save_load_clear_round_trip_leaving_the_items_alone(store: Store) -> None:
    ran: list[int] = []
    session = StatekeepSession("s", store)
    result = await paused(session, 5, "c1", ran)
    items = await session.get_items()
    await session.save_run_state(result.to_state())
    assert await session.get_items() == items  # the run state is no item
    assert await session.get_items(limit=1) == items[-1:]

    agent = clerk([[assistant_message("paid")]], ran)
    state = await StatekeepSession("s", store).load_run_state(agent)  # a fresh object reads it
    assert state is not None
    assert [(item.name, item.call_id) for item in state.get_interruptions()] == [("pay", "c1")]
    state.approve(state.get_interruptions()[0])
    done = await Runner.run(agent, state, session=session)
    await session.clear_run_state()
    assert done.final_output == "paid" and ran == [5]
    assert await session.load_run_state(agent) is None
    assert await StatekeepSession("s", store).load_run_state(agent) is None

    record = await store.aread(session.state_id)
    assert record is not None
    marks = [e for e in record.entries if e["kind"] == "run_state"]
    assert [m["run_state"] is None for m in marks] == [False, True]  # saved, then cleared
    assert [shown(m).line for m in marks] == [
        'save_run_state: a run paused for approval of pay({"amount":5}) [c1]',
        "clear_run_state: the run paused for approvals went on",
    ]


async def test_a_new_save_replaces_the_old_and_clear_session_keeps_it(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.save_run_state((await paused(session, 5, "c1", [])).to_state())
    await session.save_run_state((await paused(session, 7, "c2", [])).to_state())
    await session.clear_session()  # the items go; the paused run stays
    assert await session.get_items() == []
    state = await StatekeepSession("s", store).load_run_state(clerk([], []))
    assert state is not None and [item.call_id for item in state.get_interruptions()] == ["c2"]


async def test_a_run_state_alone_starts_the_session() -> None:
    store = MemoryStore()
    agent = clerk([[function_call("pay", {"amount": 1}, call_id="c1")]], [])
    result = await Runner.run(agent, "pay 1")  # no session: the SDK keeps the items in the state
    session = StatekeepSession("fresh", store)
    await session.save_run_state(result.to_state())
    assert await session.get_items() == []
    state = await session.load_run_state(agent)
    assert state is not None and [item.call_id for item in state.get_interruptions()] == ["c1"]
    (row,) = await session.store.alist()  # the sessions' namespace
    assert row.task == "fresh"


async def test_a_run_state_the_codec_refuses_is_a_clear_error_and_writes_nothing(store: Store) -> None:
    agent = clerk([[function_call("pay", {"amount": 1}, call_id="c1")]], [])
    result = await Runner.run(agent, "pay 1", context={"rate": float("nan")})
    session = StatekeepSession("s", store)
    with pytest.raises(TypeError, match=r"save_run_state: the run state.*nan"):
        await session.save_run_state(result.to_state())
    assert await store.aread(session.state_id) is None


async def test_a_closed_session_refuses_run_state_calls() -> None:
    session = StatekeepSession("s", MemoryStore())
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        await session.load_run_state(clerk([], []))
    with pytest.raises(RuntimeError, match="closed"):
        await session.clear_run_state()


async def test_run_states_and_items_written_at_once_lose_nothing(store: Store) -> None:
    one, two = StatekeepSession("busy", store), StatekeepSession("busy", store)
    await one.add_items([{"role": "user", "content": "start"}])
    states = [
        (await paused(StatekeepSession(f"scratch-{i}", store), i, f"c{i}", [])).to_state() for i in range(4)
    ]

    async def add(i: int) -> None:
        await (one if i % 2 else two).add_items([{"role": "user", "content": f"m{i}"}])

    await asyncio.gather(
        *(add(i) for i in range(8)),
        *((two if i % 2 else one).save_run_state(s) for i, s in enumerate(states)),
    )
    items = await StatekeepSession("busy", store).get_items()
    assert sorted(item["content"] for item in items) == sorted(["start", *(f"m{i}" for i in range(8))])
    record = await store.aread(one.state_id)
    assert record is not None
    saved = [e for e in record.entries if e["kind"] == "run_state"]
    assert len(saved) == 4  # each save landed once
    newest = saved[-1]["run_state"]["current_step"]["data"]["interruptions"][0]["raw_item"]["call_id"]
    state = await StatekeepSession("busy", store).load_run_state(clerk([], []))
    assert state is not None and [item.call_id for item in state.get_interruptions()] == [
        newest
    ]  # the last one


async def test_a_snapshot_pointing_at_no_run_state_is_a_clear_error(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.add_items([{"role": "user", "content": "hi"}])
    record = await store.aread(session.state_id)
    assert record is not None and record.snapshot is not None
    meta = record.snapshot["openai_session"]
    for wrong, message in ((1, "the entry there is not one"), (7, "outside its history"), ("1", "outside")):
        await store.awrite(
            session.state_id, [], {**record.snapshot, "openai_session": {**meta, "run_state": wrong}}
        )
        with pytest.raises(CorruptStateError, match=message):
            await StatekeepSession("s", store).load_run_state(clerk([], []))


async def test_of_several_takers_at_once_exactly_one_gets_the_run_state(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.save_run_state((await paused(session, 5, "c1", [])).to_state())
    takers = [StatekeepSession("s", store) for _ in range(5)]
    got = await asyncio.gather(*(taker.take_run_state(clerk([], [])) for taker in takers))
    (state,) = [found for found in got if found is not None]
    assert [item.call_id for item in state.get_interruptions()] == ["c1"]
    assert await session.take_run_state(clerk([], [])) is None
    assert await session.load_run_state(clerk([], [])) is None

    record = await store.aread(session.state_id)
    assert record is not None
    marks = [e for e in record.entries if e["kind"] == "run_state"]
    assert [m.get("taken") for m in marks] == [None, marks[0]["seq"]]  # saved, taken once
    assert (
        shown(marks[1]).line == f"take_run_state: the run state at seq {marks[0]['seq']} was taken to go on"
    )


async def test_a_take_for_the_wrong_agent_raises_and_clears_nothing(store: Store) -> None:
    session = StatekeepSession("s", store)
    await session.save_run_state((await paused(session, 5, "c1", [])).to_state())
    stranger = Agent(name="stranger", model=ScriptedModel([]))
    with pytest.raises(UserError, match="agent not found"):  # the SDK's own error
        await session.take_run_state(stranger)
    ran: list[int] = []
    agent = clerk([[assistant_message("paid")]], ran)
    state = await session.take_run_state(agent)  # still there
    assert state is not None
    state.approve(state.get_interruptions()[0])
    assert (await Runner.run(agent, state, session=session)).final_output == "paid" and ran == [5]
