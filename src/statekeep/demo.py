"""The demo: a run saved as it goes, killed with SIGKILL mid-write, read back and continued."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from .filestore import FileStore

STATE_ID = "demo-run"

_CHILD = """
import sys
from statekeep.demo import child_run
child_run(sys.argv[1])
"""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _snapshot(turn: int, created: str, finished: bool = False) -> dict[str, object]:
    return {
        "task": "Summarise the quarterly report",
        "created_at": created,
        "updated_at": _now(),
        "turn": turn,
        "stopped_by": "finish" if finished else None,
        "finished": finished,
    }


def _turn(seq: int, turn: int, big: bool = False) -> list[dict[str, object]]:
    text = f"reading page {turn}... " * (400_000 if big else 20)
    return [
        {"seq": seq, "kind": "model_request", "at": _now(), "turn": turn},
        {"seq": seq + 1, "kind": "model_reply", "at": _now(), "text": text[:2000], "turn": turn},
        {"seq": seq + 2, "kind": "tool_result", "at": _now(), "output": text, "turn": turn},
    ]


def child_run(path: str) -> None:
    """The doomed process: saves turns, says which are durable, then starts a huge write."""
    store = FileStore(path)
    created = _now()
    store.write(STATE_ID, [{"seq": 0, "kind": "task", "at": created}], _snapshot(0, created), create=True)
    seq = 1
    for turn in range(1, 4):
        store.write(STATE_ID, _turn(seq, turn), _snapshot(turn, created))
        seq += 3
        print(f"saved turn {turn} (entries up to seq {seq - 1})", flush=True)
    print("writing turn 4 (a 10 MB tool result)...", flush=True)
    store.write(STATE_ID, _turn(seq, 4, big=True), _snapshot(4, created))
    print("turn 4 saved", flush=True)


def run(path: str | os.PathLike[str] = ".statekeep") -> int:
    """Run the demo in ``path``; returns the exit status for the command line."""
    root = Path(path)
    store = FileStore(root)
    store.delete(STATE_ID)
    print(f"statekeep demo: a run saved in {store.path}\n")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(root)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        print(f"  [agent {child.pid}] {line.rstrip()}")
        if line.startswith("writing turn 4"):
            os.kill(child.pid, signal.SIGKILL)  # mid-write: the worst moment
            break
    child.wait()
    print(f"  [agent {child.pid}] killed with SIGKILL\n")

    record = store.read(STATE_ID)
    assert record is not None and record.snapshot is not None
    turns = sorted({e["turn"] for e in record.entries if "turn" in e})
    print(
        f"read back: {len(record.entries)} entries, turns {turns}, snapshot at turn {record.snapshot['turn']}"
    )
    print("  every acknowledged turn is there; the interrupted write is either whole or absent\n")

    seq = len(record.entries)
    created = record.snapshot["created_at"]
    store.write(
        STATE_ID,
        [{"seq": seq, "kind": "stop", "at": _now(), "by": "finish", "answer": "Revenue grew 12%."}],
        _snapshot(record.snapshot["turn"], created, finished=True),
    )
    print("continued in this process and finished the run.\n")
    print(f"{'id':<12} {'turn':>4}  {'finished':<8} task")
    for row in store.list():
        print(f"{row.id:<12} {row.turn:>4}  {row.finished!s:<8} {row.task}")
    return 0
