"""Approvals across processes and from the command line: a run stops for approval and its
process exits; ``statekeep approvals`` lists the call, ``statekeep approve`` (or ``reject``)
decides it, each in a process of its own; a new process runs the agent on, and the tool runs
once (or never); killed with SIGKILL while the approved tool runs, it is "may or may not have
run" and never runs again. Errors: one line and an exit status, nothing saved.

The loop: tests/agent/test_approvals.py; the history and the State API: tests/run/test_approvals.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, SQLiteStore
from statekeep._run.resume import INTERRUPTED_TOOL
from tests.support.agents import kinds
from tests.support.children.approval_child import MARKER

CHILD = Path(__file__).parents[1] / "support" / "children" / "approval_child.py"


def child(mode: str, url: str, state_id: str, ledger: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(CHILD), mode, url, state_id, str(ledger)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeep", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(params=["file", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "runs") if request.param == "file" else f"sqlite:///{tmp_path / 'runs.db'}"


def opened(url: str) -> FileStore | SQLiteStore:
    return SQLiteStore(url.removeprefix("sqlite:///")) if url.startswith("sqlite") else FileStore(url)


def test_stop_exit_approve_from_the_cli_then_a_new_process_runs_the_tool_once(
    url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    assert child("start", url, "bill", ledger) == {"stopped_by": "approval", "answer": None}
    assert not ledger.exists()  # pay waits; look ran

    listed = run_cli("approvals", "--store", url)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "CALL", "TOOL", "SINCE"]
    assert row.split()[:3] == ["bill", "call-pay", "pay"] and "amount=120" in row
    as_json = [
        json.loads(line) for line in run_cli("approvals", "--store", url, "--json").stdout.splitlines()
    ]
    assert [(r["id"], r["call"], r["tool"], r["args"]) for r in as_json] == [
        ("bill", "call-pay", "pay", {"amount": 120})
    ]

    decided = run_cli("approve", "bill", "call-pay", "--note", "ok, Ann", "--store", url)
    assert decided.returncode == 0, decided.stderr
    assert "approved call call-pay of bill" in decided.stdout
    assert run_cli("approvals", "--store", url).stdout.strip() == "no tool calls wait for approval"

    assert child("resume", url, "bill", ledger) == {"stopped_by": "finish", "answer": "Done."}
    assert ledger.read_text() == "paid 120\n"
    with opened(url) as store:
        state = store.load("bill")
    assert state.finished
    assert [e["by"] for e in state.history if e["kind"] == "tool_resume"] == ["approved"]
    decision = next(e for e in state.history if e["kind"] == "approval")
    assert decision["approved"] is True and decision["note"] == "ok, Ann"
    shown = run_cli("show", "bill", "--store", url).stdout
    assert "waiting for approval: call-pay" in shown and "approved [call-pay]: ok, Ann" in shown

    again = run_cli("approve", "bill", "call-pay", "--store", url)
    assert again.returncode == 2
    assert again.stderr.strip().startswith("statekeep: State bill: tool call 'call-pay' was approved already")


def test_reject_from_the_cli_and_the_tool_never_runs(url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    child("start", url, "bill", ledger)
    decided = run_cli("reject", "bill", "call-pay", "--note", "too much", "--store", url)
    assert decided.returncode == 0, decided.stderr
    assert child("resume", url, "bill", ledger) == {"stopped_by": "finish", "answer": "Done."}
    assert not ledger.exists()
    with opened(url) as store:
        state = store.load("bill")
    result = next(e for e in state.history if e["kind"] == "tool_result" and e["call_id"] == "call-pay")
    assert result["is_error"] and result["outcome"] == "error" and "too much" in result["output"]
    assert "tool_resume" not in kinds(state.history)


def test_bad_decisions_are_one_line_and_save_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "runs")
    child("start", url, "bill", tmp_path / "ledger")
    with opened(url) as store:
        before = store.read("bill")
    cases = [
        (("approve", "nobody", "call-pay"), 1, "no State 'nobody'"),
        (("approve", "bill", "call-nope"), 1, "there is no tool call 'call-nope' in this State"),
        (("reject", "bill", "call-look"), 2, "tool call 'call-look' is not waiting for approval"),
    ]
    for args, code, words in cases:
        proc = run_cli(*args, "--store", url)
        assert proc.returncode == code, (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and words in proc.stderr, proc.stderr
    with opened(url) as store:
        assert store.read("bill") == before
    missing = run_cli("approvals", "--store", str(tmp_path / "none"))
    assert missing.returncode == 1 and "no store at" in missing.stderr


def test_a_process_killed_while_the_approved_tool_runs_never_runs_it_again(tmp_path: Path) -> None:
    url, ledger = str(tmp_path / "runs"), tmp_path / "ledger"
    child("start", url, "bill", ledger)
    assert run_cli("approve", "bill", "call-pay", "--store", url).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "resume-block", url, "bill", str(ledger)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == MARKER  # the effect happened; its result is unsaved
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with opened(url) as store:
        loaded = store.load("bill")
    repaired = next(e for e in loaded.history if e["kind"] == "tool_result" and e["call_id"] == "call-pay")
    assert repaired["outcome"] == "unknown" and repaired["output"] == INTERRUPTED_TOOL
    assert loaded.pending_approvals == []
    assert child("resume", url, "bill", ledger) == {"stopped_by": "finish", "answer": "Done."}
    assert ledger.read_text() == "paid 120\n"  # once: the in-doubt call was not run again


def test_a_damaged_waiting_state_is_left_out_of_the_listing_with_a_note(tmp_path: Path) -> None:
    url = str(tmp_path / "runs")
    child("start", url, "bill", tmp_path / "ledger")
    child("start", url, "broken", tmp_path / "ledger")
    log = tmp_path / "runs" / "broken" / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = b'{"seq": 1, "kind": "no####'
    log.write_bytes(b"\n".join(lines))
    listed = run_cli("approvals", "--store", url)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["bill"]
    assert listed.stderr.startswith("statekeep: note: State 'broken' left out")
    assert len(listed.stderr.splitlines()) == 1
