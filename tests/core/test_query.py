"""The pure parts of listing queries, labels and lineage: checked arguments, cursors, pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from statekeep import Page, SavedState, State
from statekeep._core.labels import check_labels, expired_at, validate_namespace
from statekeep._core.query import decode_cursor, encode_cursor, make_query, select
from statekeep._run.lineage import tree_order

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(sid: str, minutes: int, **extra: object) -> SavedState:
    at = T0 + timedelta(minutes=minutes)
    return SavedState(sid, "t", at, at, 0, None, False, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"after": "not-a-cursor"}, "after"),
        ({"after": 5}, "after"),
        ({"agent": ""}, "agent"),
        ({"agent": 3}, "agent"),
        ({"parent": "a b"}, "parent"),
        ({"finished": "yes"}, "finished"),
        ({"stopped_by": None, "status": 1}, "status"),
        ({"labels": {"bad key": "v"}}, "labels"),
        ({"labels": ["k=v"]}, "labels"),
        ({"updated_after": datetime(2026, 1, 1)}, "updated_after"),
        ({"updated_before": "yesterday"}, "updated_before"),
        ({"id_prefix": "a/"}, "id_prefix"),
    ],
)
def test_a_bad_filter_is_a_value_error_naming_the_argument(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        make_query(**kwargs)


def test_a_cursor_round_trips_and_pages_follow_the_listing_order() -> None:
    rows = [row("b", 5), row("a", 5), row("c", 4), row("d", 9)]
    rows.sort(key=lambda r: r.id)
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    assert [r.id for r in rows] == ["d", "a", "b", "c"]
    assert decode_cursor(encode_cursor(rows[1])) == (rows[1].updated_at, "a")
    walked, after = [], None
    while True:
        page = select(rows, make_query(limit=1, after=after))
        assert isinstance(page, Page)
        walked += [r.id for r in page]
        after = page.next
        if after is None:
            break
    assert walked == ["d", "a", "b", "c"]
    assert select(rows, make_query(limit=4)).next is None  # no empty last page


def test_filters_combine_with_and() -> None:
    rows = [
        row("a", 3, agent="x", labels={"env": "prod", "user": "u1"}),
        row("b", 2, agent="x", labels={"env": "dev"}),
        row("c", 1, agent="y", labels={"env": "prod"}, parent="a"),
    ]
    pick = lambda **kw: [r.id for r in select(rows, make_query(**kw))]  # noqa: E731
    assert pick(agent="x") == ["a", "b"]
    assert pick(labels={"env": "prod"}) == ["a", "c"]
    assert pick(agent="x", labels={"env": "prod"}) == ["a"]
    assert pick(labels={"env": "prod", "user": "u1"}) == ["a"]
    assert pick(parent="a") == ["c"]
    assert pick(updated_after=T0 + timedelta(minutes=1)) == ["a", "b"]  # exclusive
    assert pick(updated_before=T0 + timedelta(minutes=3), status="running") == ["b", "c"]
    assert pick(id_prefix="b") == ["b"]


def test_labels_and_namespaces_are_checked() -> None:
    assert check_labels({"user": "u42", "team/x.y": ""}) == {"user": "u42", "team/x.y": ""}
    for bad in ({"": "v"}, {"-k": "v"}, {"k": 1}, {"k": "v" * 257}, {"k": "a\x00"}):
        with pytest.raises(ValueError, match="label"):
            check_labels(bad)
    assert validate_namespace("team-a") == "team-a"
    for bad_ns in ("", "A", ".x", "a.b", "x" * 64):
        with pytest.raises(ValueError, match="namespace"):
            validate_namespace(bad_ns)
    assert validate_namespace("a.memory.b", internal=True) == "a.memory.b"


def test_expiry_compares_aware_times() -> None:
    at = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # = T0
    assert expired_at({"expires_at": at.isoformat()}, T0)
    assert not expired_at({"expires_at": at.isoformat()}, T0 - timedelta(microseconds=1))
    assert not expired_at({"expires_at": None}, T0)
    assert not expired_at(None, T0)


def test_a_tree_is_deleted_deepest_first() -> None:
    parents: dict[str, str | None] = {"r": None, "a": "r", "b": "r", "a1": "a", "a11": "a1"}
    assert tree_order("r", parents) == ["a11", "a1", "a", "b", "r"]


def test_state_labels_expiry_and_lineage_reach_the_snapshot() -> None:
    parent = State("plan", id="p", labels={"user": "u1"})
    child = parent.child("look up", id="c", call_id="call-1", labels={"user": "u1"})
    assert child.parent == "p" and child.call_id == "call-1"
    assert child.history[0]["parent"] == "p" and child.history[0]["call_id"] == "call-1"
    child.keep_for(timedelta(hours=1))
    snap = child.snapshot()
    assert snap["parent"] == "p" and snap["labels"] == {"user": "u1"}
    assert datetime.fromisoformat(snap["expires_at"]) > datetime.now(UTC)
    child.expire_at(None)
    assert child.snapshot()["expires_at"] is None
    with pytest.raises(ValueError, match="aware"):
        child.expire_at(datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="call_id"):
        State("x", call_id="c")


def test_a_save_keeps_the_labels_dict_you_hold() -> None:
    from statekeep import MemoryStore

    store = MemoryStore()
    state = State("t", id="s", labels={"env": "prod"})
    held = state.labels
    store.save(state)
    held["team"] = "x"  # edits of the dict you hold reach the next save
    store.save(state)
    assert state.labels is held
    assert store.list()[0].labels == {"env": "prod", "team": "x"}
    loaded = store.load("s")
    mine = loaded.labels
    mine["more"] = "y"
    store.save(loaded)
    assert store.list()[0].labels == {"env": "prod", "team": "x", "more": "y"}
