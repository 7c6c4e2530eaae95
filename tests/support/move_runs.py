"""Runs to move between stores (export, import, copy): realistic States with labels, expiry
and lineage, some with histories longer than one copy chunk; and how to compare two stores."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from statekeep import State, Store


def make_runs(
    store: Store, count: int = 6, *, big: int = 0, big_size: int = 2500, prefix: str = "run"
) -> list[str]:
    """Save ``count`` States in ``store`` (ids ``{prefix}-{i:04d}``): a finished parent with a
    subagent child, a fork, labels, an explicit expiry; the first ``big`` have ``big_size``
    entries (several copy chunks). Returns their ids, the fork last."""
    ids: list[str] = []
    for i in range(count):
        state = State(
            f"task {i}: summarise the report", id=f"{prefix}-{i:04d}", labels={"team": "a" if i % 2 else "b"}
        )
        state.add_user(f"please do it, number {i}")
        state.request("gpt-x")
        state.add_reply("on it", tool_calls=[{"id": f"c{i}", "name": "search", "args": {"q": "ü" * (i % 5)}}])
        state.add_tool_result(f"c{i}", {"hits": list(range(i % 7))})
        for n in range(big_size if i < big else 0):
            state.set_data(f"k{n % 50}", {"n": n, "pad": "x" * 40})
        if i % 3 == 0:
            state.finish(f"answer {i}")
        if i % 4 == 1:
            state.keep_for(timedelta(days=30))
        store.save(state)
        ids.append(state.id)
        if i == 1:
            child = state.child("sub task", id=f"{prefix}-{i:04d}-child")
            child.add_user("go")
            store.save(child)
            ids.append(child.id)
    fork = store.fork(ids[0], at_seq=2, new_id=f"{prefix}-fork")
    ids.append(fork.id)
    return ids


def contents(store: Store, ids: list[str]) -> dict[str, Any]:
    """Every State of ``ids`` as ``store`` reads it: (entries, snapshot), None if absent."""
    out: dict[str, Any] = {}
    for sid in ids:
        record = store.read(sid)
        out[sid] = None if record is None else (record.entries, record.snapshot)
    return out


def cut_short_and_leased(src: Store, dst: Store, state_id: str, owner: str = "worker-1") -> None:
    """Leave in ``dst`` the first entry of ``src``'s State (a copy cut short), leased by ``owner``."""
    record = src.read(state_id)
    assert record is not None
    dst.write(state_id, record.entries[:1], None, create=True)
    dst.acquire(state_id, owner, 600)
