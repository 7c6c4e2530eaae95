"""FileStore's own parts of issue 10 on a real file system: namespaces on disk and in the
marker, expiry judged from the log under the State's lock (appends, creates over an
expired State, gc from several processes racing writers), crash safety of a create that
replaces an expired State; and MemoryStore's namespaces and sliding ttl."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import CorruptStateError, FileStore, MemoryStore, StateExistsError, StateNotFoundError
from statekeep.stores import OsIO
from statekeep.testing import entries, snapshot
from tests.support import REPO

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """The store's clock seam: a time the test moves."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def expiring(at: datetime, task: str = "task", **extra: Any) -> dict[str, Any]:
    """A snapshot whose State expires at ``at``."""
    return {**snapshot(task), "expires_at": at.isoformat(), **extra}


def marker(root: Path) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads((root / ".statekeep-store").read_bytes())
    return value


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- namespaces on disk -----------------------------------------------------------------


def test_namespaces_live_in_dot_folders_named_in_the_marker(tmp_path: Path) -> None:
    default, team = FileStore(tmp_path), FileStore(tmp_path, namespace="team-a")
    default.write("a", entries(0, 1), snapshot("default's"), create=True)
    assert marker(tmp_path) == {"format": 2}  # no other namespace yet: as earlier versions wrote it
    team.write("a", entries(0, 2), snapshot("team's"), create=True)
    default.memory("notes").put("k", 1)

    assert names(tmp_path) == [".ns.default.memory.notes", ".ns.team-a", ".statekeep-store", "a"]
    assert names(tmp_path / ".ns.team-a") == ["a"]
    assert names(tmp_path / ".ns.team-a" / "a") == ["log.jsonl", "snapshot.json"]
    assert marker(tmp_path) == {"format": 2, "namespaces": ["default.memory.notes", "team-a"]}
    # Each sees its own State only: reads, listings.
    assert [s.task for s in default.list()] == ["default's"]
    assert [s.task for s in team.list()] == ["team's"]
    team_record = team.read("a")
    assert team_record is not None and len(team_record.entries) == 2
    assert FileStore(tmp_path, namespace="other").list() == []
    assert FileStore(tmp_path, namespace="other").read("a") is None
    assert team.memory("notes").get("k") is None  # memory is per namespace too
    assert names(tmp_path).count(".ns.other") == 0  # reads make nothing


def test_a_store_of_earlier_versions_is_the_default_namespace(tmp_path: Path) -> None:
    """A folder of States with no marker (as 0.x left it) stays readable as the default
    namespace, and adding a namespace keeps its States where they are."""
    old = tmp_path / "old"
    FileStore(old).write("a", entries(0, 1), snapshot("old"), create=True)
    (old / ".statekeep-store").unlink()
    FileStore(old, namespace="new").write("b", entries(0, 1), snapshot("new"), create=True)
    assert [s.id for s in FileStore(old).list()] == ["a"]
    assert [s.id for s in FileStore(old, namespace="new").list()] == ["b"]
    assert marker(old) == {"format": 2, "namespaces": ["new"]}


def test_namespaces_added_by_two_stores_are_both_named(tmp_path: Path) -> None:
    """Each adds its name to the marker as it reads it then (under the folder's lock), not
    as it read it when it opened the folder."""
    first, second = FileStore(tmp_path, namespace="one"), FileStore(tmp_path, namespace="two")
    FileStore(tmp_path).write("a", entries(0, 1), snapshot(), create=True)
    assert second.list() == [] and first.list() == []  # both opened and checked the folder
    first.write("a", entries(0, 1), snapshot(), create=True)
    second.write("a", entries(0, 1), snapshot(), create=True)
    assert marker(tmp_path)["namespaces"] == ["one", "two"]


def test_gc_and_delete_of_one_namespace_leave_the_others(tmp_path: Path) -> None:
    clock = Clock()
    stores = {ns: FileStore(tmp_path, namespace=ns, clock=clock) for ns in ("default", "x", "y")}
    for store in stores.values():
        store.write("a", entries(0, 1), expiring(T0 + timedelta(seconds=1)), create=True)
    clock.at += timedelta(seconds=2)
    assert stores["x"].gc() == 1
    clock.at = T0
    assert stores["x"].read("a") is None
    assert stores["default"].read("a") is not None and stores["y"].read("a") is not None
    stores["default"].delete("a")
    assert stores["y"].read("a") is not None


def test_a_namespace_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    FileStore(tmp_path / "store").write("a", entries(0, 1), snapshot(), create=True)
    elsewhere = tmp_path / "elsewhere"
    FileStore(elsewhere).write("a", entries(0, 1), snapshot(), create=True)
    (tmp_path / "store" / ".ns.team").symlink_to(elsewhere)
    with pytest.raises(CorruptStateError, match="symbolic link"):
        FileStore(tmp_path / "store", namespace="team").read("a")


def test_bad_namespace_names_are_refused(tmp_path: Path) -> None:
    for bad in ("", "Team", ".x", "a.b", "../x", "a/b"):
        with pytest.raises(ValueError, match="namespace"):
            FileStore(tmp_path, namespace=bad)


def test_stores_are_equal_by_folder_and_namespace(tmp_path: Path) -> None:
    assert FileStore(tmp_path, namespace="a") == FileStore(tmp_path, namespace="a")
    assert FileStore(tmp_path, namespace="a") != FileStore(tmp_path, namespace="b")
    assert FileStore(tmp_path) == FileStore(tmp_path, namespace="default")


# -- expiry, judged from the log --------------------------------------------------------


def test_an_append_judges_expiry_from_the_log_another_process_extended(tmp_path: Path) -> None:
    """The appending store cached the expiry it wrote; another store (another process's
    view) extended it since, so the append goes through; and the reverse."""
    clock = Clock()
    mine, other = FileStore(tmp_path, clock=clock), FileStore(tmp_path, clock=clock)
    mine.write("a", entries(0, 1), expiring(T0 + timedelta(seconds=10)), create=True)
    other.write("a", entries(1, 1), expiring(T0 + timedelta(hours=1)))
    clock.at = T0 + timedelta(seconds=20)
    mine.write("a", entries(2, 1), None)  # extended by ``other``: still there
    other.write("a", entries(3, 1), expiring(T0 + timedelta(seconds=15)))  # now in the past
    with pytest.raises(StateNotFoundError):
        mine.write("a", entries(4, 1), None)
    assert mine.read("a") is None
    clock.at = T0
    record = mine.read("a")
    assert record is not None and len(record.entries) == 4  # the refused write wrote nothing


def test_a_create_replaces_an_expired_state_whole(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path, clock=clock)
    store.write("a", entries(0, 3), expiring(T0 + timedelta(seconds=1), "old"), create=True)
    with pytest.raises(StateExistsError):
        store.write("a", entries(0, 1), snapshot("new"), create=True)
    clock.at += timedelta(seconds=1)
    FileStore(tmp_path, clock=clock).write("a", entries(0, 1), snapshot("new"), create=True)
    store.write("a", entries(1, 1), None)  # this store's kept descriptors were of the old State
    record = store.read("a")
    assert record is not None and [e["seq"] for e in record.entries] == [0, 1]
    assert record.snapshot is not None and record.snapshot["task"] == "new"
    assert names(tmp_path) == [".statekeep-store", "a"]  # the old one's folder is gone


def test_a_create_over_an_expired_state_another_process_replaced_meanwhile_is_refused(
    tmp_path: Path,
) -> None:
    """Between the create's first look (expired) and its rename, another process replaces
    the expired State: judged again under the State's lock, the new one stays, and the
    create is refused."""
    clock = Clock(T0 + timedelta(seconds=5))
    path = tmp_path / "store"
    FileStore(path, clock=clock).write("a", entries(0, 1), expiring(T0), create=True)
    extend = textwrap.dedent(f"""
        from datetime import UTC, datetime
        from statekeep import FileStore
        from statekeep.testing import entries, snapshot
        clock = lambda: datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
        FileStore({str(path)!r}, clock=clock).write("a", entries(0, 2), snapshot("kept"), create=True)
    """)

    class ExtendFirst(OsIO):
        def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
            if src.startswith(".creating-"):  # the State is extended right before
                subprocess.run([sys.executable, "-c", extend], check=True, cwd=REPO)
            super().rename(src, dst, dir_fd=dir_fd)

    with pytest.raises(StateExistsError):
        FileStore(path, clock=clock, io=ExtendFirst()).write("a", entries(0, 1), snapshot("new"), create=True)
    record = FileStore(path, clock=clock).read("a")
    assert record is not None and record.snapshot is not None and record.snapshot["task"] == "kept"
    assert len(record.entries) == 2
    FileStore(path).write("b", entries(0, 1), snapshot(), create=True)  # sweeps what is left
    assert names(path) == [".statekeep-store", "a", "b"]


def _replace_and_die(path: str, when: str) -> None:
    """A child process: create ``a`` over the expired one, SIGKILLed at ``when``."""

    class Die(OsIO):
        def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
            if when == "before" and src.startswith(".creating-"):
                os.kill(os.getpid(), signal.SIGKILL)  # staging complete, nothing renamed yet
            super().rename(src, dst, dir_fd=dir_fd)
            if when == "between" and dst.startswith(".deleting-"):
                os.kill(os.getpid(), signal.SIGKILL)  # the old one renamed away, the new not in
            if when == "after" and src.startswith(".creating-") and dst == "a":
                os.kill(os.getpid(), signal.SIGKILL)  # in place, the old one not removed yet

    store = FileStore(path, clock=lambda: T0 + timedelta(hours=1), io=Die())
    store.write("a", entries(0, 2), snapshot("new"), create=True)
    raise AssertionError("not killed")


@pytest.mark.parametrize("when", ["before", "between", "after"])
def test_a_create_over_an_expired_state_killed_midway(tmp_path: Path, when: str) -> None:
    """Killed at any step, the id holds the expired State (absent), nothing, or the new one
    whole; the next write clears the leftovers, and the id can be created again."""
    path = tmp_path / "store"
    clock = Clock(T0 + timedelta(hours=1))
    FileStore(path, clock=clock).write("a", entries(0, 5), expiring(T0, "old"), create=True)
    child = multiprocessing.get_context("spawn").Process(target=_replace_and_die, args=(str(path), when))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    store = FileStore(path, clock=clock)
    record = store.read("a")
    if when == "after":
        assert record is not None and record.snapshot is not None and record.snapshot["task"] == "new"
        assert len(record.entries) == 2
    else:
        assert record is None and store.list() == []
        store.write("a", entries(0, 1), snapshot("again"), create=True)
        again = store.read("a")
        assert again is not None and again.snapshot is not None and again.snapshot["task"] == "again"
    store.write("b", entries(0, 1), snapshot(), create=True)  # a fresh store's first write sweeps
    assert names(path) == [".statekeep-store", "a", "b"]


# -- gc from several processes, racing writers -------------------------------------------

STATES = 120


def _gc_loop(path: str, start: Any, done: Any, counts: Any, slot: int) -> None:
    store = FileStore(path, clock=lambda: T0 + timedelta(minutes=1))
    store.read("warm-up")  # the owner loop started before the race
    start.wait()
    total = 0
    while True:
        finished = done.is_set()  # read first: a pass after the writers finished sees all
        total += store.gc()
        if finished:
            break
    counts[slot] = total


def _writer(path: str, ids: list[str], start: Any, out: Any) -> None:
    # Writes just before the States expire, gc just after: a write that gets in first
    # extends the State (no expiry any more), one that comes after gc finds it gone.
    store = FileStore(path, clock=lambda: T0)
    store.read("warm-up")
    start.wait()
    for sid in reversed(ids):  # gc goes newest first, ties by id: they meet midway
        try:
            store.write(sid, entries(1, 1), {**snapshot("extended"), "expires_at": None})
        except StateNotFoundError:
            out.put((sid, "gone"))
        else:
            out.put((sid, "extended"))


def test_gc_in_several_processes_racing_writers_never_removes_an_extended_state(tmp_path: Path) -> None:
    """Every State starts expired; writer processes extend them while gc processes run.
    A State a write extended is there with that write; every other State was removed,
    by exactly one gc (the counts add up)."""
    path = tmp_path / "store"
    clock = Clock(T0)
    seed = FileStore(path, clock=clock)
    ids = [f"s{i:03d}" for i in range(STATES)]
    for sid in ids:
        seed.write(sid, entries(0, 1), expiring(T0 + timedelta(seconds=1)), create=True)
    seed.close()
    ctx = multiprocessing.get_context("forkserver")
    start, done, out = ctx.Barrier(5), ctx.Event(), ctx.Queue()
    counts = ctx.Array("i", 2)
    gcs = [ctx.Process(target=_gc_loop, args=(str(path), start, done, counts, i)) for i in range(2)]
    writers = [ctx.Process(target=_writer, args=(str(path), ids[i::3], start, out)) for i in range(3)]
    for proc in gcs + writers:
        proc.start()
    outcome = dict(out.get(timeout=120) for _ in ids)
    for proc in writers:
        proc.join()
    done.set()
    for proc in gcs:
        proc.join()
    assert all(p.exitcode == 0 for p in gcs + writers)

    store = FileStore(path, clock=Clock(T0 + timedelta(minutes=1)))
    extended = {sid for sid, what in outcome.items() if what == "extended"}
    for sid in ids:
        record = store.read(sid)
        if sid in extended:
            assert record is not None and len(record.entries) == 2, sid
        else:
            assert record is None and not (path / sid).exists(), sid
    assert sum(counts) == STATES - len(extended)
    assert {s.id for s in store.list()} == extended


# -- MemoryStore ----------------------------------------------------------------------


def test_memorystore_namespaces_are_separate_and_shared_by_agent_memory() -> None:
    default = MemoryStore()
    other = MemoryStore(namespace="other")
    default.write("a", entries(0, 1), snapshot("mine"), create=True)
    assert other.read("a") is None and other.list() == []
    notes = default.memory("notes")
    notes.put("k", 1)
    assert default.memory("notes").get("k") is not None  # the same namespace's memory
    assert default.list()[0].task == "mine"  # memory is not listed with the States
    assert MemoryStore().memory("notes").get("k") is None  # another store shares nothing


def test_memorystore_ttl_slides_on_read_not_on_list() -> None:
    clock = Clock()
    store = MemoryStore(ttl=timedelta(seconds=10), clock=clock)
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.write("b", entries(0, 1), snapshot(), create=True)
    clock.at += timedelta(seconds=8)
    assert store.read("a") is not None  # now expires at 18 s
    assert len(store.list()) == 2  # a listing slides nothing
    clock.at += timedelta(seconds=4)
    assert store.read("b") is None
    assert [s.id for s in store.list()] == ["a"]
    assert store.list()[0].expires_at == T0 + timedelta(seconds=18)
    clock.at += timedelta(seconds=7)
    assert store.read("a") is None
    assert store.gc() == 2


def test_memorystore_explicit_expiry_does_not_slide() -> None:
    clock = Clock()
    store = MemoryStore(ttl=timedelta(seconds=10), clock=clock)
    store.write("a", entries(0, 1), expiring(T0 + timedelta(seconds=5)), create=True)
    clock.at += timedelta(seconds=4)
    assert store.read("a") is not None
    clock.at += timedelta(seconds=1)
    assert store.read("a") is None


def test_memorystore_takes_retention_or_ttl_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        MemoryStore(retention=timedelta(1), ttl=timedelta(1))
    with pytest.raises(ValueError, match="positive"):
        MemoryStore(ttl=timedelta(0))


def test_memorystore_expired_state_is_replaced_by_a_create_and_refuses_appends() -> None:
    clock = Clock()
    store = MemoryStore(retention=timedelta(seconds=1), clock=clock)
    store.write("a", entries(0, 2), snapshot("old"), create=True)
    clock.at += timedelta(seconds=1)
    with pytest.raises(StateNotFoundError):
        store.write("a", entries(2, 1), None)
    store.write("a", entries(0, 1), snapshot("new"), create=True)
    record = store.read("a")
    assert record is not None and len(record.entries) == 1 and record.snapshot is not None
    assert record.snapshot["task"] == "new"


# -- review fixes: tree deletes and gc dry runs see expired States; snapshot reads --------


def _store(kind: str, tmp_path: Path, clock: Clock) -> FileStore | MemoryStore:
    return FileStore(tmp_path, clock=clock) if kind == "file" else MemoryStore(clock=clock)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_tree_delete_reaches_live_states_under_an_expired_one(tmp_path: Path, kind: str) -> None:
    clock = Clock()
    store = _store(kind, tmp_path, clock)
    store.write("root", [], snapshot(), create=True)
    store.write("mid", [], expiring(T0 + timedelta(hours=1), parent="root"), create=True)
    store.write("leaf", [], {**snapshot(), "parent": "mid"}, create=True)
    clock.at = T0 + timedelta(hours=1)  # mid is expired, so no listing shows it
    store.delete("root", children=True)
    assert store.read("leaf") is None and store.list() == []
    clock.at = T0  # mid was removed too, not just hidden by its expiry
    assert store.read("mid") is None


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_gc_dry_run_counts_what_gc_removes_and_removes_nothing(tmp_path: Path, kind: str) -> None:
    clock = Clock()
    store = _store(kind, tmp_path, clock)
    hour = T0 + timedelta(hours=1)
    store.write("a", entries(0, 2), expiring(hour), create=True)
    store.write("b", [], expiring(hour), create=True)
    store.write("later", [], expiring(T0 + timedelta(days=1)), create=True)
    store.write("keep", [], snapshot(), create=True)
    assert store.gc(dry_run=True) == 0
    clock.at = hour
    assert store.gc(dry_run=True) == 2
    clock.at = T0
    assert store.read("a") is not None and store.read("b") is not None  # nothing removed
    clock.at = hour
    assert store.gc() == 2 and store.gc(dry_run=True) == 0


def test_a_filestore_snapshot_read_never_reads_the_history(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path, clock=clock)
    store.write("k", entries(0, 2), expiring(T0 + timedelta(hours=1), "one"), create=True)
    store.write("k", entries(2, 1), expiring(T0 + timedelta(hours=1), "two"))  # after the copy
    store.close()  # the copy now holds "two"
    log = tmp_path / "k" / "log.jsonl"
    damaged = b"X" + log.read_bytes()[1:]  # the same length: the copy is still current
    log.write_bytes(damaged)
    store = FileStore(tmp_path, clock=clock)
    with pytest.raises(CorruptStateError):
        store.read("k")
    assert asyncio.run(store.aread_snapshot("k")) == expiring(T0 + timedelta(hours=1), "two")
    assert asyncio.run(store.aread_snapshot("missing")) is None
    clock.at = T0 + timedelta(hours=1)
    assert asyncio.run(store.aread_snapshot("k")) is None  # expired: absent
    store.close()


def test_a_filestore_snapshot_read_takes_writes_after_the_copy_from_the_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("k", entries(0, 1), snapshot("one"), create=True)
    store.write("k", entries(1, 1), snapshot("two"))  # its copy is refreshed later
    assert asyncio.run(store.aread_snapshot("k")) == snapshot("two")
    store.close()


def test_a_memorystore_snapshot_read_never_reads_the_history() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    store.write("k", entries(0, 2), expiring(T0 + timedelta(hours=1)), create=True)
    store._space.lines["k"] = [b"not json"]  # a history read would fail now
    assert asyncio.run(store.aread_snapshot("k")) == expiring(T0 + timedelta(hours=1))
    clock.at = T0 + timedelta(hours=1)
    assert asyncio.run(store.aread_snapshot("k")) is None
