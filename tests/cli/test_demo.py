"""The main job runs and tells the story it promises."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from statekeep import FileStore, SQLiteStore


def run_demo(folder: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "statekeep", "demo", "--store", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


def test_demo_kills_resumes_and_finishes(tmp_path: Path) -> None:
    out = run_demo(tmp_path / "s")
    assert "got SIGKILL" in out
    assert "outcome 'unknown' (added by load)" in out
    assert "answer: Booked" in out
    record = FileStore(tmp_path / "s").read("demo-booking")
    assert record is not None and record.snapshot["finished"] is True
    kinds = [e["kind"] for e in record.entries]
    assert [e["seq"] for e in record.entries] == list(range(len(kinds)))
    unknown = [e for e in record.entries if e["kind"] == "tool_result" and e["outcome"] == "unknown"]
    assert [e["name"] for e in unknown] == ["book_table"]
    assert kinds.count("run_start") == 2 and kinds[-1] == "stop"


def test_demo_can_run_twice_in_one_folder(tmp_path: Path) -> None:
    run_demo(tmp_path)
    run_demo(tmp_path)
    assert [r.id for r in FileStore(tmp_path).list()] == ["demo-booking"]


def test_demo_takes_a_store_url_and_suggests_a_command_that_works(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "demo", "--store", "sqlite:///demo.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("demo.db")) == []
    assert "answer: Booked" in proc.stdout
    [hint] = [line for line in proc.stdout.splitlines() if "statekeep show" in line]
    command = shlex.split(hint.split(": ", 1)[1])
    assert command[:4] == ["statekeep", "show", "demo-booking", "--store"]
    shown = subprocess.run(
        [sys.executable, "-m", "statekeep", *command[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert "State demo-booking: Book a table" in shown.stdout
    with SQLiteStore(tmp_path / "demo.db") as store:
        record = store.read("demo-booking")
    assert record is not None and record.snapshot["finished"] is True


def test_demo_refuses_a_memory_store() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "demo", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "not memory://" in proc.stderr and "Traceback" not in proc.stderr
