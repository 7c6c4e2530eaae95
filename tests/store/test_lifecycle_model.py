"""Hypothesis: for a random sequence of writes, a random filter and a random page size, the
pages of a listing, put end to end, are the filtered listing, and the filtered listing is
what a plain model of the rule (written here, apart from statekeep's own) selects."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statekeep import FileStore, MemoryStore, SQLiteStore, Store

IDS = ["a", "b", "c", "d", "e", "f"]
TIMES = [datetime(2026, 1, 1, hour, tzinfo=UTC) for hour in (1, 2, 3)]  # few: ties are common
LABELS = {"env": ["prod", "dev"], "user": ["u1", "u2"]}

label_sets = st.fixed_dictionaries({}, optional={key: st.sampled_from(vals) for key, vals in LABELS.items()})
writes = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(IDS),
            "at": st.sampled_from(TIMES),
            "agent": st.sampled_from([None, "planner", "coder"]),
            "parent": st.sampled_from([None, "a", "b"]),
            "labels": label_sets,
            "end": st.sampled_from([None, "finish", "limit"]),
        }
    ),
    max_size=14,
)
filters = st.fixed_dictionaries(
    {},
    optional={
        "agent": st.sampled_from(["planner", "coder"]),
        "parent": st.sampled_from(["a", "b"]),
        "labels": label_sets,
        "status": st.sampled_from(["finished", "running", "limit"]),
        "finished": st.booleans(),
        "stopped_by": st.sampled_from(["finish", "limit"]),
        "updated_after": st.sampled_from(TIMES),
        "updated_before": st.sampled_from(TIMES),
    },
)


def snapshot_of(write: dict[str, Any]) -> dict[str, Any]:
    at = write["at"].isoformat()
    return {
        "task": write["id"],
        "created_at": at,
        "updated_at": at,
        "turn": 0,
        "stopped_by": write["end"],
        "finished": write["end"] == "finish",
        "agent": write["agent"],
        "parent": write["parent"],
        "labels": write["labels"],
    }


def selected(model: dict[str, dict[str, Any]], wanted: dict[str, Any]) -> list[str]:
    """The ids the filters select from the model, in listing order: the rule, spelled out."""

    def status(w: dict[str, Any]) -> str:
        return "finished" if w["end"] == "finish" else (w["end"] or "running")

    def keep(w: dict[str, Any]) -> bool:
        checks = {
            "agent": lambda v: w["agent"] == v,
            "parent": lambda v: w["parent"] == v,
            "labels": lambda v: all(w["labels"].get(k) == x for k, x in v.items()),
            "status": lambda v: status(w) == v,
            "finished": lambda v: (w["end"] == "finish") == v,
            "stopped_by": lambda v: w["end"] == v,
            "updated_after": lambda v: w["at"] > v,
            "updated_before": lambda v: w["at"] < v,
        }
        return all(checks[name](value) for name, value in wanted.items())

    rows = sorted(model.values(), key=lambda w: (-w["at"].timestamp(), w["id"]))
    return [w["id"] for w in rows if keep(w)]


def paged(store: Store, wanted: dict[str, Any], size: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = store.list(**wanted, limit=size, after=after)
        assert 0 < len(page) <= size or (not seen and not page)
        seen += [row.id for row in page]
        after = page.next  # type: ignore[attr-defined]
        if after is None:
            return seen
        assert len(page) == size  # only a full page has a next


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sk-lifecycle-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


FACTORIES: dict[str, Callable[[Path], Store]] = {
    "memory": lambda path: MemoryStore(),
    "sqlite": lambda path: SQLiteStore(path / "store.db"),
    "file": lambda path: FileStore(path / "store"),
}
KINDS = ["memory", "file", "sqlite"]


@pytest.mark.parametrize("kind", KINDS)
def test_pages_end_to_end_are_the_filtered_listing(kind: str, scratch: Path) -> None:
    counter = iter(range(10**9))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(writes=writes, wanted=filters, size=st.integers(1, 5))
    @example(  # always tried: each listing field, a tie on updated_at, two pages
        writes=[
            {
                "id": "b",
                "at": TIMES[0],
                "agent": "coder",
                "parent": "a",
                "labels": {"env": "dev"},
                "end": None,
            },
            {
                "id": "a",
                "at": TIMES[0],
                "agent": "coder",
                "parent": "a",
                "labels": {"env": "dev"},
                "end": "limit",
            },
            {"id": "c", "at": TIMES[1], "agent": "planner", "parent": None, "labels": {}, "end": "finish"},
        ],
        wanted={"agent": "coder", "parent": "a", "labels": {"env": "dev"}},
        size=1,
    )
    def check(writes: list[dict[str, Any]], wanted: dict[str, Any], size: int) -> None:
        folder = scratch / f"{kind}-{next(counter)}"
        folder.mkdir()
        with FACTORIES[kind](folder) as store:
            model: dict[str, dict[str, Any]] = {}
            for write in writes:
                sid = write["id"]
                store.write(sid, [], snapshot_of(write), create=sid not in model)
                model[sid] = write
            expected = selected(model, wanted)
            assert [row.id for row in store.list(**wanted)] == expected
            assert paged(store, wanted, size) == expected
        shutil.rmtree(folder)

    check()
