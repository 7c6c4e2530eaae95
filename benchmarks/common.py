"""What the benchmark scripts share: the workload, scratch space on disk, timing, the rows
of the report and its table, and the JSON of a run.

The scripts import it as ``common`` (each is run as ``python benchmarks/bench_X.py``, so this
folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import random
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import orjson

from statekeep import SavedState, Store

REPO = Path(__file__).resolve().parent.parent
MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "overlay-tmpfs"}

# (kind, size of its text field in bytes): one turn writes one of each.
ENTRY_KINDS = (("message", 800), ("tool_call", 200), ("tool_result", 2048))
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)

T = TypeVar("T")
S = TypeVar("S", bound=Store)


# -- the workload ------------------------------------------------------------------------


def _text_pool(size: int = 1 << 16) -> str:
    rng = random.Random(20260101)
    letters = "abcdefghijklmnopqrstuvwxyz      ,.ABCDEFGHIJ0123456789"
    return "".join(rng.choices(letters, k=size))


POOL = _text_pool()


def make_entry(seq: int) -> dict[str, Any]:
    kind, size = ENTRY_KINDS[seq % len(ENTRY_KINDS)]
    start = (seq * 7919) % (len(POOL) - size)
    entry: dict[str, Any] = {"seq": seq, "kind": kind}
    if kind == "message":
        entry["role"] = "assistant"
    else:
        entry["call_id"] = f"call_{seq // len(ENTRY_KINDS)}"
        if kind == "tool_call":
            entry["name"] = "search"
    entry["text"] = POOL[start : start + size]
    return entry


def make_snapshot(state: int, turn: int) -> dict[str, Any]:
    return {
        "task": f"benchmark task {state}",
        "created_at": BASE_TIME.isoformat(),
        "updated_at": (BASE_TIME + timedelta(seconds=turn)).isoformat(),
        "turn": turn,
        "stopped_by": None,
        "finished": False,
    }


def make_workload(
    states: int, turns: int, make_turn: Callable[[list[dict[str, Any]], dict[str, Any]], T]
) -> list[list[T]]:
    """Per State, its turns: ``make_turn(entries, snapshot)`` of each (3 entries a turn)."""
    work = []
    per_turn = len(ENTRY_KINDS)
    for s in range(states):
        rows = []
        for t in range(turns):
            entries = [make_entry(t * per_turn + i) for i in range(per_turn)]
            rows.append(make_turn(entries, make_snapshot(s, t)))
        work.append(rows)
    return work


def state_id(i: int) -> str:
    return f"state-{i:04d}"


def fill_big_state(store: S, count: int) -> S:
    """Write one State, ``"big"``, of ``count`` entries to ``store``, 1,000 a write."""
    batch = 1_000
    for first in range(0, count, batch):
        entries = [make_entry(seq) for seq in range(first, min(first + batch, count))]
        store.write("big", entries, make_snapshot(0, first // 3), create=first == 0)
    return store


def fill_many_states(store: S, count: int) -> S:
    """Create ``count`` States of one entry each in ``store``, 64 at a time."""

    async def create(i: int, gate: asyncio.Semaphore) -> None:
        async with gate:
            await store.awrite(state_id(i), [make_entry(0)], make_snapshot(i, i % 97), create=True)

    async def main() -> None:
        gate = asyncio.Semaphore(64)
        await asyncio.gather(*(create(i, gate) for i in range(count)))

    asyncio.run(main())
    return store


# -- what the list baselines build ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedRow:
    """A listing row as a raw baseline builds it: SavedState's fields (times as aware UTC
    datetimes) in a plain frozen slotted dataclass, built with its ordinary constructor."""

    id: str
    task: str
    created_at: datetime
    updated_at: datetime
    turn: int
    stopped_by: str | None
    finished: bool
    agent: str | None = None
    parent: str | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    expires_at: datetime | None = None
    forked_from: dict[str, Any] | None = field(default=None, hash=False)


def newest_first(rows: list[ListedRow]) -> list[ListedRow]:
    """``rows`` in listing order: most recently updated first, ties by id."""
    rows.sort(key=lambda r: r.id)
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    return rows


def same_rows(listed: Sequence[SavedState], rows: Sequence[ListedRow]) -> bool:
    """Whether a store's listing and a baseline's rows hold the same fields and values, in
    the same order (a field added to SavedState must be added to ListedRow too)."""
    names = tuple(SavedState.__dataclass_fields__)
    if names != tuple(ListedRow.__dataclass_fields__):
        raise AssertionError(f"ListedRow's fields differ from SavedState's {names}")
    return len(listed) == len(rows) and all(
        tuple(getattr(s, name) for name in names) == astuple(r) for s, r in zip(listed, rows, strict=True)
    )


# -- scratch space on the real disk --------------------------------------------------------


def filesystem_type(path: Path) -> str:
    """The type of the file system ``path`` is on, from /proc/mounts ('unknown' if unsure)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


class Scratch:
    """A scratch folder on the repository's disk, removed whole by :meth:`cleanup`."""

    def __init__(self) -> None:
        tmp = Path(tempfile.gettempdir())
        self.made_parent: Path | None = None
        on_disk = filesystem_type(tmp) not in MEMORY_FILESYSTEMS
        if on_disk and os.stat(tmp).st_dev == os.stat(REPO).st_dev:
            self.root = Path(tempfile.mkdtemp(prefix="statekeep-bench-", dir=tmp))
        else:
            # Shared with benchmarks running beside this one (the smoke tests on several
            # workers): the last one out removes it, and one may do so just before we enter.
            self.made_parent = parent = REPO / ".bench-tmp"
            while True:
                parent.mkdir(exist_ok=True)
                try:
                    self.root = Path(tempfile.mkdtemp(prefix="statekeep-bench-", dir=parent))
                    break
                except FileNotFoundError:
                    continue
        self.fs = filesystem_type(self.root)
        if self.fs in MEMORY_FILESYSTEMS:
            raise SystemExit(f"scratch folder {self.root} is on {self.fs}, not a disk; refusing to measure")
        self._n = 0

    def new(self, name: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:03d}-{name}"
        path.mkdir()
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.made_parent is not None:
            try:
                self.made_parent.rmdir()
            except OSError:  # another benchmark's folder is still in it
                pass


def settle() -> None:
    """Start each timing from a quiet disk and a clean heap."""
    gc.collect()
    os.sync()


# -- timing ----------------------------------------------------------------------------------


def timed(fn: Callable[[], object], faults: list[float] | None = None) -> float:
    """Seconds one call of ``fn`` takes (after a collection, with the cache warm); the
    process's minor page faults during the call are appended to ``faults`` if given."""
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    if faults is not None:
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return elapsed


def run_rotated(
    runs: list[tuple[str, Callable[[], float]]],
    reps: int,
    scratch: Scratch,
    samples: dict[str, list[float]],
) -> None:
    """Each of ``runs`` once per repetition, the order rotated, each result appended to
    ``samples[name]``; the scratch folder is emptied after each repetition."""
    for rep in range(reps):
        shift = rep % len(runs)
        for name, run in runs[shift:] + runs[:shift]:
            samples.setdefault(name, []).append(run())
        for child in scratch.root.iterdir():  # keep the disk from filling up between reps
            shutil.rmtree(child)
        print(f"  turns: rep {rep + 1}/{reps} done", flush=True)


# -- the report -----------------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    value: float
    unit: str
    baseline_name: str = ""
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    spread: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # µs per write above the baseline's, in the same run (shown beside the ratio)
    overhead: float | None = None


def fmt(value: float, unit: str) -> str:
    if unit in ("turns/s", "writes/s"):
        return f"{value:,.0f} {unit}"
    return f"{value:,.3f} {unit}" if value < 10 else f"{value:,.1f} {unit}"


def spread(samples: Sequence[float]) -> str:
    if len(samples) < 2:
        return ""
    mid = statistics.median(samples)
    return f"±{(max(samples) - min(samples)) / 2 / mid * 100:.0f}%" if mid else ""


class Medians:
    """The median of each measure's samples, and rows that compare two of them."""

    def __init__(self, samples: dict[str, list[float]]) -> None:
        self.samples = samples
        self.med = {name: statistics.median(values) for name, values in samples.items()}

    def __getitem__(self, key: str) -> float:
        return self.med[key]

    def row(self, measure: str, key: str, unit: str) -> Row:
        """``key``'s median, with no baseline."""
        return Row(measure, self.med[key], unit, spread=spread(self.samples[key]))

    def ratio_row(
        self,
        measure: str,
        key: str,
        unit: str,
        base_key: str,
        base_name: str,
        target: str = "",
        *,
        overhead: bool = False,
    ) -> Row:
        """``key``'s median against ``base_key``'s; ``target`` is ``">= x"`` or ``"<= x"``.
        With ``overhead`` (a rate in writes or turns per second, one write at a time), also
        the µs per write above the baseline's."""
        value, base = self.med[key], self.med[base_key]
        r = value / base
        row = Row(
            measure, value, unit, base_name, base, r, target, meets(r, target), spread(self.samples[key])
        )
        if overhead:
            row.overhead = 1e6 / value - 1e6 / base
        return row

    def time_row(self, measure: str, key: str, base_key: str, base_name: str, target: str = "") -> Row:
        """``key``'s median time per write (µs) against ``base_key``'s: the ratio is the
        baseline's time / this one's (a speed ratio: >= 1 is faster), the overhead this one's
        µs above the baseline's."""
        value, base = self.med[key], self.med[base_key]
        ratio = base / value
        row = Row(measure, value, "µs", base_name, base, ratio, target, meets(ratio, target))
        row.spread, row.overhead = spread(self.samples[key]), value - base
        return row


def meets(value: float, target: str) -> bool | None:
    """Whether ``value`` meets ``target`` (``">= x"`` or ``"<= x"``; None without one)."""
    if not target:
        return None
    op, bound = target.split()[:2]
    return value >= float(bound) if op == ">=" else value <= float(bound)


def print_table(rows: list[Row]) -> None:
    headers = ("measure", "value", "spread", "baseline", "ratio", "target", "met")
    table = []
    for r in rows:
        base = "" if r.baseline is None else f"{r.baseline_name}: {fmt(r.baseline, r.unit)}"
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        if r.overhead is not None:
            ratio += f" ({r.overhead:+,.0f} µs)"
        met = "" if r.met is None else ("yes" if r.met else "NO")
        table.append((r.measure, fmt(r.value, r.unit), r.spread, base, ratio, r.target or "-", met or "-"))
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    right = {1, 2, 4}

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(headers))
    print("-+-".join("-" * w for w in widths))
    for row in table:
        print(line(row))


# -- running a script -------------------------------------------------------------------------


def parse_args(doc: str | None, argv: Sequence[str] | None) -> argparse.Namespace:
    """``--quick`` and ``--json PATH``, with the first line of ``doc`` as description."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (a smoke test, not a measurement)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    return parser.parse_args(argv)


def print_banner(title: str, quick: bool, versions: str, scratch: Scratch, cfg: Any) -> None:
    """The lines a run starts with: what runs where, and the workload."""
    workload = (
        cfg.describe()  # a workload of its own
        if hasattr(cfg, "describe")
        else f"{cfg.states} States x {cfg.turns} turns, 3 entries/turn "
        f"({'/'.join(str(s) for _, s in ENTRY_KINDS)} B text) + snapshot, 1 durable write/turn; "
        f"median of {cfg.reps} reps (load/list: {cfg.read_reps})"
    )
    print(
        f"statekeep {title}{' (--quick: numbers are not meaningful)' if quick else ''}\n"
        f"{versions} on {platform.platform()}, {os.cpu_count()} CPUs\n"
        f"scratch: {scratch.root} ({scratch.fs})\n"
        f"workload: {workload}\n",
        flush=True,
    )


def write_json(
    path: str,
    cfg: Any,
    quick: bool,
    versions: dict[str, str],
    scratch: Scratch,
    extra: dict[str, Any],
    elapsed: float,
    rows: list[Row],
    samples: dict[str, list[float]],
) -> None:
    """The run's results as JSON: ``versions`` (python, ...) after ``quick``, ``extra``
    before ``seconds``."""
    result = {
        "config": asdict(cfg),
        "quick": quick,
        **versions,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "scratch": str(scratch.root),
        "filesystem": scratch.fs,
        **extra,
        "seconds": elapsed,
        "rows": [asdict(r) for r in rows],
        "samples": samples,
    }
    Path(path).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


def write_json_if_asked(
    args: argparse.Namespace,
    cfg: Any,
    scratch: Scratch,
    elapsed: float,
    rows: list[Row],
    samples: dict[str, list[float]],
    extra: dict[str, Any] | None = None,
) -> None:
    """:func:`write_json` to ``args.json`` when the run was given ``--json`` (with this
    Python's version), else nothing."""
    if args.json:
        versions = {"python": platform.python_version()}
        write_json(args.json, cfg, args.quick, versions, scratch, extra or {}, elapsed, rows, samples)


def start(
    title: str, doc: str | None, argv: Sequence[str] | None, quick: T, full: T
) -> tuple[argparse.Namespace, T, Scratch, float]:
    """A run's start: its arguments, its config (``quick`` under ``--quick``, else
    ``full``), a fresh scratch folder and the clock's reading, once the banner is printed."""
    args = parse_args(doc, argv)
    cfg = quick if args.quick else full
    scratch = Scratch()
    began = time.perf_counter()
    print_banner(title, args.quick, f"python {platform.python_version()}", scratch, cfg)
    return args, cfg, scratch, began
