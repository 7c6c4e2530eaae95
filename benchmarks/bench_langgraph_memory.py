"""``python benchmarks/bench_langgraph_memory.py [--quick] [--json out.json]``: semantic search in
``StatekeepMemoryStore`` by namespace size, against LangGraph's ``InMemoryStore`` run side by
side in the same process on the same items and queries.

Each size (1,000 and 10,000 items, one namespace; ``--quick``: 200 and 1,000) is filled with
items of one text field embedded by a fixed pseudo-random 256-dimension model (no model
call is timed: the embeddings are made once and served from a dict). Then each store answers
the same queries (``search(ns, query=..., limit=10)``) and a filtered search without a query;
the table gives the median time per search and the ratio to ``InMemoryStore``'s. The search
is brute force (every item's vector scored by cosine in Python, no NumPy), which is what the
docs' "fine up to about 10k items in a namespace" rests on.
"""

from __future__ import annotations

import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

import common
from statekeep import MemoryStore, SQLiteStore, Store
from statekeep.adapters.langgraph import StatekeepMemoryStore

DIMS = 256
WORDS = ["soup", "lentil", "train", "paris", "jazz", "tea", "cats", "rain", "bike", "chess", "figs", "opera"]


class Model:
    """Fixed pseudo-random vectors per text, computed once (so no search times a model)."""

    def __init__(self) -> None:
        self.known: dict[str, list[float]] = {}

    def __call__(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            if text not in self.known:
                rng = random.Random(text)
                self.known[text] = [rng.uniform(-1, 1) for _ in range(DIMS)]
            out.append(self.known[text])
        return out


def texts(count: int) -> list[str]:
    rng = random.Random(20261202)
    return [" ".join(rng.choices(WORDS, k=4)) + f" #{n}" for n in range(count)]


def fill(store: Any, items: list[str]) -> None:
    for at in range(0, len(items), 500):
        part = items[at : at + 500]
        store.batch(
            [
                PutOp(("user", "memories"), f"m{at + n}", {"text": t, "n": (at + n) % 10})
                for n, t in enumerate(part)
            ]
        )


def timed_ms(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]  # items in the one namespace
    runs: int  # searches timed per measure (median reported)

    def describe(self) -> str:
        sizes = " and ".join(f"{n:,}" for n in self.sizes)
        return f"{sizes} items in one namespace, {DIMS}-dim vectors; median of {self.runs} searches"


QUICK = Config(sizes=(200, 1000), runs=3)
FULL = Config(sizes=(1000, 10_000), runs=5)
SEARCHES: list[tuple[str, Callable[[Any], object]]] = [
    ("query, limit 10", lambda s: s.search(("user",), query="lentil soup", limit=10)),
    ("filter n=3, limit 10", lambda s: s.search(("user",), filter={"n": 3}, limit=10)),
]


def main(argv: list[str] | None = None) -> int:
    args, cfg, scratch, began = common.start("LangGraph memory store search", __doc__, argv, QUICK, FULL)
    model = Model()
    index: Any = {"embed": model, "dims": DIMS, "fields": ["text"]}
    samples: dict[str, list[float]] = {}
    measures: list[tuple[str, str, str]] = []  # (measure, key, baseline key)
    try:
        for size in cfg.sizes:
            items = texts(size)
            model([*items, "lentil soup", "jazz in paris"])  # made before any timing
            baseline = InMemoryStore(index=index)
            fill(baseline, items)
            backings: list[tuple[str, Store]] = [
                ("MemoryStore", MemoryStore()),
                ("SQLiteStore", SQLiteStore(scratch.root / f"s{size}.db")),
            ]
            for name, backing in backings:
                mine = StatekeepMemoryStore(backing, index=index)
                fill(mine, items)
                for what, call in SEARCHES:
                    key, base_key = f"{size}/{name}/{what}", f"{size}/base/{name}/{what}"
                    samples[base_key] = timed_ms(lambda c=call, b=baseline: c(b), cfg.runs)  # type: ignore[misc]
                    samples[key] = timed_ms(lambda c=call, m=mine: c(m), cfg.runs)  # type: ignore[misc]
                    measures.append((f"{size:,} items, {name}, {what}", key, base_key))
                backing.close()
            print(f"  {size:,} items done", flush=True)
    finally:
        scratch.cleanup()
    med = common.Medians(samples)
    rows = [med.ratio_row(m, key, "ms", base, "InMemoryStore") for m, key, base in measures]
    common.print_table(rows)
    elapsed = time.perf_counter() - began
    print(
        f"\nms per search (median of {cfg.runs}), {DIMS} dims, one namespace; ratio: statekeep's time /"
        " InMemoryStore's on the same items and query (1.0: as fast; above: slower).\n"
        f"Took {elapsed:.1f} s."
    )
    import langgraph.version

    versions = {"python": platform.python_version(), "langgraph": langgraph.version.__version__}
    if args.json:
        common.write_json(args.json, cfg, args.quick, versions, scratch, {}, elapsed, rows, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
