"""The cost of protection: redaction and encryption on the sequential write benchmark, as a
ratio against clear writes to the same kind of store, run side by side in this process.

Run from the repository::

    .venv/bin/python benchmarks/bench_protect.py            # the full run
    .venv/bin/python benchmarks/bench_protect.py --quick    # a small run, a smoke test only
    .venv/bin/python benchmarks/bench_protect.py --json out.json

The workload is bench_core's: 20 States x 50 turns; each turn adds 3 entries (text fields
of about 800 B, 200 B and 2 KB) and replaces the snapshot, in one durable sync ``write``,
States one after another. For each store (MemoryStore, FileStore, SQLiteStore) four
variants run in rotation, each in a fresh store: clear, ``redact=`` (the default key names,
two literal secrets and a provider-key pattern), ``encrypt=`` (AES-256-GCM, one Keyring),
and both. The report gives each variant's median turns/s and its ratio to clear writes to
the same kind of store (1.00 = no overhead; 0.80 = 20% fewer turns a second).
"""

from __future__ import annotations

import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import common
from bench_core import Turn, make_workload, store_sequential
from common import Scratch
from statekeep import FileStore, Keyring, MemoryStore, Redactor, SQLiteStore, Store


@dataclass(frozen=True)
class Config:
    states: int  # States written per run
    turns: int  # turns per State
    reps: int  # repetitions of each run (median reported)
    read_reps: int  # unused here; the banner prints it


FULL = Config(states=20, turns=50, reps=5, read_reps=0)
QUICK = Config(states=3, turns=6, reps=1, read_reps=0)

KEYRING = Keyring({"bench": Keyring.generate_key()}, current="bench")
REDACTOR = Redactor(
    values=["hunter2", "correct horse battery staple"], patterns=[re.compile(r"sk-[A-Za-z0-9]{20,}")]
)
VARIANTS: dict[str, dict[str, Any]] = {
    "clear": {},
    "redact": {"redact": REDACTOR},
    "encrypt": {"encrypt": KEYRING},
    "both": {"redact": REDACTOR, "encrypt": KEYRING},
}
LABELS = {"redact": "redact=", "encrypt": "encrypt=", "both": "redact= + encrypt="}


def open_store(kind: str, scratch: Scratch, protect: dict[str, Any]) -> Store:
    if kind == "memory":
        return MemoryStore(**protect)
    if kind == "file":
        return FileStore(scratch.new("file"), **protect)
    return SQLiteStore(scratch.new("sqlite") / "store.db", **protect)


def sequential(kind: str, scratch: Scratch, protect: dict[str, Any], work: list[list[Turn]]) -> float:
    """Turns/s of bench_core's sequential writes to a fresh store of ``kind``."""
    store = open_store(kind, scratch, protect)
    try:
        return store_sequential(store, work)
    finally:
        store.close()


STORES = {"memory": "MemoryStore", "file": "FileStore", "sqlite": "SQLiteStore"}


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    scratch = Scratch()
    began = time.perf_counter()
    import cryptography

    versions = f"python {platform.python_version()}, cryptography {cryptography.__version__}"
    common.print_banner("protection overhead benchmark", args.quick, versions, scratch, cfg)
    samples: dict[str, list[float]] = {}
    try:
        work = make_workload(cfg.states, cfg.turns)
        for kind in STORES:
            runs: list[tuple[str, Callable[[], float]]] = [
                (f"{kind}_{variant}", lambda k=kind, p=protect: sequential(k, scratch, p, work))  # type: ignore[misc]
                for variant, protect in VARIANTS.items()
            ]
            common.run_rotated(runs, cfg.reps, scratch, samples)
            print(f"  {STORES[kind]} done", flush=True)
    finally:
        scratch.cleanup()

    med = common.Medians(samples)
    rows = []
    for n, (kind, name) in enumerate(STORES.items(), 1):
        rows.append(med.row(f"({n}) {name}.write, clear", f"{kind}_clear", "turns/s"))
        for variant, label in LABELS.items():
            rows.append(
                med.ratio_row(
                    f"({n}) {name}.write, {label}",
                    f"{kind}_{variant}",
                    "turns/s",
                    f"{kind}_clear",
                    f"({n}) clear",
                )
            )
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\n{cfg.states * cfg.turns} turns per run, sequential sync writes. Ratios: protected / clear "
        "turns/s (1.00: no overhead).\n"
        "redact=: the default key names + 2 literal secrets + 1 pattern, applied to every entry and snapshot.\n"
        "encrypt=: each entry and the snapshot sealed apart (AES-256-GCM, a fresh nonce each).\n"
        f"Took {elapsed:.1f} s."
    )
    if args.json:
        versions_json = {"python": platform.python_version(), "cryptography": cryptography.__version__}
        common.write_json(args.json, cfg, args.quick, versions_json, scratch, {}, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
