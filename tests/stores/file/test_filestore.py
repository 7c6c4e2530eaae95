"""FileStore on a real file system: layout, permissions, links, torn tails, several processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import orjson
import pytest

from statekeep import CorruptStateError, FileStore, Record, State
from statekeep.stores import OsIO
from statekeep.testing import entries, snapshot
from tests.support import REPO


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_folders_0700_files_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        store = FileStore(tmp_path / "deep" / "store")
        store.write("a", entries(0, 1), snapshot(), create=True)
        store.write("a", entries(1, 1), snapshot(turn=1))
    finally:
        os.umask(old)
    root = tmp_path / "deep" / "store"
    assert mode(root) == 0o700 and mode(tmp_path / "deep") == 0o700
    assert mode(root / "a") == 0o700
    assert sorted(p.name for p in (root / "a").iterdir()) == ["log.jsonl", "snapshot.json"]
    assert mode(root / "a" / "log.jsonl") == 0o600
    assert mode(root / "a" / "snapshot.json") == 0o600


def test_layout_is_one_line_per_entry_and_one_closing_each_write(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 2), snapshot("t"), create=True)
    store.write("a", entries(2, 1), None)
    lines = (tmp_path / "a" / "log.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 6
    records = [orjson.loads(line) for line in lines[:-1]]
    assert [{k: v for k, v in r.items() if k != "sk.crc"} for r in records[:2]] == entries(0, 2)
    assert all(re.fullmatch("[0-9a-f]{8}", r["sk.crc"]) for r in records)
    assert records[2]["sk.snapshot"] == snapshot("t") and records[2]["sk.next"] == 2
    assert records[4]["sk.at"] == len(lines[0]) + len(lines[1]) + 2  # the snapshot kept
    copy = orjson.loads((tmp_path / "a" / "snapshot.json").read_bytes())
    assert (
        copy["sk.snapshot"] == snapshot("t")
        and copy["sk.log"] <= (tmp_path / "a" / "log.jsonl").stat().st_size
    )


def test_reading_does_not_create_the_folder(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "later")
    assert store.read("a") is None
    assert store.list() == []
    store.delete("a")
    assert not (tmp_path / "later").exists()


def test_bad_id_touches_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid State id"):
        FileStore(tmp_path / "s").write("../escape", [], None, create=True)
    assert list(tmp_path.iterdir()) == []


def test_symlinked_state_folder_is_refused(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    store.write("real", entries(0, 1), snapshot(), create=True)
    (tmp_path / "s" / "evil").symlink_to(tmp_path / "s" / "real", target_is_directory=True)
    with pytest.raises(CorruptStateError, match="symbolic link"):
        store.read("evil")
    with pytest.raises(CorruptStateError, match="symbolic link"):
        store.write("evil", entries(1, 1), None)
    with pytest.warns(RuntimeWarning, match="'evil'.*symbolic link"):
        assert [r.id for r in store.list()] == ["real"]
    assert store.read("real") == Record(entries(0, 1), snapshot())


@pytest.mark.parametrize("name", ["log.jsonl", "snapshot.json"])
def test_symlinked_file_is_refused(tmp_path: Path, name: str) -> None:
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 1), snapshot(), create=True)
    target = tmp_path / "outside"
    target.write_bytes((tmp_path / "s" / "a" / name).read_bytes())
    (tmp_path / "s" / "a" / name).unlink()
    (tmp_path / "s" / "a" / name).symlink_to(target)
    with pytest.raises(CorruptStateError, match="symbolic link"):
        store.read("a")
    before = target.read_bytes()
    if name == "log.jsonl":
        with pytest.raises(CorruptStateError, match="symbolic link"):
            store.write("a", entries(1, 1), snapshot(turn=1))
    else:  # the rename replaces the link itself, never what it points to
        store.write("a", entries(1, 1), snapshot(turn=1))
        assert not (tmp_path / "s" / "a" / name).is_symlink()
        assert store.read("a") == Record(entries(0, 2), snapshot(turn=1))
    assert target.read_bytes() == before


def test_symlinked_snapshot_tmp_is_not_followed(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 1), snapshot(), create=True)
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    (tmp_path / "s" / "a" / "snapshot.json.tmp").symlink_to(target)
    store.write("a", entries(1, 1), snapshot(turn=1))  # the log has it; its copy is not refreshed
    store.close()
    assert target.read_bytes() == b"precious"
    assert FileStore(tmp_path / "s").read("a") == Record(entries(0, 2), snapshot(turn=1))


def append_raw(store_dir: Path, sid: str, data: bytes) -> None:
    with open(store_dir / sid / "log.jsonl", "ab") as f:
        f.write(data)


@pytest.mark.parametrize(
    "tail",
    [b'{"seq": 2, "kind": "no', b"\x00" * 100, b'{"seq":2}', b"\x00\xff\xfe garbage\n", b"\x00" * 10 + b"\n"],
)
def test_torn_tail_is_ignored_then_cut(tmp_path: Path, tail: bytes) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 2), snapshot(), create=True)
    append_raw(tmp_path, "a", tail)
    assert FileStore(tmp_path).read("a") == Record(entries(0, 2), snapshot())
    fresh = FileStore(tmp_path)
    fresh.write("a", entries(2, 1), None)
    assert fresh.read("a").entries == entries(0, 3)
    assert (tmp_path / "a" / "log.jsonl").read_bytes().count(b"\n") == 5  # 3 entries, 2 closings


def test_torn_tail_after_this_process_cached_the_tail(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 2), snapshot(), create=True)
    append_raw(tmp_path, "a", b'{"seq": 2, "te')  # another writer died mid-append
    store.write("a", entries(2, 1), None)
    assert FileStore(tmp_path).read("a").entries == entries(0, 3)


def test_damaged_line_followed_by_good_ones_is_an_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 3), snapshot(), create=True)
    log = tmp_path / "a" / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = b'{"seq": 1, "kind": "no' + b"#" * 5
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptStateError, match=r"log\.jsonl: line 2 is not a line statekeep wrote"):
        FileStore(tmp_path).read("a")
    with pytest.raises(CorruptStateError, match="line 2"):
        FileStore(tmp_path).write("a", entries(3, 1), None)
    assert log.read_bytes() == b"\n".join(lines)  # nothing cut or repaired


def test_stale_duplicate_line_is_an_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 2), snapshot(), create=True)
    append_raw(tmp_path, "a", (tmp_path / "a" / "log.jsonl").read_bytes().split(b"\n")[0] + b"\n")
    with pytest.raises(CorruptStateError, match="line 4 holds seq 0 where seq 2 belongs"):
        FileStore(tmp_path).read("a")


@pytest.mark.parametrize("copy", [b'{"task": "b", "crea', b"", b"\x00" * 300, None])
def test_a_damaged_or_missing_snapshot_copy_is_read_from_the_log(tmp_path: Path, copy: bytes | None) -> None:
    # snapshot.json is not fsync'd: a power cut may leave it empty, zero-filled or gone.
    store = FileStore(tmp_path)
    store.write("a", [], snapshot("a"), create=True)
    store.write("b", entries(0, 1), snapshot("b"), create=True)
    store.write("b", entries(1, 1), None)  # keeps the snapshot: the log points back to it
    if copy is None:
        (tmp_path / "b" / "snapshot.json").unlink()
    else:
        (tmp_path / "b" / "snapshot.json").write_bytes(copy)
    assert store.read("b") == Record(entries(0, 2), snapshot("b"))
    assert [r.id for r in store.list()] == ["a", "b"]


def test_list_ignores_what_is_not_a_state(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", [], snapshot(), create=True)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "has space").mkdir()
    (tmp_path / ".creating-1-abc").mkdir()
    assert [r.id for r in store.list()] == ["a"]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_leftovers_of_crashed_creates_and_deletes_are_removed(tmp_path: Path) -> None:
    FileStore(tmp_path).write("a", entries(0, 1), snapshot(), create=True)
    pid = dead_pid()
    for name in (f".creating-{pid}-aa", f".deleting-{pid}-bb"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "log.jsonl").write_bytes(b'{"seq":0}\n')
    store = FileStore(tmp_path)
    assert [r.id for r in store.list()] == ["a"]
    assert len(list(tmp_path.iterdir())) == 4  # reads never write, not even to clean up
    store.write("a", entries(1, 1), None)  # the first write (or delete) sweeps
    # A create or delete still at work is left alone: tests/stores/file/test_filestore_trust.py.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".statekeep-store", "a"]


class CountingIO(OsIO):
    """Counts the reads of State logs."""

    def __init__(self) -> None:
        self.reads = 0

    def read_all(self, fd: int) -> bytes:
        self.reads += os.readlink(f"/proc/self/fd/{fd}").endswith("/log.jsonl")
        return super().read_all(fd)


def test_appending_does_not_reread_the_log(tmp_path: Path) -> None:
    io = CountingIO()
    store = FileStore(tmp_path, io=io)
    store.write("a", entries(0, 1), snapshot(), create=True)
    for seq in range(1, 50):
        store.write("a", entries(seq, 1), snapshot(turn=seq))
    assert io.reads == 0
    # A store that did not write it reads the log once, then appends without reading.
    io2 = CountingIO()
    other = FileStore(tmp_path, io=io2)
    for seq in range(50, 60):
        other.write("a", entries(seq, 1), None)
    assert io2.reads == 0  # its first append read only the log's last write
    other.write("a", entries(55, 5), None)  # re-sent: compared with the log's end, not read whole
    assert io2.reads == 0
    assert store.read("a").entries == entries(0, 60)


def test_appends_by_another_process_are_seen(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", entries(0, 1), snapshot(), create=True)
    code = textwrap.dedent(
        f"""
        from statekeep import FileStore
        from statekeep.testing import entries
        FileStore({str(tmp_path)!r}).write("a", entries(1, 2), None)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    with pytest.raises(ValueError, match="expected seq 3 next, got seq 4"):
        store.write("a", [{"seq": 4}], None)
    store.write("a", entries(1, 3), None)  # 1-2 skipped as equal, 3 new
    assert store.read("a").entries == entries(0, 4)


WRITER = """
import sys
from statekeep import FileStore, StateConflictError
store, sid, name, count = FileStore(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
done = 0
while done < count:
    rec = store.read(sid)
    seq = len(rec.entries)
    try:
        store.write(sid, [{"seq": seq, "by": name, "n": done}], {"last": name})
    except StateConflictError:
        continue
    done += 1
"""


def test_processes_writing_one_state_never_corrupt_it(tmp_path: Path) -> None:
    FileStore(tmp_path).write("shared", [], None, create=True)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "shared", f"p{i}", "60"])
        for i in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    rec = FileStore(tmp_path).read("shared")
    assert [e["seq"] for e in rec.entries] == list(range(240))
    for i in range(4):
        assert [e["n"] for e in rec.entries if e["by"] == f"p{i}"] == list(range(60))


def test_fork_while_a_state_is_locked_does_not_wedge_it(tmp_path: Path) -> None:
    from statekeep.stores._file.locking import lock, unlock

    store = FileStore(tmp_path)
    store.write("a", entries(0, 1), snapshot(), create=True)
    folder = os.open(tmp_path / "a", os.O_RDONLY | os.O_DIRECTORY)
    lock(folder)  # as a writer thread holds it mid-write
    pid = os.fork()
    if pid == 0:  # the child: its copy of the lock must not keep the State locked
        code = 1
        try:
            FileStore(tmp_path).write("a", entries(1, 1), None)
            code = 0
        finally:
            os._exit(code)
    unlock(folder)  # the writer finishes in the parent
    status: list[int] = []
    waiter = threading.Thread(target=lambda: status.append(os.waitpid(pid, 0)[1]), daemon=True)
    waiter.start()
    waiter.join(60)
    if waiter.is_alive():
        os.kill(pid, signal.SIGKILL)
        waiter.join()
        pytest.fail("the forked child hung on a lock it inherited")
    assert os.waitstatus_to_exitcode(status[0]) == 0
    store.write("a", entries(2, 1), None)
    assert store.read("a").entries == entries(0, 3)


def test_a_forked_child_never_uses_the_descriptors_its_parent_keeps_open(tmp_path: Path) -> None:
    # A child sharing the parent's open folder would share its flock too: both could then
    # write the State at once. So the child forgets them and opens its own.
    store = FileStore(tmp_path)
    store.write("a", entries(0, 1), snapshot(), create=True)
    store.write("a", entries(1, 1), None)  # the State's folder and log are now kept open
    kept = store._handles.take("a")
    assert kept is not None
    store._handles.give("a", *kept)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            if store._handles.take("a") is not None:
                os._exit(2)  # it kept what its parent had open
            store.write("a", entries(2, 1), None)  # opens the State afresh
            os.write(write, b"ok")
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and os.read(read, 2) == b"ok"
    os.close(read)
    store.write("a", entries(3, 1), None)  # the parent's kept descriptors still work
    assert FileStore(tmp_path).read("a") == Record(entries(0, 4), snapshot())


async def test_many_states_written_at_once_share_commits_without_wedging(tmp_path: Path) -> None:
    # More States than helper threads: a batch that outgrows the pools must still finish.
    store = FileStore(tmp_path)
    ids = [f"s{i}" for i in range(150)]

    async def all_at_once(round_: int) -> None:
        await asyncio.gather(
            *(store.awrite(sid, entries(round_, 1), snapshot(turn=round_), create=round_ == 0) for sid in ids)
        )

    for round_ in range(3):
        await asyncio.wait_for(all_at_once(round_), timeout=120)
    fresh = FileStore(tmp_path)
    for sid in ids:
        assert fresh.read(sid) == Record(entries(0, 3), snapshot(turn=2))


APPEND_ALL_AT_ONCE = """
import asyncio, resource, sys
from statekeep import FileStore
from statekeep.testing import entries, snapshot

root, count, limit, instances = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
stores = [FileStore(root) for _ in range(instances)]  # each with its own group commit

async def main() -> list[BaseException]:
    results = await asyncio.gather(
        *(stores[i % instances].awrite(f"s{i}", entries(1, 1), snapshot(turn=1)) for i in range(count)),
        return_exceptions=True,
    )
    return [r for r in results if r is not None]

failed = asyncio.run(main())
print(f"{len(failed)} of {count} writes failed: {failed[:3]}")
sys.exit(1 if failed else 0)
"""


@pytest.mark.parametrize("instances", [1, 8])
def test_many_appends_at_once_stay_within_the_descriptor_limit(tmp_path: Path, instances: int) -> None:
    # Each staged append holds three descriptors: 200 in one batch would need 600, and so
    # would 8 stores' batches at once if each kept to a cap of its own.
    count, limit = 200, 100
    setup = FileStore(tmp_path)
    for i in range(count):
        setup.write(f"s{i}", entries(0, 1), snapshot(), create=True)
    done = subprocess.run(
        [sys.executable, "-c", APPEND_ALL_AT_ONCE, str(tmp_path), str(count), str(limit), str(instances)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = FileStore(tmp_path)
    for i in range(count):
        assert fresh.read(f"s{i}") == Record(entries(0, 2), snapshot(turn=1))


class DeleteMidway(OsIO):
    """Before the store opens ``at``, does a delete's steps as another process would:
    renames the State's folder away, then removes ``gone`` of its files (all: and the
    folder itself)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.at: str | None = None
        self.gone: tuple[str, ...] = ()
        self.fired = False

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        # A listing opens "s/snapshot.json" from the store's folder, never "s" itself.
        if self.at is not None and self.at in (name, *name.split("/")):
            self.at, self.fired = None, True
            trash = self.root / f".deleting-{os.getpid()}-race"
            os.rename(self.root / "s", trash)
            for file in self.gone:
                (trash / file).unlink()
            if len(self.gone) == 2:
                trash.rmdir()
        return super().open(name, flags, mode, dir_fd=dir_fd)


DELETE_STEPS = {
    "renamed": (),
    "snapshot-removed": ("snapshot.json",),
    "log-removed": ("log.jsonl",),
    "all-removed": ("snapshot.json", "log.jsonl"),
}


@pytest.mark.parametrize("gone", DELETE_STEPS)
@pytest.mark.parametrize(
    ("api", "at"),
    [
        (api, at)
        for api in ("read", "load", "list")
        for at in ("s", "snapshot.json", "log.jsonl")
        if (api, at) != ("list", "log.jsonl")  # list reads snapshots only
    ],
)
def test_a_read_racing_a_delete_sees_the_state_whole_or_gone(
    tmp_path: Path, api: str, at: str, gone: str
) -> None:
    io = DeleteMidway(tmp_path)
    store = FileStore(tmp_path, io=io)
    state = State("task", id="s")
    state.add_user("hello")
    store.save(state)
    saved = store.read("s")
    io.at, io.gone = at, DELETE_STEPS[gone]
    # What the read saw before the delete took it away: the log has it all. A listing
    # opens the snapshot's copy by its path from the store's folder first: gone already.
    whole = at != "s" and "log.jsonl" not in io.gone and api != "list"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # list() warns about a State it calls unreadable
        if api == "read":
            assert store.read("s") == (saved if whole else None)
        elif api == "load":
            if whole:
                assert store.load("s") == state
            else:
                with pytest.raises(LookupError, match="no State 's'"):
                    store.load("s")
        else:
            assert [r.id for r in store.list()] == (["s"] if whole else [])
    assert io.fired


def saved_finished_state(root: Path) -> tuple[State, bytes]:
    """A finished State saved in ``root`` (its snapshot says seq 2, finished), and its log."""
    state = State("task", id="a")
    state.add_user("hello")
    state.finish("done")  # seq 2, the stop entry
    FileStore(root).save(state)
    assert state.snapshot()["seq"] == 2 and state.finished
    return state, (root / "a" / "log.jsonl").read_bytes()


@pytest.mark.parametrize("damage", ["last-line-cut-short", "last-line-gone"])
def test_a_log_shorter_than_its_snapshot_copy_is_corruption(tmp_path: Path, damage: str) -> None:
    _, data = saved_finished_state(tmp_path)
    log = tmp_path / "a" / "log.jsonl"
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # where the write's closing record starts
    damaged = data[:-10] if damage == "last-line-cut-short" else data[:last]
    log.write_bytes(damaged)
    message = re.escape(
        f"State 'a' is damaged: {tmp_path / 'a' / 'snapshot.json'} was written after the first "
        f"{len(data)} bytes of {log} were durable, but its complete writes end at byte "
    )
    store = FileStore(tmp_path)
    with pytest.raises(CorruptStateError, match=message):
        store.read("a")
    with pytest.raises(CorruptStateError, match=message):
        store.load("a")
    with pytest.warns(RuntimeWarning, match="'a' left out of the listing"):
        assert store.list() == []
    # An append must not cut the damaged write as if a crash had torn it.
    with pytest.raises(CorruptStateError, match=message):
        store.write("a", [{"seq": 3, "kind": "user", "text": "more"}], None)
    assert log.read_bytes() == damaged


def test_a_line_torn_by_a_crash_after_the_snapshot_is_no_corruption(tmp_path: Path) -> None:
    state, _ = saved_finished_state(tmp_path)
    # A writer died while appending seq 3: its snapshot was never written.
    append_raw(tmp_path, "a", b'{"seq":3,"kind":"us')
    store = FileStore(tmp_path)
    assert store.read("a").entries == state.history
    assert store.load("a") == state
    store.write("a", [{"seq": 3, "kind": "error", "at": state.updated_at, "message": "x"}], None)
    assert FileStore(tmp_path).read("a").entries[-1]["seq"] == 3


def test_writers_in_two_processes_taking_turns_keep_the_snapshot_where_it_is(tmp_path: Path) -> None:
    # Two stores stand for two processes, each with its own knowledge of the log: one
    # appends a snapshot, the other then keeps it, pointing at it by its offset in the log.
    a, b = FileStore(tmp_path), FileStore(tmp_path)
    a.write("s", entries(0, 2), snapshot("t0"), create=True)
    b.write("s", entries(2, 2), snapshot("t1"))
    a.write("s", entries(4, 1), None)  # read only what b appended, then keep b's snapshot
    b.write("s", entries(5, 1), None)
    assert FileStore(tmp_path).read("s") == Record(entries(0, 6), snapshot("t1"))
    assert [r.task for r in FileStore(tmp_path).list()] == ["t1"]


def test_a_late_copy_refresh_never_lands_in_a_state_made_again(tmp_path: Path) -> None:
    a, b = FileStore(tmp_path), FileStore(tmp_path)
    a.write("s", entries(0, 1), snapshot("t0"), create=True)
    a.write("s", entries(1, 1), snapshot("t1"))
    a.write("s", entries(2, 20), snapshot("t2"))  # its copy is due, refreshed later
    b.delete("s")  # another process deletes the State, and makes a new one
    b.write("s", entries(0, 1), snapshot("new"), create=True)
    a.close()  # refreshes the copies it owes: not into the new State
    assert FileStore(tmp_path).read("s") == Record(entries(0, 1), snapshot("new"))
    assert [r.task for r in FileStore(tmp_path).list()] == ["new"]
    b.write("s", entries(1, 1), snapshot("x"))
