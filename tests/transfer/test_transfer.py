"""Putting States from one store into another (statekeep._transfer.transfer): created whole, a prefix
extended, identical ones skipped, different ones refused and left as they were."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, Keyring, MemoryStore, SQLiteStore, State, Store
from statekeep._core.records import Record
from statekeep._transfer.exporting import aexport, aimport
from statekeep._transfer.transfer import (
    CHUNK,
    CopyConflictError,
    CopyVerifyError,
    RenameError,
    acopy,
    aput_state,
)
from tests.support.move_runs import contents, make_runs
from tests.support.stores import servers

KEYS = Keyring({"k1": base64.b64decode(base64.b64encode(b"k" * 32))}, current="k1")


def copy(src: Store, dst: Store, **options: Any) -> Any:
    return asyncio.run(acopy(src, dst, **options))


PAIRS = {
    "file-sqlite": (lambda p: FileStore(p / "src"), lambda p: SQLiteStore(p / "dst.db")),
    "sqlite-postgres": (lambda p: SQLiteStore(p / "src.db"), lambda p: servers().postgres_store()),
    "file-redis": (lambda p: FileStore(p / "src"), lambda p: servers().redis_store()),
    "memory-memory": (lambda p: MemoryStore(), lambda p: MemoryStore()),
}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_copy_keeps_every_state_whole_and_a_second_copy_skips_them(pair: str, tmp_path: Path) -> None:
    make_src, make_dst = PAIRS[pair]
    with make_src(tmp_path) as src, make_dst(tmp_path) as dst:
        ids = make_runs(src, 8, big=2)
        report = copy(src, dst)
        assert (report.copied, report.extended, report.same, report.failed) == (len(ids), 0, 0, {})
        assert contents(dst, ids) == contents(src, ids)
        child = dst.load("run-0001-child")
        assert child.parent == "run-0001"
        assert dst.load("run-fork").forked_from == {"id": "run-0000", "seq": 2}
        assert dst.load("run-0001").expires_at == src.load("run-0001").expires_at is not None
        assert {r.id: r.labels for r in dst.list()} == {r.id: r.labels for r in src.list()}
        again = copy(src, dst)
        assert (again.copied, again.extended, again.same) == (0, 0, len(ids))


def test_copy_by_ids_and_filters_and_missing_ids(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as src, MemoryStore() as dst:
        ids = make_runs(src, 6)
        report = copy(src, dst, filters={"labels": {"team": "a"}})
        assert sorted(r.id for r in dst.list()) == sorted(r.id for r in src.list(labels={"team": "a"}))
        assert report.copied == len(dst.list())
        picked = copy(src, dst, ids=[ids[0], "no-such-run"], concurrency=1)  # one at a time, as under trio
        assert (picked.copied, picked.missing) == (1, ["no-such-run"])


def test_a_prefix_left_by_an_interrupted_copy_is_extended(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as src, SQLiteStore(tmp_path / "dst.db") as dst:
        [big, *_] = make_runs(src, 2, big=1)
        record = src.read(big)
        assert record is not None and len(record.entries) > 2 * CHUNK
        dst.write(big, record.entries[:CHUNK], None, create=True)  # the first chunk only
        assert dst.list() == []  # no snapshot yet: not listed
        assert asyncio.run(aput_state(dst, big, record)) == "extended"
        assert contents(dst, [big]) == contents(src, [big])
        assert asyncio.run(aput_state(dst, big, record)) == "same"


def test_a_full_history_under_an_older_snapshot_is_finished(tmp_path: Path) -> None:
    with MemoryStore() as src, MemoryStore() as dst:
        [sid, *_] = make_runs(src, 1)
        record = src.read(sid)
        assert record is not None and record.snapshot is not None
        older = {**record.snapshot, "seq": 1}
        dst.write(sid, record.entries[:2], older, create=True)
        dst.write(sid, record.entries[2:], None)  # entries stored, then killed before the snapshot
        assert asyncio.run(aput_state(dst, sid, record)) == "extended"
        assert contents(dst, [sid]) == contents(src, [sid])


def _conflicting(dst: Store, sid: str, record: Record) -> None:
    """Refused naming the State, and the destination's State left as it was."""
    before = contents(dst, [sid])
    with pytest.raises(CopyConflictError, match=sid) as caught:
        asyncio.run(aput_state(dst, sid, record))
    assert "nothing of it was changed" in str(caught.value)  # how to resolve it: the CLI says
    assert contents(dst, [sid]) == before


@pytest.mark.parametrize(
    "kind", ["entry", "longer", "snapshot-without-source-snapshot", "prefix-with-snapshot-source-none"]
)
def test_a_different_state_in_the_destination_is_refused_and_left_unchanged(
    kind: str, tmp_path: Path
) -> None:
    with MemoryStore() as src, FileStore(tmp_path / "dst") as dst:
        [sid, *_] = make_runs(src, 1)
        record = src.read(sid)
        assert record is not None and record.snapshot is not None
        if kind == "entry":
            dst.write(sid, [record.entries[0], {**record.entries[1], "text": "other"}], None, create=True)
        elif kind == "longer":
            extra = {**record.entries[-1], "seq": len(record.entries)}
            dst.write(sid, [*record.entries, extra], record.snapshot, create=True)
        elif kind == "snapshot-without-source-snapshot":
            dst.write(sid, record.entries, record.snapshot, create=True)
            record = Record(record.entries, None)
        else:
            dst.write(sid, record.entries[:2], {**record.snapshot, "seq": 1}, create=True)
            record = Record(record.entries, None)
        _conflicting(dst, sid, record)


def test_the_source_snapshot_wins_when_histories_agree_on_both_paths(tmp_path: Path) -> None:
    """One rule: a resync. A metadata-only change in the source (same history) and a change
    made in the destination's snapshot alone (then the source extends the history) both end
    with the source's snapshot; histories that differ stay refused."""
    with FileStore(tmp_path / "src") as src, SQLiteStore(tmp_path / "dst.db") as dst:
        ids = make_runs(src, 3)
        copy(src, dst)
        labelled = src.load(ids[0])
        labelled.labels["reviewed"] = "yes"
        src.save(labelled)  # labels only: no new entry
        report = copy(src, dst)
        assert (report.updated, report.failed, report.same) == (1, {}, len(ids) - 1)
        assert dst.load(ids[0]).labels == {"team": "b", "reviewed": "yes"}
        theirs = dst.load(ids[1])
        theirs.labels["owner"] = "dest-team"
        dst.save(theirs)  # changed in the destination only
        grown = src.load(ids[1])
        grown.add_user("one more")
        src.save(grown)
        assert copy(src, dst).extended == 1
        assert contents(dst, [ids[0], ids[1]]) == contents(src, [ids[0], ids[1]])
        assert "owner" not in dst.load(ids[1]).labels
        assert copy(src, dst).same == len(ids)


def test_a_conflict_is_counted_and_the_other_states_are_copied(tmp_path: Path) -> None:
    with MemoryStore() as src, MemoryStore() as dst:
        ids = make_runs(src, 4)
        dst.write(
            ids[0],
            [{"seq": 0, "kind": "task", "text": "mine", "at": "2026-01-01T00:00:00+00:00"}],
            None,
            create=True,
        )
        report = copy(src, dst)
        assert list(report.failed) == [ids[0]] and report.copied == len(ids) - 1
        assert dst.read(ids[0]).entries[0]["text"] == "mine"  # type: ignore[union-attr]


def test_a_create_race_with_another_copier_compares_with_what_it_wrote(tmp_path: Path) -> None:
    class Racing(MemoryStore):
        """Another copier creates the State between this copier's read and its create."""

        raced = False

        async def awrite(
            self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False, **kw: Any
        ) -> None:
            if create and not self.raced:
                self.raced = True
                await super().awrite(state_id, entries, snapshot, create=True)
            await super().awrite(state_id, entries, snapshot, create=create, **kw)

    with MemoryStore() as src, Racing() as dst:
        [sid, *_] = make_runs(src, 1)
        record = src.read(sid)
        assert record is not None
        assert asyncio.run(aput_state(dst, sid, record)) == "same"
        assert dst.raced


def test_rename_prefix_keeps_trees_linked(tmp_path: Path) -> None:
    with MemoryStore() as src:
        ids = make_runs(src, 3)
        dst = MemoryStore()
        copy(src, dst, rename_prefix="old-")
        assert sorted(r.id for r in dst.list()) == sorted("old-" + i for i in ids)
        assert dst.load("old-run-0001-child").parent == "old-run-0001"
        assert [r.id for r in dst.list(parent="old-run-0001")] == ["old-run-0001-child"]
        assert dst.load("old-run-fork").forked_from == {"id": "old-run-0000", "seq": 2}
        assert copy(src, dst, rename_prefix="old-").same == len(ids)


def test_encrypted_source_to_clear_destination_and_back(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "sealed.db", encrypt=KEYS) as sealed, FileStore(tmp_path / "clear") as clear:
        ids = make_runs(sealed, 3)
        copy(sealed, clear)
        assert contents(clear, ids) == contents(sealed, ids)
        assert b"summarise" in b"".join(
            p.read_bytes() for p in (tmp_path / "clear").rglob("*") if p.is_file()
        )
        with SQLiteStore(tmp_path / "back.db", encrypt=KEYS) as back:
            copy(clear, back)
            assert contents(back, ids) == contents(sealed, ids)
        assert b"summarise" not in (tmp_path / "back.db").read_bytes()


def test_a_destination_with_retention_stamps_expiry_and_still_counts_as_same(tmp_path: Path) -> None:
    with MemoryStore() as src, SQLiteStore(tmp_path / "dst.db", retention=timedelta(days=7)) as dst:
        ids = make_runs(src, 3)
        copy(src, dst)
        stamped = dst.read(ids[0])
        assert stamped is not None and stamped.snapshot is not None
        assert stamped.snapshot["expiry"] == "retention"  # the store's own: documented, not a conflict
        assert copy(src, dst).same == len(ids)


def test_a_destination_that_loses_entries_fails_the_check_after_writing() -> None:
    class Lossy(MemoryStore):
        """Acknowledges every write but keeps only the first entry of each."""

        async def awrite(
            self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False, **kw: Any
        ) -> None:
            await super().awrite(state_id, list(entries)[:1], snapshot, create=create, **kw)

    with MemoryStore() as src, Lossy() as dst:
        [sid, *_] = make_runs(src, 1)
        record = src.read(sid)
        assert record is not None
        with pytest.raises(
            CopyVerifyError, match=f"{sid!r}.*fewer than the {len(record.entries)} entries sent"
        ):
            asyncio.run(aput_state(dst, sid, record))
        report = copy(src, Lossy())
        assert sid in report.failed and report.copied == 0


def test_a_source_stores_retention_stamp_is_not_copied_an_explicit_expiry_is(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "work.db", retention=timedelta(hours=1)) as src:
        ids = make_runs(src, 3)
        assert src.read(ids[0]).snapshot["expiry"] == "retention"  # type: ignore[index,union-attr]
        with FileStore(tmp_path / "archive") as archive:  # no retention: keeps States for good
            assert copy(src, archive).copied == len(ids)
            kept = archive.read(ids[0])
            assert kept is not None and kept.snapshot is not None
            assert kept.snapshot["expires_at"] is None and "expiry" not in kept.snapshot
            assert archive.load(ids[1]).expires_at == src.load(ids[1]).expires_at is not None  # keep_for
            assert copy(src, archive).same == len(ids)
        with SQLiteStore(tmp_path / "other.db", retention=timedelta(days=9)) as other:
            copy(src, other)
            restamped = other.read(ids[0])
            assert restamped is not None and restamped.snapshot is not None
            assert restamped.snapshot["expires_at"] > src.read(ids[0]).snapshot["expires_at"]  # type: ignore[union-attr,index]


def test_an_explicit_expiry_in_the_source_replaces_the_destinations_retention_stamp(tmp_path: Path) -> None:
    with (
        FileStore(tmp_path / "src") as src,
        SQLiteStore(tmp_path / "dst.db", retention=timedelta(hours=1)) as dst,
    ):
        ids = make_runs(src, 1)
        sid = ids[0]
        copy(src, dst)
        assert dst.read(sid).snapshot["expiry"] == "retention"  # type: ignore[union-attr,index]
        kept = src.load(sid)
        kept.keep_for(timedelta(days=365))
        src.save(kept)
        assert copy(src, dst).updated == 1
        assert dst.load(sid).expires_at == src.load(sid).expires_at is not None
        assert "expiry" not in dst.read(sid).snapshot  # type: ignore[operator,union-attr]
        assert copy(src, dst).same == len(ids)


def test_a_rename_prefix_too_long_for_some_ids_writes_nothing(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as src, SQLiteStore(tmp_path / "dst.db") as dst:
        make_runs(src, 4)
        long_one = State("long", id="a" * 120)
        long_one.add_user("x")
        src.save(long_one)
        with pytest.raises(RenameError, match="1 State ids invalid") as caught:
            copy(src, dst, rename_prefix="imported-")
        assert caught.value.ids == ["a" * 120]
        assert dst.list() == []
        asyncio.run(aexport(src, tmp_path / "runs.jsonl"))
        with pytest.raises(RenameError):
            asyncio.run(aimport(dst, tmp_path / "runs.jsonl", rename_prefix="imported-"))
        assert dst.list() == []


def test_a_state_leased_in_the_destination_is_counted_as_failed_and_the_others_are_copied(
    tmp_path: Path,
) -> None:
    with FileStore(tmp_path / "src") as src, SQLiteStore(tmp_path / "dst.db") as dst:
        ids = make_runs(src, 6)
        record = src.read(ids[3])
        assert record is not None
        dst.write(ids[3], record.entries[:2], None, create=True)
        dst.acquire(ids[3], "worker-1", 600)
        report = copy(src, dst)
        assert list(report.failed) == [ids[3]] and report.copied == len(ids) - 1
        assert "worker-1" in report.failed[ids[3]] and "lease=" not in report.failed[ids[3]]
        assert len(dst.read(ids[3]).entries) == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_walking_a_store_lists_a_filestore_once_and_pages_through_the_others(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each FileStore listing reads every State: paging would cost one such scan per page
    (n² reads for n States); the other stores page by keyset."""
    import statekeep._store.contract

    monkeypatch.setattr(statekeep._store.contract, "ITER_PAGE", 2)
    store = FileStore(tmp_path / "src") if kind == "file" else SQLiteStore(tmp_path / "src.db")
    with store:
        ids = make_runs(store, 4)
        listings: list[Any] = []
        select = store._select

        async def counted(query: Any) -> Any:
            listings.append(query)
            return await select(query)

        store._select = counted  # type: ignore[method-assign]
        assert sorted(r.id for r in store.iter_states()) == sorted(ids)
        dst = MemoryStore()
        assert copy(store, dst, filters={"id_prefix": "run"}).copied == len(ids)  # a listing
        expected = 2 if kind == "file" else 2 * -(-len(ids) // 2)  # iter_states, then copy
        assert len(listings) == expected


SOURCES = {
    "memory": lambda p: MemoryStore(),
    "file": lambda p: FileStore(p / "src"),
    "sqlite": lambda p: SQLiteStore(p / "src.db"),
    "postgres": lambda p: servers().postgres_store(),
    "redis": lambda p: servers().redis_store(),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_states_without_a_snapshot_are_copied_and_exported_with_the_rest(kind: str, tmp_path: Path) -> None:
    """No listing shows a State written without a snapshot (raw, or a create cut short):
    a copy or export of the whole store walks the store's ids, so it moves them too."""
    with SOURCES[kind](tmp_path) as src:
        ids = make_runs(src, 2)
        raw = [{"seq": 0, "kind": "note", "text": "héllo", "at": "2026-01-01T00:00:00+00:00"}]
        src.write("raw-nosnap", raw, None, create=True)
        assert "raw-nosnap" not in [r.id for r in src.list()]
        dst = MemoryStore()
        report = copy(src, dst)
        assert (report.copied, report.failed, report.gone) == (len(ids) + 1, {}, 0)
        assert contents(dst, [*ids, "raw-nosnap"]) == contents(src, [*ids, "raw-nosnap"])
        assert copy(src, dst).same == len(ids) + 1
        exported = asyncio.run(aexport(src, tmp_path / "runs.jsonl"))
        assert exported.states == len(ids) + 1
        again = MemoryStore()
        asyncio.run(aimport(again, tmp_path / "runs.jsonl"))
        assert contents(again, ["raw-nosnap"]) == contents(src, ["raw-nosnap"])


def test_a_state_that_expired_before_it_was_read_is_skipped_not_missing(tmp_path: Path) -> None:
    now = [datetime.now(UTC)]
    with FileStore(tmp_path / "src", clock=lambda: now[0]) as src:
        ids = make_runs(src, 2)
        short = State("short-lived", id="short")
        short.add_user("x")
        short.keep_for(timedelta(hours=1))
        src.save(short)
        now[0] += timedelta(hours=2)  # expired: the walk still finds its folder, a read does not
        report = copy(src, MemoryStore())
        assert (report.copied, report.gone, report.missing) == (len(ids), 1, [])
        assert "1 expired or deleted meanwhile (skipped)" in str(report)
        exported = asyncio.run(aexport(src, tmp_path / "runs.jsonl"))
        assert (exported.states, exported.gone, exported.missing) == (len(ids), 1, [])


def test_rename_prefix_keeps_links_to_states_not_moved_as_they_are() -> None:
    with MemoryStore() as src, MemoryStore() as dst:
        parent = State("parent", id="P" * 120)
        parent.add_user("x")
        src.save(parent)
        kid = parent.child("sub", id="kid")
        kid.add_user("y")
        src.save(kid)
        report = copy(src, dst, ids=["kid"], rename_prefix="im-")
        assert report.copied == 1
        assert dst.load("im-kid").parent == "P" * 120  # not moved: it keeps its id
        copy(src, dst, rename_prefix="all-")
        assert dst.load("all-kid").parent == "all-" + "P" * 120


@pytest.mark.parametrize("pair", ["file-sqlite", "sqlite-postgres", "file-redis", "memory-memory"])
def test_agent_memory_is_copied_with_the_scopes_asked_for(pair: str, tmp_path: Path) -> None:
    make_src, make_dst = PAIRS[pair]
    with make_src(tmp_path) as src, make_dst(tmp_path) as dst:
        ids = make_runs(src, 2)
        src.memory().put("user-prefs", {"tone": "terse"})
        src.memory("team").put("style", "short")
        report = copy(src, dst, memory_scopes=["default", "team"])
        assert report.copied == len(ids) and report.memory["default"].copied == 1
        assert dst.memory().get("user-prefs").value == {"tone": "terse"}
        assert dst.memory("team").get("style").value == "short"
        assert [r.id for r in dst.list()] == [r.id for r in src.list()]  # memory is not a State
        assert "memory 'default': 0 copied" in str(copy(src, dst, memory_scopes=["default"]))
