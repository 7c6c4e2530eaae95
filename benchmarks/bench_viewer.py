"""The viewer's cost while a runs page stays open and nothing changes: the server's CPU %.

Run from the repository::

    .venv/bin/python benchmarks/bench_viewer.py            # the full run (10,000 States)
    .venv/bin/python benchmarks/bench_viewer.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_viewer.py --json out.json

The workload: a FileStore of 10,000 States (one turn each, as common.make_snapshot), served
by statekeep's viewer (statekeep.web.start) in a process of its own, with one runs page's
live feed (``GET /events/runs``, what an open runs page keeps open) connected and nothing
written. After a warm-up (the feed's poll backs off to its slowest, and the store's change
stamp settles), the server process's CPU time (user + system, /proc) over ``window``
seconds, as % of one core. Side by side in the same run, the path before the change stamp:
the same server over a FileStore whose stamp always says "cannot tell", so that every poll
lists (a scan of every State). Target: under 2 % of a core with the stamp.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import common  # noqa: E402
from common import Scratch, make_entry, make_snapshot  # noqa: E402
from statekeep import FileStore  # noqa: E402
from statekeep.stores._fsio import OsIO  # noqa: E402


@dataclass(frozen=True)
class Config:
    states: int  # States in the store
    turns: int  # turns per State (3 entries each)
    reps: int  # windows measured per path (median reported)
    read_reps: int  # unused here; the banner prints it
    warmup: float  # seconds between the page opening and the first window
    window: float  # seconds of one window


FULL = Config(states=10_000, turns=1, reps=3, read_reps=0, warmup=20.0, window=30.0)
QUICK = Config(states=200, turns=1, reps=1, read_reps=0, warmup=3.0, window=2.0)

#: The server: statekeep.web.start over the FileStore at argv[1] ("every-poll": the path
#: before the change stamp), its URL on stdout, until stdin closes.
SERVER = textwrap.dedent(
    """
    import sys
    from statekeep import FileStore
    from statekeep.web import start

    class EveryPoll(FileStore):
        async def _change_stamp(self):
            return None  # cannot tell: the feed lists on every poll, as before the stamp

    kind = EveryPoll if sys.argv[2] == "every-poll" else FileStore
    with kind(sys.argv[1], read_only=True) as store, start(store) as viewer:
        print(viewer.url, flush=True)
        sys.stdin.read()
    """
)


class NoSync(OsIO):
    """Filling the store only: no fsync (the measure reads, it never writes)."""

    def fsync(self, fd: int) -> None:
        pass


def fill(path: Path, cfg: Config) -> None:
    with FileStore(path, io=NoSync()) as store:
        for i in range(cfg.states):
            entries = [make_entry(seq) for seq in range(cfg.turns * 3)]
            store.write(f"state-{i:05d}", entries, make_snapshot(i, cfg.turns - 1), create=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(path: Path, kind: str, cfg: Config) -> list[float]:
    """The server's CPU % of one core in each of ``cfg.reps`` windows, a runs page open."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(path), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        url = proc.stdout.readline().strip()
        if not url:
            raise SystemExit(f"the viewer did not start ({kind})")
        with httpx.Client(timeout=None) as http:
            assert http.get(url).status_code == 200  # the page, then its feed
            feed = f"{url}events/runs?since={quote(datetime.now(UTC).isoformat())}"
            with http.stream("GET", feed) as response:
                reader = threading.Thread(target=lambda: [None for _ in response.iter_lines()], daemon=True)
                reader.start()
                time.sleep(cfg.warmup)
                out = []
                for _ in range(cfg.reps):
                    cpu, wall = cpu_seconds(proc.pid), time.monotonic()
                    time.sleep(cfg.window)
                    out.append((cpu_seconds(proc.pid) - cpu) / (time.monotonic() - wall) * 100)
                return out
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def scan_seconds(path: Path) -> float:
    """CPU seconds of one listing of the whole store (what each poll cost before)."""
    with FileStore(path, read_only=True) as store:
        store.list(limit=1)  # warm
        start = time.process_time()
        store.list(limit=1)
        return time.process_time() - start


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    scratch = Scratch()
    began = time.perf_counter()
    common.print_banner("viewer benchmark", args.quick, f"python {platform.python_version()}", scratch, cfg)
    samples: dict[str, list[float]] = {}
    try:
        path = scratch.new("store")
        fill(path, cfg)
        print(f"  {cfg.states} States written", flush=True)
        samples["scan"] = [scan_seconds(path)]
        for kind in ("stamp", "every-poll"):
            samples[kind] = idle_cpu(path, kind, cfg)
            print(f"  {kind}: {', '.join(f'{v:.2f} %' for v in samples[kind])}", flush=True)
    finally:
        scratch.cleanup()
    med = common.Medians(samples)
    stamp, before = med["stamp"], med["every-poll"]
    rows = [
        common.Row(
            "(1) idle runs page: server CPU, change stamp",
            stamp,
            "% of a core",
            "listing per poll",
            before,
            stamp / before if before else None,  # a quick run may measure no tick at all
            "< 2 %",
            stamp < 2.0,
            common.spread(samples["stamp"]),
        ),
        med.row("(2) one listing of the store (what each poll cost before)", "scan", "s CPU"),
    ]
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\nA FileStore of {cfg.states} States, one runs page's feed open, nothing written; "
        f"{cfg.reps} windows of {cfg.window:.0f} s after {cfg.warmup:.0f} s. Ratio: CPU with the change "
        "stamp / CPU listing on every poll (the path before it), in the same run.\n"
        f"Took {elapsed:.1f} s."
    )
    common.write_json_if_asked(args, cfg, scratch, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
