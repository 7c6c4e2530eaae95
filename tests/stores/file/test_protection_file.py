"""FileStore with redaction, encryption at rest and fenced leases, checked in its real files.

The grep tests read every byte under the store's folder; the tamper and swap tests rewrite
a log as an attacker who can write the files would: with its line checksums made right
again (a changed byte alone is caught by the checksum first: CorruptStateError), so what
catches the change is the seal.
"""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

import statekeep as sk
from statekeep import DecryptionError, FileStore, Keyring, LeaseHeldError, Redactor, StaleLeaseError
from statekeep._protect.sealing import open_entry, open_snapshot, seal_entry, seal_snapshot
from statekeep._runtime.bridge import run_sync
from statekeep.stores._file.logformat import closing_record, frame, scan_log
from tests.support import REPO

pytest.importorskip("cryptography")

SECRET = "hunter2-Sup3rSecret"
MARK = "zebra-marker-7f3a"  # plaintext that must never reach the files of a sealed store
K1, K2 = bytes(range(32)), bytes(range(32, 64))  # fixed: the killed child process uses them too

Change = Callable[
    [list[dict[str, Any]], dict[str, Any] | None], tuple[list[dict[str, Any]], dict[str, Any] | None]
]


def raw_bytes(folder: Path) -> bytes:
    """Every file under the store's folder, concatenated."""
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def marked_state(sid: str, text: str, task: str | None = None) -> sk.State:
    state = sk.State(f"task {text}" if task is None else task, id=sid)
    state.add_user(f"my password is {text}, keep it")
    state.set_data("note", {"value": text, "n": 1})
    return state


def rewrite(folder: Path, sid: str, change: Change) -> None:
    """Rewrite a State's log with ``change`` applied, its framing made valid again."""
    log = folder / sid / "log.jsonl"
    scan = scan_log(log.read_bytes())
    entries, snapshot = change(scan.entries, scan.snapshot)
    lines = b"".join(frame(orjson.dumps(e) + b"\n") for e in entries)
    encoded = None if snapshot is None else orjson.dumps(snapshot)
    log.write_bytes(lines + closing_record(len(entries), lines, encoded, None, scan.incarnation))
    (folder / sid / "snapshot.json").unlink(missing_ok=True)


def flip(sealed: str) -> str:
    """A sealed value with one bit of its ciphertext changed."""
    kid, _, b64 = sealed.partition(":")
    raw = bytearray(base64.b64decode(b64))
    raw[len(raw) // 2] ^= 0x01
    return f"{kid}:{base64.b64encode(bytes(raw)).decode()}"


# -- what reaches the files ----------------------------------------------------------


def test_redacted_store_keeps_no_secret_in_its_files(tmp_path: Path) -> None:
    clear, masked = tmp_path / "clear", tmp_path / "masked"
    FileStore(clear).save(marked_state("a", SECRET))
    store = FileStore(masked, redact=Redactor(values=[SECRET]))
    state = marked_state("a", SECRET, task="a task")  # the task is a listing field: kept as is
    store.save(state)
    store.save(state)  # saved again after no change: still skipped as identical
    store.write("w", [{"seq": 0, "text": SECRET}], {"task": "t", "note": f"is {SECRET}"}, create=True)
    store.close()
    assert SECRET.encode() in raw_bytes(clear)  # the grep can find it
    assert SECRET.encode() not in raw_bytes(masked)
    assert b"[REDACTED]" in raw_bytes(masked)
    assert SECRET in state.history[1]["text"]  # the live State is unchanged


def test_sealed_store_keeps_no_plaintext_in_its_files(tmp_path: Path) -> None:
    clear, sealed = tmp_path / "clear", tmp_path / "sealed"
    FileStore(clear).save(marked_state("a", MARK))
    store = FileStore(sealed, encrypt=Keyring({"k1": K1}, current="k1"))
    for i in range(3):
        state = marked_state(f"s{i}", MARK)
        store.save(state)
        state.add_user(f"more {MARK}")
        store.save(state)
    lease = store.acquire("s0", "worker-1", 30)
    store.save(store.load("s0"), lease=lease)
    store.fork("s2", new_id="f", lease=None)  # re-sealed for its new place, by the client
    store.close()
    assert MARK.encode() in raw_bytes(clear)
    assert MARK.encode() not in raw_bytes(sealed)
    assert b'"sk.sealed":"k1:' in raw_bytes(sealed)
    reopened = FileStore(sealed, encrypt=Keyring({"k1": K1}, current="k1"))
    assert reopened.load("s1").history[-1]["text"] == f"more {MARK}"
    assert [row.task for row in reopened.list()] == [f"task {MARK}"] * 4
    assert reopened.load("f").history == reopened.load("s2").history


def test_sealed_entries_go_through_range_reads_and_recovery(tmp_path: Path) -> None:
    ring = Keyring({"k1": K1}, current="k1")
    store = FileStore(tmp_path, encrypt=ring)
    store.write("a", [{"seq": 0, "text": MARK}], {"task": "t"}, create=True)
    for seq in range(1, 40):
        store.write("a", [{"seq": seq, "text": f"{MARK} {seq}"}], {"task": "t", "turn": seq})
    store.close()
    log = tmp_path / "a" / "log.jsonl"
    with log.open("ab") as f:  # a writer killed in its append: half a line
        f.write(log.read_bytes().splitlines(keepends=True)[2][:30])
    fresh = FileStore(tmp_path, encrypt=ring)
    tail = fresh.read("a", since=35)  # read back from the log's end
    assert tail is not None and [e["text"] for e in tail.entries] == [f"{MARK} {s}" for s in range(35, 40)]
    fresh.write("a", [{"seq": 40, "text": "after"}], None)  # cuts the torn line first
    whole = FileStore(tmp_path, encrypt=ring).read("a")
    assert whole is not None and len(whole.entries) == 41 and whole.snapshot is not None
    assert whole.snapshot["turn"] == 39 and MARK.encode() not in log.read_bytes()


# -- tampering, swapping, rotation ---------------------------------------------------


def test_a_changed_byte_is_detected(tmp_path: Path) -> None:
    ring = Keyring({"k1": K1}, current="k1")
    FileStore(tmp_path, encrypt=ring).save(marked_state("a", MARK))

    def tamper(entries: list[dict[str, Any]], snapshot: Any) -> tuple[list[dict[str, Any]], Any]:
        entries[1]["sk.sealed"] = flip(entries[1]["sk.sealed"])
        return entries, snapshot

    rewrite(tmp_path, "a", tamper)
    with pytest.raises(DecryptionError, match=r"'a'.*'k1'|'k1'.*'a'"):
        FileStore(tmp_path, encrypt=ring).read("a")


def test_a_changed_snapshot_byte_is_detected(tmp_path: Path) -> None:
    ring = Keyring({"k1": K1}, current="k1")
    FileStore(tmp_path, encrypt=ring).save(marked_state("a", MARK))

    def tamper(entries: list[dict[str, Any]], snapshot: Any) -> tuple[list[dict[str, Any]], Any]:
        snapshot["sk.sealed"] = flip(snapshot["sk.sealed"])
        return entries, snapshot

    rewrite(tmp_path, "a", tamper)
    with pytest.raises(DecryptionError, match="'a'"):
        FileStore(tmp_path, encrypt=ring).load("a")


def test_a_changed_byte_without_its_checksum_is_damage(tmp_path: Path) -> None:
    ring = Keyring({"k1": K1}, current="k1")
    store = FileStore(tmp_path, encrypt=ring)
    store.save(marked_state("a", MARK))
    store.save(marked_state("b", MARK))  # a complete write after the damaged one
    log = tmp_path / "a" / "log.jsonl"
    data = bytearray(log.read_bytes())
    at = data.index(b"k1:") + 10
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    log.write_bytes(bytes(data) + log.read_bytes())  # and a complete write after it
    with pytest.raises((sk.CorruptStateError, DecryptionError)):
        FileStore(tmp_path, encrypt=ring).read("a")


def test_a_record_swapped_between_states_or_seqs_is_detected(tmp_path: Path) -> None:
    ring = Keyring({"k1": K1}, current="k1")
    store = FileStore(tmp_path, encrypt=ring)
    store.save(marked_state("a", "one"))
    store.save(marked_state("b", "two"))
    stolen = scan_log((tmp_path / "a" / "log.jsonl").read_bytes()).entries[1]

    def put(entries: list[dict[str, Any]], snapshot: Any) -> tuple[list[dict[str, Any]], Any]:
        entries[1] = stolen
        return entries, snapshot

    rewrite(tmp_path, "b", put)
    with pytest.raises(DecryptionError, match="'b'"):
        FileStore(tmp_path, encrypt=ring).read("b")

    def swap(entries: list[dict[str, Any]], snapshot: Any) -> tuple[list[dict[str, Any]], Any]:
        entries[0]["sk.sealed"], entries[1]["sk.sealed"] = entries[1]["sk.sealed"], entries[0]["sk.sealed"]
        return entries, snapshot

    rewrite(tmp_path, "a", swap)
    with pytest.raises(DecryptionError, match="'a'"):
        FileStore(tmp_path, encrypt=ring).read("a")


def test_rotation_keeps_everything_readable(tmp_path: Path) -> None:
    state = marked_state("a", MARK)
    FileStore(tmp_path, encrypt=Keyring({"k1": K1}, current="k1")).save(state)
    rotated = FileStore(tmp_path, encrypt=Keyring({"k2": K2, "k1": K1}, current="k2"))
    loaded = rotated.load("a")
    loaded.add_user(f"after rotation {MARK}")
    rotated.save(loaded)
    rotated.close()
    log = (tmp_path / "a" / "log.jsonl").read_bytes()
    assert b'"k1:' in log and b'"k2:' in log
    again = FileStore(tmp_path, encrypt=Keyring({"k2": K2, "k1": K1}, current="k2")).load("a")
    assert again.history == loaded.history
    assert again.task == f"task {MARK}"
    with pytest.raises(DecryptionError, match="'k1'"):
        FileStore(tmp_path, encrypt=Keyring({"k2": K2}, current="k2")).load("a")


def test_plaintext_and_sealed_states_are_refused_where_they_do_not_belong(tmp_path: Path) -> None:
    FileStore(tmp_path).save(marked_state("plain", MARK))
    ring = Keyring({"k1": K1}, current="k1")
    with pytest.raises(DecryptionError, match=r"'plain'.*plaintext"):
        FileStore(tmp_path, encrypt=ring).read("plain")
    lenient = FileStore(tmp_path, encrypt=ring, allow_plaintext=True)
    assert lenient.load("plain").task == f"task {MARK}"
    lenient.save(marked_state("sealed", MARK))
    with pytest.raises(DecryptionError, match=r"'sealed'.*'k1'"):
        FileStore(tmp_path).read("sealed")
    opened = sk.open_store(str(tmp_path), encrypt=ring)  # options reach the constructor
    assert opened.load("sealed").task == f"task {MARK}"


# -- leases --------------------------------------------------------------------------


class Clock:
    """A clock the test moves: both stores of a test judge leases by it."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def waiting_for_flock(path: Path) -> bool:
    """Does some process wait for a flock on ``path`` (Linux: a ``->`` line of /proc/locks)?"""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return any("->" in line and f":{ino} " in line for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
def test_the_fence_is_judged_under_the_states_lock(tmp_path: Path) -> None:
    clock = Clock()
    worker = FileStore(tmp_path, clock=clock)
    worker.write("a", [{"seq": 0}], {"task": "t"}, create=True)
    lease = worker.acquire("a", "worker-1", 10)
    folder = os.open(tmp_path / "a", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(folder, fcntl.LOCK_EX)  # another process is in the middle of an append
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            worker.write("a", [{"seq": 1, "by": "stale"}], None, lease=lease)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    while not waiting_for_flock(tmp_path / "a"):
        thread.join(0.01)  # the write waits for the lock; poll until it does
    clock.now += timedelta(seconds=11)  # meanwhile its lease ends
    fcntl.flock(folder, fcntl.LOCK_UN)
    os.close(folder)
    thread.join()
    assert isinstance(outcome[0], StaleLeaseError)
    record = FileStore(tmp_path, clock=clock).read("a")
    assert record is not None and record.entries == [{"seq": 0}]


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
def test_a_create_judges_the_fence_as_it_puts_the_state_in_place(tmp_path: Path) -> None:
    clock = Clock()
    worker = FileStore(tmp_path, clock=clock)
    worker.save(sk.State("other", id="other"))  # the store folder is made and marked
    lease = worker.acquire("new", "worker-1", 10)  # a State that does not exist yet
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(folder, fcntl.LOCK_EX)  # as an acquire of an id with no State holds it
    outcome: list[BaseException | None] = []

    def create() -> None:
        try:
            worker.write("new", [{"seq": 0}], {"task": "t"}, create=True, lease=lease)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=create)
    thread.start()
    while not waiting_for_flock(tmp_path):
        thread.join(0.01)
    clock.now += timedelta(seconds=11)
    fcntl.flock(folder, fcntl.LOCK_UN)
    os.close(folder)
    thread.join()
    assert isinstance(outcome[0], StaleLeaseError)
    assert FileStore(tmp_path, clock=clock).read("new") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [".leases", ".statekeep-store", "other"]


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "stale-lease"])
def test_an_acquire_waits_for_a_create_over_an_expired_state(tmp_path: Path, leased: bool) -> None:
    # A create over an expired State checks the fence, then renames the old State away and
    # its own into place. An acquire of that id (its folder exists: expired, not gone) must
    # wait for it: else the create lands while another worker holds a fresh lease.
    clock = Clock()
    creator = FileStore(tmp_path, clock=clock, retention=timedelta(seconds=10))
    creator.write("a", [{"seq": 0, "by": "old"}], {"task": "old"}, create=True)
    clock.now += timedelta(seconds=20)  # the State is expired; its folder is still there
    assert creator.read("a") is None
    lease = creator.acquire("a", "worker-1", 5) if leased else None
    taken: list[str] = []

    def acquire() -> None:  # in another process: this one's I/O worker is busy with the create
        child = f"""
from datetime import datetime
import statekeep as sk
store = sk.FileStore({str(tmp_path)!r}, clock=lambda: datetime.fromisoformat({clock.now.isoformat()!r}))
print(store.acquire("a", "worker-2", 60).token)
"""
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
        taken.append(done.stdout.strip() or done.stderr)

    thread = threading.Thread(target=acquire)
    fence = creator._fence
    checks: list[bool] = []

    def held_after_fence(sid: str, lease: sk.Lease | None, doing: str, root: int) -> bool:
        refused = fence(sid, lease, doing, root)
        checks.append(thread.is_alive())
        if len(checks) == 2:  # the check atomic with the rename: it passed, not renamed yet
            if leased:
                clock.now += timedelta(seconds=6)  # worker-1's lease ends: worker-2 takes over
            thread.start()
            while thread.is_alive() and not waiting_for_flock(tmp_path):
                thread.join(0.01)  # poll until the acquire is done or waits for the create
            checks.append(thread.is_alive())
        return refused

    creator._fence = held_after_fence  # type: ignore[method-assign]
    creator.write("a", [{"seq": 0, "by": "new"}], {"task": "new"}, create=True, lease=lease)
    thread.join()
    assert checks == [False, False, True], "a lease was taken between the create's fence and its rename"
    assert taken == [str(2 if leased else 1)]
    record = FileStore(tmp_path, clock=clock).read("a")
    assert record is not None and record.entries == [{"seq": 0, "by": "new"}]
    held = creator.current_lease("a")
    assert held is not None and (held.owner, held.token) == ("worker-2", 2 if leased else 1)


def test_a_stale_worker_is_refused_and_nothing_of_it_lands(tmp_path: Path) -> None:
    clock = Clock()
    old, new = FileStore(tmp_path, clock=clock), FileStore(tmp_path, clock=clock)
    old.write("a", [{"seq": 0}], {"task": "t"}, create=True)
    stale = old.acquire("a", "worker-1", 5)
    old.write("a", [{"seq": 1, "by": 1}], None, lease=stale)
    clock.now += timedelta(seconds=6)
    assert new.current_lease("a") is None
    taken = new.acquire("a", "worker-2", 5)
    assert taken.token == stale.token + 1
    with pytest.raises(StaleLeaseError, match="worker-2"):
        old.write("a", [{"seq": 2, "by": 1}], {"task": "stale"}, lease=stale)
    with pytest.raises(StaleLeaseError):
        old.renew(stale)
    with pytest.raises(StaleLeaseError):
        old.delete("a", lease=stale)
    with pytest.raises(LeaseHeldError, match="worker-2"):
        old.write("a", [{"seq": 2, "by": 1}], None)
    with pytest.raises(LeaseHeldError, match="worker-2"):
        old.delete("a")
    with pytest.raises(LeaseHeldError):
        old.acquire("a", "worker-1", 5)
    new.write("a", [{"seq": 2, "by": 2}], {"task": "new"}, lease=taken)
    record = FileStore(tmp_path).read("a")
    assert record is not None and record.entries[2] == {"seq": 2, "by": 2}
    assert record.snapshot == {"task": "new"}
    old.release(stale)  # not current: a no-op
    assert new.current_lease("a") == taken


def test_a_fenced_out_write_fails_alone_in_its_group_commit(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path, clock=clock)
    for sid in ("a", "b", "c"):
        store.write(sid, [{"seq": 0}], {"task": sid}, create=True)
    stale = store.acquire("b", "worker-1", 5)
    clock.now += timedelta(seconds=6)
    held = store.acquire("c", "worker-2", 5)
    batch = [
        store._prepared("a", [{"seq": 1}], None, False, None),
        store._prepared("b", [{"seq": 1}], None, False, stale),
        store._prepared("c", [{"seq": 1}], None, False, None),
    ]
    errors = store._commit(batch)  # one group commit, as concurrent writes share one
    assert errors[0] is None
    assert isinstance(errors[1], StaleLeaseError) and isinstance(errors[2], LeaseHeldError)
    fresh = FileStore(tmp_path, clock=clock)
    assert [len(fresh.read(sid).entries) for sid in ("a", "b", "c")] == [2, 1, 1]  # type: ignore[union-attr]
    store.release(held)


def test_a_stale_worker_in_another_process_is_refused(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("a", [{"seq": 0}], {"task": "t"}, create=True)
    stale = store.acquire("a", "worker-1", 0.05)
    while store.current_lease("a") is not None:  # expiry by the store's own clock
        pass
    child = f"""
import statekeep as sk
store = sk.FileStore({str(tmp_path)!r})
lease = store.acquire("a", "worker-2", 60)
store.write("a", [{{"seq": 1, "by": 2}}], None, lease=lease)
print(lease.token)
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert int(done.stdout) == stale.token + 1
    with pytest.raises(StaleLeaseError, match="worker-2"):
        store.write("a", [{"seq": 1, "by": 1}], None, lease=stale)
    with pytest.raises(LeaseHeldError):
        store.write("a", [{"seq": 2, "by": 1}], None)
    record = store.read("a")
    assert record is not None and record.entries == [{"seq": 0}, {"seq": 1, "by": 2}]


def test_tokens_survive_release_delete_and_reopening(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = store.acquire("a", "w", 60)  # before the State exists
    store.save(sk.State("t", id="a"), lease=first)
    store.release(first)
    assert store.current_lease("a") is None
    second = store.acquire("a", "w", 60)
    store.delete("a", lease=second)
    assert store.read("a") is None and store.current_lease("a") == second
    with pytest.raises(LeaseHeldError):
        store.save(sk.State("again", id="a"))
    store.release(second)
    store.close()
    reopened = FileStore(tmp_path)
    third = reopened.acquire("a", "w", 60)
    assert (first.token, second.token, third.token) == (1, 2, 3)
    reopened.save(sk.State("again", id="a"), lease=third)
    assert reopened.acquire("Other", "w", 60).token == 1
    assert reopened.acquire("other", "w", 60).token == 1  # ids differing in case: rows of their own
    assert sorted(p.name for p in (tmp_path / ".leases").iterdir()) == ["a", "other", "other.1"]
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in (tmp_path / ".leases").iterdir())
    assert [row.id for row in reopened.list()] == ["a"]


def test_gc_leaves_an_expired_state_that_is_leased(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path, clock=clock, retention=timedelta(seconds=10))
    store.save(sk.State("t", id="a"))
    store.save(sk.State("t", id="b"))
    lease = store.acquire("a", "w", 60)
    clock.now += timedelta(seconds=20)
    assert store.gc() == 1  # b only
    assert os.path.isdir(tmp_path / "a") and not os.path.exists(tmp_path / "b")
    store.release(lease)
    assert store.gc() == 1
    assert not os.path.exists(tmp_path / "a")


# -- reseal (the hook ``statekeep rekey`` drives) -------------------------------------


def resealed(
    folder: Path, sid: str, old: Keyring, new: Keyring
) -> tuple[dict[int, tuple[bytes, bytes]], tuple[bytes, bytes]]:
    """Every record of ``sid`` as stored, and sealed again with ``new``'s current key."""
    scan = scan_log((folder / sid / "log.jsonl").read_bytes())
    entries = {}
    for e in scan.entries:
        plain = open_entry(old, e, "default", sid, e["seq"], scan.incarnation)
        line = seal_entry(new, orjson.dumps(plain), plain, "default", sid, scan.incarnation)
        entries[e["seq"]] = (orjson.dumps(e), line.rstrip(b"\n"))
    assert scan.snapshot is not None
    snapshot = (
        orjson.dumps(scan.snapshot),
        seal_snapshot(
            new,
            open_snapshot(old, scan.snapshot, "default", sid, scan.incarnation),
            "default",
            sid,
            scan.incarnation,
        ),
    )
    return entries, snapshot


def reseal(store: FileStore, sid: str, entries: dict[int, tuple[bytes, bytes]], snapshot: Any) -> int:
    return run_sync(store._locked(sid, store._reseal(sid, entries, snapshot)), "areseal")


def test_reseal_replaces_what_is_unchanged_and_nothing_else(tmp_path: Path) -> None:
    k1 = Keyring({"k1": K1}, current="k1")
    both = Keyring({"k2": K2, "k1": K1}, current="k2")
    store = FileStore(tmp_path, encrypt=k1)
    state = marked_state("a", MARK)
    store.save(state)
    state.add_user(f"second write {MARK}")
    store.save(state)
    bystander = FileStore(tmp_path, encrypt=both)  # keeps the old log open after its write
    bystander.save(bystander.load("a"))
    entries, snapshot = resealed(tmp_path, "a", both, both)
    kept = entries[0]
    entries[0] = (orjson.dumps({"seq": 0, "changed": True}), entries[0][1])  # no longer stored
    assert reseal(store, "a", entries, snapshot) == len(entries)  # all but seq 0, and the snapshot
    log = (tmp_path / "a" / "log.jsonl").read_bytes()
    assert log.count(b'"k1:') == 1 and log.count(b'"sk.snapshot"') == 1
    assert FileStore(tmp_path, encrypt=both).load("a").history == state.history
    with pytest.raises(DecryptionError, match="'k1'"):
        FileStore(tmp_path, encrypt=Keyring({"k2": K2}, current="k2")).read("a")
    assert reseal(store, "a", {0: kept}, None) == 1
    assert b"k1:" not in raw_bytes(tmp_path)  # no old snapshot record left behind either
    state.add_user("after the rekey")
    bystander.save(state)  # appends to the new log, not to the one it had open
    again = FileStore(tmp_path, encrypt=Keyring({"k2": K2}, current="k2"))
    assert again.load("a").history == state.history
    assert again.read("a", since=len(state.history) - 1) is not None
    assert reseal(store, "a", {0: kept}, None) == 0  # changed since: refused
    assert reseal(store, "missing", {0: kept}, None) == 0


KILLER = """
import sys
import statekeep as sk
from statekeep._runtime.bridge import run_sync
from tests.stores.file.test_protection_file import K1, K2, resealed
from tests.support.crashpoints import KillingIO

io = KillingIO(int(sys.argv[2]))
both = sk.Keyring({"k2": K2, "k1": K1}, current="k2")
store = sk.FileStore(sys.argv[1], io=io, encrypt=both)
from pathlib import Path
entries, snapshot = resealed(Path(sys.argv[1]), "a", both, both)
io.armed = True
run_sync(store._locked("a", store._reseal("a", entries, snapshot)), "areseal")
print("done")
"""


def test_reseal_killed_at_any_step_leaves_the_old_log_or_the_new(tmp_path: Path) -> None:
    k1 = Keyring({"k1": K1}, current="k1")
    both = Keyring({"k2": K2, "k1": K1}, current="k2")
    state = marked_state("a", MARK)
    FileStore(tmp_path / "seed", encrypt=k1).save(state)
    state.add_user("a second write")
    FileStore(tmp_path / "seed", encrypt=k1).save(state)
    seed = (tmp_path / "seed" / "a" / "log.jsonl").read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    for step in range(100):
        folder = tmp_path / f"run{step}"
        shutil.copytree(tmp_path / "seed", folder)
        child = subprocess.run(
            [sys.executable, "-c", KILLER, str(folder), str(step)], env=env, capture_output=True
        )
        log = (folder / "a" / "log.jsonl").read_bytes()
        if child.returncode == 0:
            assert b'"k1:' not in log
            break
        assert child.returncode == -9, child.stderr.decode()
        assert log == seed or b'"k1:' not in log  # the old log, or the new one whole
        store = FileStore(folder, encrypt=both)
        assert store.load("a").history == state.history
        state_now = store.load("a")
        state_now.add_user("next")
        store.save(state_now)
        store.delete("a")  # a leftover new log does not keep the State from going
    else:
        pytest.fail("the reseal never finished")
    assert step > 5


@pytest.mark.parametrize("since", [0, 5])
def test_a_read_racing_a_reseal_reads_the_new_log(
    tmp_path: Path, since: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeep.stores._file import folder as folder_module
    from statekeep.stores._file import reseal as reseal_module

    both = Keyring({"k2": K2, "k1": K1}, current="k2")
    state = marked_state("a", MARK)
    store = FileStore(tmp_path, encrypt=Keyring({"k1": K1}, current="k1"))
    for i in range(6):
        state.add_user(f"turn {i}")
        store.save(state)  # many snapshot records: the new log is shorter than the old
    store.close()
    entries, snapshot = resealed(tmp_path, "a", both, both)
    reader = FileStore(tmp_path, encrypt=both)
    real = folder_module.StoreFolder.read_file
    raced: list[int] = []

    def read_file(self: Any, folder: int, sid: str, name: str) -> bytes | None:
        data = real(self, folder, sid, name)
        if name == "snapshot.json" and not raced:  # the copy of the old log is read: now the rekey
            raced.append(0)  # (the reseal reads the copy too)
            raced[0] = reseal_module.reseal(FileStore(tmp_path)._folder, {}, "a", entries, snapshot)
        return data

    monkeypatch.setattr(folder_module.StoreFolder, "read_file", read_file)
    record = reader.read("a", since=since)
    assert raced and raced[0] > 0
    assert record is not None and record.entries == state.history[since:]
