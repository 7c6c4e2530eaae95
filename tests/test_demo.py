"""The main job runs and tells the story it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from statekeep import FileStore


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
