"""The core benchmark runs end to end (--quick) and prints its table; no timings are checked."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks" / "bench_core.py"


def test_bench_core_quick_runs_and_prints_its_table(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"

    lines = proc.stdout.splitlines()
    header = next((line for line in lines if line.startswith("measure ")), None)
    assert header is not None, proc.stdout
    assert [cell.strip() for cell in header.split("|")] == [
        "measure",
        "value",
        "spread",
        "baseline",
        "ratio",
        "target",
        "met",
    ]
    for number in range(1, 9):
        assert any(line.startswith(f"({number}) ") for line in lines), f"no row ({number}) in:\n{proc.stdout}"

    result = json.loads(out.read_bytes())
    assert result["quick"] is True
    assert len(result["rows"]) >= 8
    for row in result["rows"]:
        assert math.isfinite(row["value"]), row
        if row["target"]:
            assert row["met"] in (True, False), row
    # The scratch folder (on the repository's disk) is gone afterwards.
    assert not Path(result["scratch"]).exists()
