"""StatekeepMemoryStore against LangGraph's own ``InMemoryStore``: Hypothesis makes sequences of
put, delete, get, search (filters with every operator, namespace prefixes, limit and offset,
semantic queries) and list_namespaces (prefix, suffix, wildcards, max_depth, limit, offset), in
batches too; both stores run each one, and what they return must agree, on every store, through
the sync and the async API.

Agreeing means: equal items (namespace, key, value; times are each store's own); equal
namespace listings (InMemoryStore's with the namespaces it keeps once they are empty taken out:
it lists a namespace a get touched, or whose items were all deleted, which no persistent store
does); a search returning as many items, each one InMemoryStore finds for it, with the same
score (float32 vectors: within 1e-5). The order of a search without a query is each store's
own (InMemoryStore: insertion; this one: the most recently changed first). Two more quirks of
InMemoryStore are kept clear of: it keeps an item's old vectors when the item is put again without
the indexed field (they are dropped from it after each batch), and it fails a batch whose puts
embed one text twice (no such batch is made).

CI runs a fixed number of derandomized examples; ``STATEKEEP_SOAK=1`` runs ten times more.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from statekeep import Store
from statekeep.adapters.langgraph import StatekeepMemoryStore
from tests.support.stores import STORE_FACTORIES

SOAK = 10 if os.environ.get("STATEKEEP_SOAK") == "1" else 1
EXAMPLES = {"memory": 100, "file": 60, "sqlite": 60, "postgres": 20, "redis": 20}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: how often each letter occurs (the tests need no model)."""
    return [[float(t.lower().count(c)) for c in LETTERS] for t in texts]


INDEX: Any = {"embed": embed, "dims": len(LETTERS), "fields": ["text"]}

# Namespaces that share prefixes, with escaped labels (':' ' ' 'ü') and long ones that make
# keys hashed (a long namespace, a long key); labels only the listings' conditions name.
LONG, WIDE = "L" * 45, "é" * 8
NAMESPACES = [("a",), ("a", "b"), ("b",), ("a", "user:1"), ("ü x", LONG), (WIDE, "a", "b"), (LONG, WIDE, "a")]
LABELS = ["a", "b", "user:1", "ü x", LONG, WIDE, "zz"]
KEYS = ["k", "k2", "", "a/b.c", "q" * 130, "r" * 130]
TEXTS = ["apple pie", "banana", "cherry tart", "apple", "zzz"]

namespaces = st.sampled_from(NAMESPACES)
prefixes = st.sampled_from(
    [(), (), ("a",), ("a", "b"), (LONG,), (LONG, WIDE), ("ü x",), (WIDE, "a"), ("zz",)]
)
values = st.fixed_dictionaries(
    {"n": st.integers(0, 4), "tag": st.sampled_from(["x", "y"])},
    optional={
        "text": st.sampled_from(TEXTS),
        "inner": st.fixed_dictionaries({"t": st.sampled_from(["x", "y"])}),
    },
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"tag": st.sampled_from(["x", "y"])}),
    st.fixed_dictionaries({"inner": st.fixed_dictionaries({"t": st.sampled_from(["x", "y"])})}),
    st.builds(
        lambda op, v: {"n": {op: v}},
        st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
        st.integers(0, 4),
    ),
    st.builds(
        lambda lo, hi: {"n": {"$gte": lo, "$lt": hi}, "tag": {"$ne": "y"}},
        st.integers(0, 4),
        st.integers(0, 4),
    ),
)
puts = st.builds(
    lambda ns, key, value, index: PutOp(ns, key, value, index=index),
    namespaces,
    st.sampled_from(KEYS),
    values,
    st.sampled_from([None, None, False, ["text"]]),
)
deletes = st.builds(lambda ns, key: PutOp(ns, key, None), namespaces, st.sampled_from(KEYS))
gets = st.builds(GetOp, namespaces, st.sampled_from(KEYS))
searches = st.builds(
    lambda prefix, filter, limit, offset, query: SearchOp(prefix, filter, limit, offset, query),
    prefixes,
    filters,
    st.integers(1, 6),
    st.integers(0, 3),
    st.sampled_from([None, None, "apple", "tart"]),
)
conditions = st.lists(
    st.builds(
        MatchCondition,
        st.sampled_from(["prefix", "suffix"]),
        st.lists(st.sampled_from([*LABELS, "*"]), min_size=1, max_size=2).map(tuple),
    ),
    max_size=2,
).map(tuple)
listings = st.builds(
    ListNamespacesOp,
    conditions,
    st.one_of(st.none(), st.integers(1, 3)),
    st.integers(1, 8),
    st.integers(0, 2),
)
single = st.one_of(puts, puts, puts, deletes, gets, searches, searches, listings)


def one_text_once(ops: list[Any]) -> bool:
    """InMemoryStore fails a batch whose puts embed one text twice (its embeddings and their
    places no longer pair up); this store embeds it once and stores it with both items."""
    texts = [op.value["text"] for op in ops if isinstance(op, PutOp) and op.value and "text" in op.value]
    return len(texts) == len(set(texts))


steps = st.lists(
    st.one_of(single.map(lambda op: [op]), st.lists(single, min_size=2, max_size=4).filter(one_text_once)),
    min_size=4,
    max_size=16,
)


class Both:
    """The oracle and the store under test, run through one API."""

    def __init__(self, oracle: InMemoryStore, mine: StatekeepMemoryStore, api: str) -> None:
        self.oracle, self.mine, self.api = oracle, mine, api

    def run(self, ops: list[Any]) -> tuple[list[Any], list[Any]]:
        # InMemoryStore keeps a namespace once touched (a get, a delete), even empty: not a
        # store's listing. Its listings are taken without those, before the batch (whose reads
        # all see the store as it was before the batch's puts).
        for name in [n for n, items in self.oracle._data.items() if not items]:
            del self.oracle._data[name]
        listed = {
            n: self.oracle.batch([op])[0] for n, op in enumerate(ops) if isinstance(op, ListNamespacesOp)
        }
        expected = self.oracle.batch(ops)
        expected = [listed.get(n, result) for n, result in enumerate(expected)]
        # InMemoryStore keeps an item's old vectors when it is put again without the indexed
        # field (or with index=False): stale ones, which this store does not keep.
        last = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
        for (name, key), op in last.items():
            if op.value is not None:
                fresh = op.index is not False and "text" in op.value
                vectors = self.oracle._vectors[name][key]
                for path in [p for p in vectors if not (fresh and p == "text")]:
                    del vectors[path]
        got = self.mine.batch(ops) if self.api == "sync" else asyncio.run(self.mine.abatch(ops))
        return expected, got


def item_of(item: Any) -> Any:
    return None if item is None else (tuple(item.namespace), item.key, item.value)


def check_search(both: Both, op: SearchOp, expected: list[Any], got: list[Any]) -> None:
    assert len(got) == len(expected), (op, expected, got)
    keys = [(tuple(i.namespace), i.key) for i in got]
    assert len(set(keys)) == len(keys), f"an item twice in {got}"
    everything = both.oracle.batch([op._replace(limit=10_000, offset=0)])[0]
    known = {(tuple(i.namespace), i.key): i for i in everything}
    for item in got:
        want = known.get((tuple(item.namespace), item.key))
        assert want is not None, f"{item} is not a match for {op}"
        assert item.value == want.value
        if want.score is None or item.score is None:
            assert item.score == want.score, (item, want)
        else:
            assert abs(item.score - want.score) < 1e-5, (item, want)
    scored = [i.score for i in got if i.score is not None]
    want_scored = [i.score for i in expected if i.score is not None]
    assert len(scored) == len(want_scored)
    assert all(abs(a - b) < 1e-5 for a, b in zip(scored, want_scored, strict=True)), (got, expected)


def final(store: Any) -> list[Any]:
    return sorted((item_of(i) for i in store.search((), limit=10_000)), key=repr)


def compare(both: Both, ops: list[Any]) -> None:
    expected, got = both.run(ops)
    for op, want, have in zip(ops, expected, got, strict=True):
        if isinstance(op, GetOp):
            assert item_of(have) == item_of(want), op
            if have is not None:
                assert have.revision >= 1 and have.created_at <= have.updated_at
        elif isinstance(op, SearchOp):
            check_search(both, op, want, have)
        elif isinstance(op, ListNamespacesOp):
            assert have == want, op
        else:
            assert have is None and want is None


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield request.param, s
    s.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_store_agrees_with_langgraphs_in_memory_store(store: tuple[str, Store], api: str) -> None:
    name, backing = store
    mine = StatekeepMemoryStore(backing, index=INDEX, scope="diff")

    @settings(
        max_examples=EXAMPLES[name] * SOAK,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(steps)
    def agree(batches: list[list[Any]]) -> None:
        oracle = InMemoryStore(index=INDEX)
        both = Both(oracle, mine, api)
        try:
            for ops in batches:
                compare(both, ops)
            # Every item ends equal.
            assert final(mine) == final(oracle)
        finally:  # the next example starts from an empty scope
            mine.batch([PutOp(i.namespace, i.key, None) for i in mine.search((), limit=10_000)])

    agree()
