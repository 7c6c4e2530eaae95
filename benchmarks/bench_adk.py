"""ADK sessions: the last 20 events of a long session, StatekeepSessionService beside ADK's own.

Run from the repository::

    .venv/bin/python benchmarks/bench_adk.py            # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_adk.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_adk.py --json out.json

Two sessions per service, one of ``short`` events and one of ``long`` events (each event a
~500 B user message, appended with ``append_event``), then ``get_session`` with
``GetSessionConfig(num_recent_events=20)`` on each, alternated, medians. Services:
``StatekeepSessionService`` on a ``FileStore`` and on a ``SQLiteStore``, and ADK's own
``DatabaseSessionService`` on SQLite (``sqlite+aiosqlite``). The ratio long / short is what
a session's length costs a read of its end: the adapter reads a range (target <= 1.5); ADK
2.13's service runs one query on its events index (ORDER BY timestamp DESC LIMIT 20), shown
beside it. The time to append each session's events is printed too.
"""

from __future__ import annotations

import asyncio
import functools
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from google.adk.events.event import Event  # noqa: E402
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig  # noqa: E402
from google.adk.sessions.database_session_service import DatabaseSessionService  # noqa: E402
from google.genai import types  # noqa: E402

import common  # noqa: E402
from common import POOL, Row, Scratch  # noqa: E402
from statekeep import FileStore, SQLiteStore, Store  # noqa: E402
from statekeep.adapters.adk import StatekeepSessionService  # noqa: E402

RECENT = GetSessionConfig(num_recent_events=20)


@dataclass(frozen=True)
class Config:
    states: int  # sessions per service (the banner's workload line)
    turns: int  # events of the long session
    short: int  # events of the short one
    reps: int  # reads timed, each way
    read_reps: int  # unused: the banner's
    size: int  # bytes of each event's text


FULL = Config(states=2, turns=5000, short=100, reps=41, read_reps=0, size=500)
QUICK = Config(states=2, turns=300, short=100, reps=5, read_reps=0, size=500)


async def fill(service: BaseSessionService, session_id: str, events: int, size: int) -> None:
    session = await service.create_session(app_name="bench", user_id="u", session_id=session_id)
    for i in range(events):
        start = (i * 7919) % (len(POOL) - size)
        text = POOL[start : start + size]
        event = Event(
            author="user",
            invocation_id=f"inv-{i // 4}",
            content=types.Content(role="user", parts=[types.Part(text=text)]),
        )
        await service.append_event(session, event)


async def read_times(service: Any, reps: int, cold: Any = None) -> tuple[list[float], list[float]]:
    """Seconds per get_session(last 20) of the long and of the short session, alternated.
    ``cold``: a function making the service anew for each read (it remembers nothing)."""
    long_times: list[float] = []
    short_times: list[float] = []
    for rep in range(reps + 2):
        order = [("long", long_times), ("short", short_times)]
        for name, out in order if rep % 2 == 0 else order[::-1]:
            reader = service if cold is None else cold()
            began = time.perf_counter()
            got = await reader.get_session(app_name="bench", user_id="u", session_id=name, config=RECENT)
            elapsed = time.perf_counter() - began
            assert got is not None and len(got.events) == 20
            if rep >= 2:  # two warm-up rounds
                out.append(elapsed)
    return long_times, short_times


async def measure(service: BaseSessionService, cfg: Config) -> tuple[list[float], list[float], float]:
    began = time.perf_counter()
    await fill(service, "short", cfg.short, cfg.size)
    await fill(service, "long", cfg.turns, cfg.size)
    filled = time.perf_counter() - began
    long_times, short_times = await read_times(service, cfg.reps)
    return long_times, short_times, filled


async def run_all(scratch: Scratch, cfg: Config) -> tuple[dict[str, list[float]], str]:
    samples: dict[str, list[float]] = {}
    took: list[str] = []
    stores: list[tuple[str, Store]] = [
        ("file", FileStore(scratch.new("file") / "store")),
        ("sqlite", SQLiteStore(scratch.new("sqlite") / "store.db")),
    ]
    for name, store in stores:
        try:
            long_t, short_t, filled = await measure(StatekeepSessionService(store), cfg)
            cold_long, cold_short = await read_times(
                None, cfg.reps, functools.partial(StatekeepSessionService, store)
            )
        finally:
            await store.aclose()
        samples[f"{name}-cold-long"] = [t * 1e6 for t in cold_long]
        samples[f"{name}-cold-short"] = [t * 1e6 for t in cold_short]
        samples[f"{name}-long"], samples[f"{name}-short"] = (
            [t * 1e6 for t in long_t],
            [t * 1e6 for t in short_t],
        )
        print(f"  {name}: filled in {filled:.1f} s", flush=True)
        took.append(f"{filled:.0f} s on the {name} store")
    adk = DatabaseSessionService(f"sqlite+aiosqlite:///{scratch.new('adk')}/sessions.db")
    try:
        long_t, short_t, filled = await measure(adk, cfg)
    finally:
        await adk.close()
    samples["adk-long"], samples["adk-short"] = [t * 1e6 for t in long_t], [t * 1e6 for t in short_t]
    print(f"  ADK DatabaseSessionService: filled in {filled:.1f} s", flush=True)
    took.append(f"{filled:.0f} s on ADK's service")
    return samples, ", ".join(took)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    cfg = QUICK if args.quick else FULL
    version = metadata.version("google-adk")
    scratch = Scratch()
    began = time.perf_counter()
    common.print_banner("ADK sessions: the last 20 events", args.quick,
                        f"python {platform.python_version()}, google-adk {version}", scratch, cfg)  # fmt: skip
    try:
        samples, fills = asyncio.run(run_all(scratch, cfg))
    finally:
        scratch.cleanup()
    med = common.Medians(samples)
    n, m = cfg.turns, cfg.short
    rows: list[Row] = []
    subjects = [
        ("file", "adapter, FileStore"),
        ("file-cold", "adapter, FileStore, new service each read"),
        ("sqlite", "adapter, SQLiteStore"),
        ("sqlite-cold", "adapter, SQLiteStore, new service each read"),
        ("adk", "ADK DatabaseSessionService, SQLite"),
    ]
    for number, (key, name) in enumerate(subjects, start=1):
        target = "" if key == "adk" else "<= 1.5"
        rows.append(med.row(f"({number}) {name}: last 20 of {m} events", f"{key}-short", "µs"))
        rows.append(
            med.ratio_row(
                f"({number}) {name}: of {n} vs {m}", f"{key}-long", "µs", f"{key}-short", f"{m}", target
            )
        )
    rows.append(med.ratio_row(f"(6) (3) vs ADK (5), last 20 of {n}", "sqlite-long", "µs", "adk-long", "ADK"))
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\nget_session(num_recent_events=20); medians of {cfg.reps} reads each way, alternated, after two\n"
        f"warm-up rounds; each event a ~{cfg.size} B user message. A service remembers where the\n"
        "sessions it saw end (one read for the newest events); a new one reads the snapshot first.\n"
        f"Took {elapsed:.1f} s; appending the events took {fills}."
    )
    if args.json:
        common.write_json(args.json, cfg, args.quick, {"python": platform.python_version()}, scratch,
                          {"peers": {"google-adk": version}}, elapsed, rows, samples)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
