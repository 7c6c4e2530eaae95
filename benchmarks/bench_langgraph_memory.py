"""``python benchmarks/bench_langgraph_memory.py [--quick]``: semantic search in
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

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

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


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 items, fewer runs")
    args = parser.parse_args(argv)
    sizes, runs = ((200, 1000), 3) if args.quick else ((1000, 10_000), 5)
    model = Model()
    index: Any = {"embed": model, "dims": DIMS, "fields": ["text"]}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            items = texts(size)
            model([*items, "lentil soup", "jazz in paris"])  # made before any timing
            baseline = InMemoryStore(index=index)
            fill(baseline, items)
            backings: list[tuple[str, Store]] = [
                ("MemoryStore", MemoryStore()),
                ("SQLiteStore", SQLiteStore(Path(tmp) / f"s{size}.db")),
            ]
            for name, backing in backings:
                mine = StatekeepMemoryStore(backing, index=index)
                fill(mine, items)
                for what, call in (
                    ("query, limit 10", lambda s: s.search(("user",), query="lentil soup", limit=10)),
                    ("filter n=3, limit 10", lambda s: s.search(("user",), filter={"n": 3}, limit=10)),
                ):
                    base_ms = median_ms(lambda c=call, b=baseline: c(b), runs)  # type: ignore[misc]
                    ours_ms = median_ms(lambda c=call, m=mine: c(m), runs)  # type: ignore[misc]
                    rows.append((size, name, what, ours_ms, base_ms))
                backing.close()
    print(f"\nStatekeepMemoryStore search vs InMemoryStore (same process, {DIMS} dims, median of {runs})")
    print(
        f"{'items':>7}  {'store':<12} {'search':<22} {'statekeep ms':>13} {'InMemoryStore ms':>17} {'ratio':>7}"
    )
    for size, name, what, ours, base in rows:
        print(f"{size:>7}  {name:<12} {what:<22} {ours:>13.1f} {base:>17.1f} {ours / base:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
