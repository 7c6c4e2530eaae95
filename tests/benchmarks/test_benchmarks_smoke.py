"""Each benchmark script runs end to end in its tiny mode (--quick) and prints its table; no
timing is checked. The only test that runs the benchmarks (and two of bench_budget's probes,
whose counts its table reports)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, servers

HEADER = ["measure", "value", "spread", "baseline", "ratio", "target", "met"]
# At least this many rows each.
ROWS = {
    "core": 8,
    "sqlite": 5,
    "servers": 10,
    "procs": 16,
    "ranges": 16,
    "protect": 12,
    "copy": 2,
    "viewer": 2,
    "budget": 20,
    "peers": 9,
    "growth": 6,
    "langgraph_growth": 7,
    "trim": 4,
    "adk": 11,
    "telemetry": 4,
    "langgraph_memory": 8,
    "failover": 8,
    "pgbouncer": 5,
    "redis_cluster": 4,
}


#: The benchmarks that start their own PostgreSQL (and Redis).
OWN_SERVERS = ("servers", "ranges", "copy", "langgraph_growth", "failover", "pgbouncer", "redis_cluster")


def run_bench(name: str, tmp_path: Path) -> tuple[list[str], dict]:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"bench_{name}.py"), "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    header = next((line for line in lines if line.startswith("measure ")), None)
    assert header is not None, proc.stdout
    assert [cell.strip() for cell in header.split("|")] == HEADER
    return lines, json.loads(out.read_bytes())


@pytest.mark.parametrize("name", sorted(ROWS))
def test_benchmark_quick_runs_and_prints_its_table(name: str, tmp_path: Path) -> None:
    if name in OWN_SERVERS:
        checks = (
            servers.postgres_bindir,
            servers.pgbouncer_binary if name == "pgbouncer" else servers.redis_binary,
        )
        for check in checks:
            try:
                check()
            except servers.ServerMissing as exc:
                servers.need(exc)
    lines, result = run_bench(name, tmp_path)
    assert len(result["rows"]) >= ROWS[name]
    for row in result["rows"]:
        assert math.isfinite(row["value"]), row
        if row.get("target") and name != "servers":  # quick server runs judge no target
            assert row["met"] in (True, False), row
    if name == "budget":  # the counts beside the times: OsIO calls, SQL statements
        measures = [row["measure"] for row in result["rows"]]
        assert any(m.startswith("OsIO calls per FileStore write") for m in measures), measures
        assert any(m.startswith("SQL statements per") for m in measures), measures
    if name == "peers":  # every peer beside statekeep, each pair with its ratio
        assert {"alpineagents", "openai-agents", "langgraph-checkpoint-sqlite"} <= set(result["peers"])
        assert sum(row["ratio"] is not None for row in result["rows"]) >= 4
    if name == "core":
        for number in range(1, 9):
            assert any(line.startswith(f"({number}) ") for line in lines), f"no row ({number}) in:\n{lines}"
    assert result["quick"] is True
    if name == "servers":
        assert len(result["rows"]) >= 10 and all(row["value"] > 0 for row in result["rows"])
    else:
        assert not Path(result["scratch"]).exists()  # the scratch folder is gone afterwards


def _probes() -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import budget_probes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return budget_probes


def test_budget_counts_the_innermost_osio_calls(tmp_path: Path) -> None:
    probes = _probes()
    recorder = probes.Recorder()
    io = probes.recording_io(recorder, sync=False)
    fd = io.open(str(tmp_path / "f"), os.O_WRONLY | os.O_CREAT)
    recorder.on = True
    io.write_all(fd, b"abc")  # loops over write: the write counts, not the loop
    io.fsync(fd)  # a no-op here, still a call through the seam
    recorder.on = False
    os.close(fd)
    assert dict(recorder.calls) == {"write": 1, "fsync": 1}
    assert (tmp_path / "f").read_bytes() == b"abc"


def test_budget_reads_strace_tables_with_an_empty_errors_column() -> None:
    table = (
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 73.01    0.046101          22      2029       154 futex\n"
        "  0.68    0.000428           1       260           write\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.063143           5     12345      1234 total\n"
    )
    assert dict(_probes().parse_strace(table)) == {"futex": 2029, "write": 260}
