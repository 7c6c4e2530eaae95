"""The main job runs and tells the story it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from statekeep import FileStore


def test_demo_kills_resumes_and_finishes(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "statekeep", "demo", "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "killed with SIGKILL" in out
    assert "finished the run" in out
    record = FileStore(tmp_path / "s").read("demo-run")
    assert record is not None and record.snapshot["finished"] is True
    assert [e["seq"] for e in record.entries] == list(range(len(record.entries)))
    assert record.entries[-1]["kind"] == "stop"
    turns = {e["turn"] for e in record.entries if "turn" in e}
    assert {1, 2, 3} <= turns  # the acknowledged turns survived the kill


def test_demo_can_run_twice_in_one_folder(tmp_path: Path) -> None:
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-m", "statekeep", "demo", "--store", str(tmp_path)],
            capture_output=True,
            timeout=120,
            check=True,
        )
    assert [r.id for r in FileStore(tmp_path).list()] == ["demo-run"]
