"""The exactly-once crash harness (tests/support/ledger.py): an agent whose tools change an
external ledger runs in a child process that is SIGKILLed at each save and effect boundary
in turn (32 per store: before and after each of the 12 saves and 4 effects of a run), on
FileStore, SQLiteStore, PostgresStore and RedisStore; each State is then loaded and finished
in this process, and the ledger and the history are checked against each other:

- ``pay`` (reconcile) and ``ship`` (idempotent): every call is in the ledger exactly once and
  its recorded result is the ledger's; pay never runs twice;
- ``notify`` (neither): never runs twice; a call in doubt is reported "may or may not have
  run";
- intent before effect: when a kill lands at an effect, the store already holds the call; a
  kill between the save of the reply and the first call, and one between a resumed run's
  saved ``tool_resume`` and the call it runs again, leave the call in doubt, one attempt on.

The random kills (at least 300 across the four stores) are the soak:
tests/agent/test_exactly_once_soak.py, under ``./dev test --soak``.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore
from tests.support.ledger import (
    EFFECTS,
    SAVES,
    ForkServer,
    Ledger,
    StoreSpec,
    all_faults,
    check,
    run_once,
)
from tests.support.servers import shared_postgres, shared_redis, unique_name

STORES = ["file", "sqlite", "postgres", "redis"]
#: The calls whose effects come in this order, and their tools.
EFFECT_CALLS = [("c1", "pay"), ("c2", "ship"), ("c3", "notify"), ("c4", "pay")]


def store_spec(kind: str, tmp_path: Path) -> StoreSpec:
    """Where a store of ``kind`` is, for this test and the children: a folder or file of
    ``tmp_path``, or a schema or key prefix of its own on the shared server."""
    if kind == "file":
        return StoreSpec("file", str(tmp_path / "store"))
    if kind == "sqlite":
        return StoreSpec("sqlite", str(tmp_path / "store.db"))
    if kind == "postgres":
        return StoreSpec("postgres", shared_postgres().dsn, unique_name("sk"))
    return StoreSpec("redis", shared_redis().url, unique_name("sk") + ":")


def test_the_fault_points_are_every_boundary_of_a_run(tmp_path: Path) -> None:
    """A run with no fault passes exactly SAVES saves and EFFECTS effects: the points."""
    store = FileStore(tmp_path / "store")
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        state = run_once(store, "clean", ledger)
    finally:
        store.close()
    assert dict(ledger.hook.seen) == {"save": SAVES, "effect": EFFECTS}
    verdict = check(state, ledger)
    assert (verdict.reconciled, verdict.unknown, verdict.reruns, sum(verdict.resumed.values())) == (
        0,
        0,
        0,
        0,
    )
    assert len(all_faults()) == 32


@pytest.mark.parametrize("kind", STORES)
def test_a_kill_at_every_boundary_then_a_resume_runs_every_call_once(kind: str, tmp_path: Path) -> None:
    spec = store_spec(kind, tmp_path)
    store = spec.open()
    server = ForkServer(tmp_path / "children.stderr")
    try:
        for i, fault in enumerate(all_faults()):
            sid, ledger_path = f"run-{i}", tmp_path / f"ledger-{i}.db"
            got = server.run(spec, sid, ledger_path, fault)
            assert got["signal"] == signal.SIGKILL, (
                f"{fault}: the child was not killed: {got}\n{server.errors()}"
            )
            kind_, k, side = fault
            if kind_ == "effect":
                check_intent_was_saved(store, sid, EFFECT_CALLS[k][0])
            ledger = Ledger(ledger_path)
            state = run_once(store, sid, ledger)  # a new process resumes
            verdict = check(state, ledger)
            if kind_ == "effect":
                check_resolution(state, verdict, ledger, EFFECT_CALLS[k], landed=side == "after")
            assert store.load(sid) == state  # what the resumed run saved is what it holds
    finally:
        server.close()
        store.close()


def check_intent_was_saved(store: Any, sid: str, call_id: str) -> None:
    """Killed at call ``call_id``'s effect: the store holds the reply with the call, no result."""
    record = store.read(sid)
    assert record is not None
    replies = [e for e in record.entries if e["kind"] == "model_reply"]
    assert call_id in [c["id"] for c in replies[-1]["tool_calls"]]
    assert call_id not in [e["call_id"] for e in record.entries if e["kind"] == "tool_result"]


def check_resolution(
    state: Any, verdict: Any, ledger: Ledger, call: tuple[str, str], *, landed: bool
) -> None:
    """What the resumed run did with the call killed at its effect (``landed``: after it)."""
    call_id, name = call
    result = next(e for e in state.history if e["kind"] == "tool_result" and e["call_id"] == call_id)
    resumes = [e["by"] for e in state.history if e["kind"] == "tool_resume" and e["call_id"] == call_id]
    runs = ledger.runs().get(call_id, [])
    if name == "pay":  # reconcile: found it, or found it not run and ran it (attempt 2)
        assert bool(result.get("reconciled")) is landed
        assert resumes == ([] if landed else ["reconcile"])
        assert runs == ([1] if landed else [2])
    elif name == "ship":  # idempotent: run again with the same key, the ledger keeps one row
        assert resumes == ["idempotent"] and not result.get("reconciled")
        assert runs == ([1, 2] if landed else [2])
    else:  # neither: said to be in doubt, never run again
        assert result["outcome"] == "unknown" and resumes == []
        assert runs == ([1] if landed else [])
    assert verdict.reruns == (1 if landed and name == "ship" else 0)


def test_a_kill_between_the_save_of_the_call_and_the_call(tmp_path: Path) -> None:
    """Intent before effect: killed after the reply with the calls is saved and before the
    first tool starts, the store holds the calls and the ledger nothing; the resumed run
    finds them not run (reconcile) or runs them again (idempotent), each once."""
    spec = store_spec("file", tmp_path)
    server = ForkServer(tmp_path / "children.stderr")
    try:
        got = server.run(spec, "between", tmp_path / "ledger.db", ("save", 2, "after"))
    finally:
        server.close()
    assert got["signal"] == signal.SIGKILL, server.errors()
    store = spec.open()
    try:
        record = store.read("between")
        assert record is not None and record.entries[-1]["kind"] == "model_reply"
        assert [c["id"] for c in record.entries[-1]["tool_calls"]] == ["c1", "c2"]
        ledger = Ledger(tmp_path / "ledger.db")
        assert ledger.rows() == {}
        state = run_once(store, "between", ledger)
    finally:
        store.close()
    check(state, ledger)
    kinds = [(e["kind"], e.get("call_id"), e.get("by")) for e in state.history[len(record.entries) :]][:5]
    assert kinds == [
        ("tool_resume", "c1", "reconcile"),
        ("tool_resume", "c2", "idempotent"),
        ("tool_result", "c1", None),
        ("tool_result", "c2", None),
        ("run_start", None, None),
    ]
    assert ledger.runs() == {"c1": [2], "c2": [2], "c3": [1], "c4": [1]}


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(
    ("first", "call_id", "runs"),
    [
        (("effect", 0, "before"), "c1", [3]),  # pay not run: found not run twice, run on attempt 3
        (("effect", 1, "after"), "c2", [1, 3]),  # ship ran: run again twice, the second time lands
    ],
)
def test_a_kill_after_the_resume_is_saved_and_before_the_call_runs_again(
    kind: str, first: Any, call_id: str, runs: list[int], tmp_path: Path
) -> None:
    """Intent before effect on resume: the tool_resume is durable before the call runs again,
    so a kill right after it leaves the call in doubt once more, one attempt further on."""
    spec = store_spec(kind, tmp_path)
    ledger_path = tmp_path / "ledger.db"
    server = ForkServer(tmp_path / "children.stderr")
    try:
        for fault in (first, ("save", 0, "after")):  # the resumed run's first save: its tool_resume
            got = server.run(spec, "twice", ledger_path, fault)
            assert got["signal"] == signal.SIGKILL, f"{fault}: {got}\n{server.errors()}"
    finally:
        server.close()
    store = spec.open()
    try:
        record = store.read("twice")
        assert record is not None and record.entries[-1]["kind"] == "tool_resume"
        assert call_id in [e["call_id"] for e in record.entries if e["kind"] == "tool_resume"]
        ledger = Ledger(ledger_path)
        state = run_once(store, "twice", ledger)
    finally:
        store.close()
    check(state, ledger)
    assert ledger.runs()[call_id] == runs
    assert len([e for e in state.history if e["kind"] == "tool_resume" and e["call_id"] == call_id]) == 2
