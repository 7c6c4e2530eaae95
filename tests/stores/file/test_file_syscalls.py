"""What a FileStore asks of the system per operation, counted through its I/O seam (every
system call of an append goes through :class:`OsIO`: checked against strace when this was
written), and the shortcuts that keep a steady-state append that small: each checked
against what could make it wrong (another process appending, the State deleted and made
again, a lease taken, a fork, a rekey, a store closed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import statekeep as sk
from statekeep import FileStore, Keyring, LeaseHeldError, Record, StateConflictError, StateNotFoundError
from statekeep.stores import OsIO
from statekeep.testing import entries, snapshot
from tests.support import REPO

ROOT = REPO
#: The issue's bound for a steady-state append (same process, no other writer since).
STEADY_BOUND = 8


class CountingIO(OsIO):
    """Counts every call through the seam, by name (each is one system call; ``mkdir``
    two). ``write_all``/``read_all`` are counted by the ``write``/``read``/``fstat`` they make."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def take(self) -> Counter[str]:
        with self._lock:
            calls, self.calls = self.calls, Counter()
        return calls


def _counted(name: str) -> Any:
    real = getattr(OsIO, name)

    def method(self: CountingIO, *args: Any, **kwargs: Any) -> Any:
        self._count(name)
        return real(self, *args, **kwargs)

    return method


for _name in (
    "open", "write", "fsync", "touch", "truncate", "chmod", "rename", "mkdir", "unlink", "rmdir",
    "close", "stat", "fstat", "flock", "pread", "read",
):  # fmt: skip
    setattr(CountingIO, _name, _counted(_name))


@pytest.fixture
def no_copy_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshot copies refreshed by a store's first write to a State and at close only
    (as tests/stores/file/test_filestore_faults.py does): so how fast this machine is does not matter."""
    monkeypatch.setattr("statekeep.stores._file.copies.INTERVAL", 3600.0)
    monkeypatch.setattr("statekeep.stores._file.store.INTERVAL", 3600.0)


def warm(tmp_path: Path, io: OsIO, sid: str = "a") -> FileStore:
    """A store that created ``sid`` and appended to it: its next append is steady."""
    store = FileStore(tmp_path, io=io)
    store.write(sid, entries(0, 3), snapshot(), create=True)
    for turn in range(1, 4):
        store.write(sid, entries(turn * 3, 3), snapshot(turn=turn))
    return store


def run(code: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], check=True, cwd=ROOT)


def test_a_steady_state_append_makes_at_most_8_system_calls(tmp_path: Path, no_copy_refresh: None) -> None:
    io = CountingIO()
    store = warm(tmp_path, io)
    counts = []
    for turn in range(4, 24):
        io.take()
        store.write("a", entries(turn * 3, 3), snapshot(turn=turn))
        counts.append(io.take())
    worst = max(counts, key=lambda c: c.total())
    assert worst.total() <= STEADY_BOUND, dict(worst)
    # Its durable part: one write, one fsync.
    assert all(c["write"] == 1 and c["fsync"] == 1 for c in counts)
    store.close()
    assert FileStore(tmp_path).read("a") == Record(entries(0, 72), snapshot(turn=23))


def test_a_steady_append_to_a_leased_state_reads_the_lease_row(tmp_path: Path, no_copy_refresh: None) -> None:
    io = CountingIO()
    store = warm(tmp_path, io)
    lease = store.acquire("a", owner="w1", ttl=timedelta(minutes=5))
    store.write("a", entries(12, 1), None, lease=lease)
    io.take()
    store.write("a", entries(13, 1), None, lease=lease)
    calls = io.take()
    # The row is read whole each time (open, fstat, read, close): a lease taken or ended by
    # another process is never judged from a cache.
    assert calls.total() <= STEADY_BOUND + 3, dict(calls)
    assert calls["read"] == 1
    store.close()


def test_an_append_by_another_process_between_two_steady_appends_is_seen(tmp_path: Path) -> None:
    store = warm(tmp_path, OsIO())
    # Same size as our next append would leave it: only the size and the seqs tell.
    run(
        """
        import sys
        from statekeep import FileStore
        from statekeep.testing import entries, snapshot
        with FileStore(sys.argv[1]) as other:
            other.write("a", entries(12, 3), snapshot(turn=4))
        """,
        str(tmp_path),
    )
    with pytest.raises(ValueError, match="expected seq 15 next, got seq 16"):
        store.write("a", entries(16, 1), None)
    with pytest.raises(StateConflictError, match="different entry at seq 12"):
        store.write("a", [{"seq": 12, "other": True}], None)
    store.write("a", entries(12, 4), snapshot(turn=5))  # 12-14 skipped as equal, 15 new
    store.write("a", entries(16, 1), None)  # steady again
    store.close()
    assert FileStore(tmp_path).read("a") == Record(entries(0, 17), snapshot(turn=5))


@pytest.mark.parametrize("bound", [False, True])
def test_a_state_made_again_by_another_process_between_two_steady_appends(
    tmp_path: Path, bound: bool
) -> None:
    store = warm(tmp_path, OsIO())
    old = store.read("a")
    size = (tmp_path / "a" / "log.jsonl").stat().st_size
    # Deleted and created again with the same history: a log of the very same size.
    run(
        """
        import sys
        from statekeep import FileStore
        from statekeep.testing import entries, snapshot
        with FileStore(sys.argv[1]) as other:
            other.delete("a")
            other.write("a", entries(0, 3), snapshot(), create=True)
            for turn in range(1, 4):
                other.write("a", entries(turn * 3, 3), snapshot(turn=turn))
        """,
        str(tmp_path),
    )
    assert (tmp_path / "a" / "log.jsonl").stat().st_size == size
    assert store.read("a").entries == old.entries
    if bound:  # a write made for the old incarnation is refused
        with pytest.raises(StateConflictError, match="deleted and created again"):
            store.write("a", entries(12, 1), None, incarnation=old.incarnation)
    store.write("a", entries(12, 1), None)  # goes to the new State's log, not the old one's
    store.close()
    after = FileStore(tmp_path).read("a")
    assert after.entries == entries(0, 13) and after.incarnation != old.incarnation


def test_a_state_made_again_by_another_store_in_this_process(tmp_path: Path) -> None:
    store = warm(tmp_path, OsIO())
    with FileStore(tmp_path) as other:
        other.delete("a")
        other.write("a", entries(0, 1), snapshot(turn=9), create=True)
    with pytest.raises(ValueError, match="expected seq 1 next, got seq 12"):
        store.write("a", entries(12, 1), None)
    store.write("a", entries(1, 1), None)
    store.close()
    assert FileStore(tmp_path).read("a") == Record(entries(0, 2), snapshot(turn=9))


def test_a_lease_taken_by_another_process_refuses_the_next_steady_append(tmp_path: Path) -> None:
    store = warm(tmp_path, OsIO())
    run(
        """
        import sys
        from datetime import timedelta
        from statekeep import FileStore
        with FileStore(sys.argv[1]) as other:
            other.acquire("a", owner="elsewhere", ttl=timedelta(hours=1))
        """,
        str(tmp_path),
    )
    with pytest.raises(LeaseHeldError):
        store.write("a", entries(12, 1), None)
    store.close()
    assert FileStore(tmp_path).read("a").entries == entries(0, 12)


def test_a_rekey_between_two_steady_appends(tmp_path: Path) -> None:
    keys = {"k1": bytes(range(32)), "k2": bytes(range(32, 64))}
    store = FileStore(tmp_path, encrypt=Keyring(keys, current="k1"))
    store.write("a", entries(0, 3), snapshot(), create=True)
    store.write("a", entries(3, 3), snapshot(turn=1))  # steady from here on
    old = (tmp_path / "a" / "log.jsonl").stat().st_ino
    with FileStore(tmp_path, encrypt=Keyring(keys, current="k2")) as other:
        assert sk.rekey(other).records > 0  # the log replaced whole
    assert (tmp_path / "a" / "log.jsonl").stat().st_ino != old
    store.write("a", entries(6, 1), None)  # into the new log
    store.close()
    with FileStore(tmp_path, encrypt=Keyring(keys, current="k2")) as again:
        assert again.read("a") == Record(entries(0, 7), snapshot(turn=1))


def test_a_forked_child_appends_between_two_steady_appends(tmp_path: Path) -> None:
    store = warm(tmp_path, OsIO())
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            store.write("a", entries(12, 2), None)  # its own descriptors, its own lock
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with pytest.raises(ValueError, match="expected seq 14 next, got seq 16"):
        store.write("a", entries(16, 1), None)
    with pytest.raises(StateConflictError, match="different entry at seq 13"):
        store.write("a", [{"seq": 13, "other": True}], None)
    store.write("a", entries(14, 1), None)
    store.close()
    assert FileStore(tmp_path).read("a").entries == entries(0, 15)


def test_an_append_after_close_is_refused_and_a_new_store_goes_on(tmp_path: Path) -> None:
    store = warm(tmp_path, OsIO())
    store.close()
    with pytest.raises(RuntimeError):
        store.write("a", entries(12, 1), None)
    with FileStore(tmp_path) as again:
        again.write("a", entries(12, 1), None)
    assert FileStore(tmp_path).read("a").entries == entries(0, 13)


def test_a_small_read_and_a_listing_page_make_few_system_calls(tmp_path: Path) -> None:
    io = CountingIO()
    store = FileStore(tmp_path, io=io)
    for n in range(50):
        store.write(f"s{n:02d}", entries(0, 10), snapshot(turn=n), create=True)
    store.close()
    store = FileStore(tmp_path, io=io)
    assert store.read("s07") == Record(entries(0, 10), snapshot(turn=7))  # the folder checked once
    io.take()
    assert store.read("s07") == Record(entries(0, 10), snapshot(turn=7))
    read = io.take()
    # The store's folder and the State's (opened and checked), the log's name, the copy
    # and the log (each opened, checked, read in one call, closed).
    assert read.total() <= 15, dict(read)
    assert read["read"] == 2
    page = store.list(limit=50)
    listing = io.take()
    assert sorted(r.id for r in page) == [f"s{n:02d}" for n in range(50)]
    # Per row: the State's folder looked at, its copy (opened, checked, read, closed), its
    # log's size; then the store's folder once (scandir's own calls are not counted).
    assert listing.total() <= 6 * 50 + 3, dict(listing)
    store.close()


def test_a_snapshot_only_write_is_steady_too(tmp_path: Path, no_copy_refresh: None) -> None:
    io = CountingIO()
    store = warm(tmp_path, io)
    io.take()
    store.write("a", [], snapshot(turn=9))
    calls = io.take()
    assert calls.total() <= STEADY_BOUND and calls["write"] == 1, dict(calls)
    store.write("a", entries(12, 1), None)
    store.close()
    assert FileStore(tmp_path).read("a") == Record(entries(0, 13), snapshot(turn=9))


def test_a_delete_and_create_by_the_same_store_between_two_steady_appends(tmp_path: Path) -> None:
    io = CountingIO()
    store = warm(tmp_path, io)
    store.delete("a")
    with pytest.raises(StateNotFoundError):
        store.write("a", entries(12, 1), None)
    store.write("a", entries(0, 1), snapshot(turn=7), create=True)
    for seq in range(1, 4):
        store.write("a", entries(seq, 1), None)
    io.take()
    store.write("a", entries(4, 1), None)
    assert io.take().total() <= STEADY_BOUND  # steady again, on the new log
    store.close()
    assert FileStore(tmp_path).read("a") == Record(entries(0, 5), snapshot(turn=7))
