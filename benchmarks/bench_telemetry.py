"""The cost of telemetry: MemoryStore writes with telemetry on against ``telemetry=False``, run
side by side in this process.

Run from the repository::

    .venv/bin/python benchmarks/bench_telemetry.py            # the full run
    .venv/bin/python benchmarks/bench_telemetry.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_telemetry.py --json out.json

The workload is bench_core's sequential one (3 entries and a snapshot per durable sync
``write``, States one after another) on two MemoryStores written turn by turn in alternation
(each write timed alone; the median per write of each store, as turns/s), the store where statekeep's own cost is
the largest share of a write. First with the OpenTelemetry API imported and no SDK configured
(no provider set: the API's no-op default, what a program that only depends on a library
using OpenTelemetry gets): a store with telemetry on (the default) against one with
``telemetry=False``; the target is at most 2 % fewer turns a second. Then, with
the SDK's tracer and meter providers set (spans made and ended, nothing exported; metrics
aggregated, never read), the same pair again: what recording costs, for information.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import common
from bench_core import Turn, make_workload
from common import state_id
from statekeep import MemoryStore


@dataclass(frozen=True)
class Config:
    states: int  # States written per run
    turns: int  # turns per State
    reps: int  # repetitions of each run (median reported)
    read_reps: int  # unused here; the banner prints it


FULL = Config(states=20, turns=50, reps=9, read_reps=0)
QUICK = Config(states=3, turns=6, reps=1, read_reps=0)


def alternating(work: list[list[Turn]]) -> tuple[float, float]:
    """bench_core's sequential writes to two fresh MemoryStores, ``telemetry=False`` and on,
    turn by turn in alternation (who goes first alternates too), each write timed alone:
    the median µs per write of each, as turns/s. Side by side at this grain, a load that
    comes and goes on the machine meets both alike."""
    stores = {False: MemoryStore(telemetry=False), True: MemoryStore(telemetry=True)}
    took: dict[bool, list[float]] = {False: [], True: []}
    clock = time.perf_counter
    common.settle()
    try:
        n = 0
        for i, turns in enumerate(work):
            sid = state_id(i)
            for t, turn in enumerate(turns):
                n += 1
                for on in (False, True) if n % 2 else (True, False):
                    store = stores[on]
                    began = clock()
                    store.write(sid, turn.entries, turn.snapshot, create=t == 0)
                    took[on].append(clock() - began)
    finally:
        for store in stores.values():
            store.close()
    return 1 / statistics.median(took[False]), 1 / statistics.median(took[True])


def measure(prefix: str, work: list[list[Turn]], reps: int, samples: dict[str, list[float]]) -> None:
    for rep in range(reps):
        off, on = alternating(work)
        samples.setdefault(f"{prefix}_off", []).append(off)
        samples.setdefault(f"{prefix}_on", []).append(on)
        print(f"  {prefix}: rep {rep + 1}/{reps} done", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg, scratch, began = common.start("telemetry overhead benchmark", __doc__, argv, QUICK, FULL)
    import opentelemetry.metrics
    import opentelemetry.trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from statekeep._runtime import telemetry

    samples: dict[str, list[float]] = {}
    try:
        work = make_workload(cfg.states, cfg.turns)
        assert telemetry.active() is None  # imported, nothing configured: the no-op default
        measure("api", work, cfg.reps, samples)
        print("  no SDK done", flush=True)
        opentelemetry.trace.set_tracer_provider(TracerProvider())
        opentelemetry.metrics.set_meter_provider(MeterProvider())
        assert telemetry.active() is not None
        measure("sdk", work, cfg.reps, samples)
        print("  SDK done", flush=True)
    finally:
        scratch.cleanup()

    med = common.Medians(samples)
    rows = [
        med.row("(1) MemoryStore.write, telemetry=False", "api_off", "turns/s"),
        med.ratio_row(
            "(1) MemoryStore.write, telemetry on, no SDK",
            "api_on",
            "turns/s",
            "api_off",
            "(1) telemetry=False",
            ">= 0.98",
            overhead=True,
        ),
        med.row("(2) MemoryStore.write, SDK set, telemetry=False", "sdk_off", "turns/s"),
        med.ratio_row(
            "(2) MemoryStore.write, SDK set, recorded",
            "sdk_on",
            "turns/s",
            "sdk_off",
            "(2) telemetry=False",
            overhead=True,
        ),
    ]
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\n{cfg.states * cfg.turns} turns per run, sequential sync writes. Ratios: telemetry on / "
        "telemetry=False turns/s (1.00: no overhead); overhead: µs per write above the baseline.\n"
        "(1) the OpenTelemetry API imported, no provider set (its no-op default).\n"
        "(2) the SDK's TracerProvider (no exporter) and MeterProvider set: each write makes and ends a span\n"
        "    and records its metrics.\n"
        f"Took {elapsed:.1f} s."
    )
    import opentelemetry.version

    versions = {"python": platform.python_version(), "opentelemetry": opentelemetry.version.__version__}
    if args.json:
        common.write_json(args.json, cfg, args.quick, versions, scratch, {}, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
