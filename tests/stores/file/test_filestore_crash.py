"""SIGKILL crash tests with real processes: a writer (tests/support/children/crash_writer.py) is killed at
random moments, and a fresh FileStore must then hold every acknowledged entry byte for
byte, nothing that was never written, and accept the next write.

The kills are timed by a random delay after a random number of lines from the writer
(acknowledgements, or for a "slow disk" writer the start of a large record); the lines
are read from the writer's stdout and nothing waits on time for correctness. The seed
is printed so that a failure can be replayed: STATEKEEP_CRASH_SEED=... reruns the same
kill schedule and content (the timing still varies).
"""

from __future__ import annotations

import hashlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from statekeep import FileStore
from statekeep.stores._file.logformat import frame
from tests.support.children import crash_writer
from tests.support.children.crash_writer import created_state, entry, snapshot

WRITER = crash_writer.__file__
LINE_TIMEOUT = 60.0  # a watchdog against a hung writer, never reached when things work


def _seed() -> int:
    return int(os.environ.get("STATEKEEP_CRASH_SEED") or random.SystemRandom().randrange(2**32))


@dataclass
class Run:
    """One writer process and what it acknowledged before it died."""

    proc: subprocess.Popen[bytes]
    stderr: IO[bytes]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, tmp_path: Path, *args: str) -> Run:
        stderr = (tmp_path / "writer.stderr").open("w+b")
        proc = subprocess.Popen(
            [sys.executable, WRITER, *args], stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL
        )
        run = cls(proc, stderr)
        threading.Thread(target=run._pump, daemon=True).start()
        return run

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(None)

    def next_line(self) -> str | None:
        """The writer's next line, or None once it is dead and everything was read."""
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            pytest.fail(f"writer printed nothing for {LINE_TIMEOUT}s; stderr:\n{self._stderr()}")
        if line is not None:
            self.seen.append(line)
        return line

    def expect(self, prefix: str) -> str:
        line = self.next_line()
        if line is None or not line.startswith(prefix):
            self.proc.kill()
            self.proc.wait(LINE_TIMEOUT)
            pytest.fail(
                f"writer said {line!r}, expected {prefix!r} (exit {self.proc.returncode}); "
                f"stderr:\n{self._stderr()}"
            )
        return line[len(prefix) :].strip()

    def kill_after(self, lines: int, delay: float, *, mid_record: bool = False) -> list[str]:
        """Wait for ``lines`` more lines (then, if ``mid_record``, for a ``chunk`` line: a
        slow writer is writing a large record), then ``delay`` seconds, then SIGKILL.
        Return every line the writer printed: what it acknowledged before it died."""
        for _ in range(lines):
            if self.next_line() is None:
                break
        while mid_record:
            line = self.next_line()
            if line is None or line.startswith("chunk "):
                break
        time.sleep(delay)  # the random moment of the crash: the point of the test
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(LINE_TIMEOUT)
        while self.next_line() is not None:
            pass
        finished = self.seen and self.seen[-1] == "done"
        if self.proc.returncode != -signal.SIGKILL and not (finished and self.proc.returncode == 0):
            pytest.fail(f"writer failed on its own (exit {self.proc.returncode}); stderr:\n{self._stderr()}")
        self.stderr.close()
        return self.seen

    def _stderr(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def acked(lines: list[str]) -> list[str]:
    return [line.split(" ", 1)[1] for line in lines if line.startswith("ack ")]


def digest(value: dict[str, Any]) -> bytes:
    """The hash of a value's encoding: equal digests mean byte-for-byte equal lines."""
    return hashlib.blake2b(orjson.dumps(value), digest_size=32).digest()


def leftovers(root: Path) -> list[str]:
    """Staging folders (``.creating-*``, ``.deleting-*``) in the store's folder."""
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.name.startswith((".creating-", ".deleting-")))


class Expected:
    """What the append writer writes at each seq (made once per seq, then kept)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._entries: list[dict[str, Any]] = []

    def __getitem__(self, seq: int) -> dict[str, Any]:
        while len(self._entries) <= seq:
            self._entries.append(entry(self.seed, len(self._entries)))
        return self._entries[seq]


def check_appended(root: Path, sid: str, expected: Expected, last_acked: int) -> int:
    """Check the State after a kill with a fresh store; return how many entries it holds."""
    store = FileStore(root, offload=None)  # large records in the log
    record = store.read(sid)
    if record is None:
        assert last_acked < 0, f"State {sid!r} missing although seq {last_acked} was acknowledged"
        assert store.list() == []
        return 0
    ents = record.entries
    assert len(ents) > last_acked, f"acknowledged seq {last_acked} lost: only {len(ents)} entries"
    for seq, ent in enumerate(ents):
        assert type(ent["seq"]) is int and ent["seq"] == seq
        # Acknowledged or not, every entry must be exactly what the writer wrote at that seq
        # (same keys, same strings: equal dicts encode to the same bytes).
        assert ent == expected[seq], f"entry {seq} differs from what was written"
    snap = record.snapshot
    assert snap is not None
    assert last_acked <= snap["last_seq"] < len(ents), (snap["last_seq"], last_acked, len(ents))
    assert snap == snapshot(snap["last_seq"])
    assert [r.id for r in store.list()] == [sid]
    assert leftovers(root) == []
    return len(ents)


def torn(log: Path) -> bool:
    """Does the log end in a partial line (the debris of an interrupted append)?"""
    if not log.exists() or log.stat().st_size == 0:
        return False
    with log.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def kill_schedule(rng: random.Random, max_lines: int, max_delay: float) -> Iterator[tuple[int, float]]:
    """(lines to wait for, then seconds to wait) before each kill."""
    while True:
        yield rng.randint(0, max_lines), rng.uniform(0.0, max_delay)


APPEND_KILLS = 50


def test_sigkill_during_appends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = _seed()
    print(f"STATEKEEP_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root, sid = tmp_path / "store", "run"
    log = root / sid / "log.jsonl"
    expected = Expected(seed)
    count = 0  # entries the State holds now
    last_acked = -1
    torn_tails = {False: 0, True: 0}  # by slow writer or not
    unacked_kept = 0
    # Appends run at 100-200 MB/s here, mostly waiting on fsync, and every writer start and
    # every check reads the whole log: so the kills come soon, after 0-3 lines and 0-10 ms.
    # A 4 MB os.write takes ~2 ms, so few such kills tear a record; every other writer
    # plays a slow disk (see crash_writer) and is killed 0-10 ms after it starts writing
    # a large record, so that torn tails are common whatever the machine's load.
    schedule = kill_schedule(rng, max_lines=3, max_delay=0.01)
    started = time.monotonic()
    for kill in range(APPEND_KILLS):
        slow = kill % 2 == 1
        run = Run.start(tmp_path, "append", str(root), sid, str(seed), *(["slow"] if slow else []))
        # The writer resumes where read() says the history ends.
        assert int(run.expect("ready ")) == count, f"kill {kill}: writer resumed at the wrong seq"
        wait, delay = next(schedule)
        lines = run.kill_after(0, delay, mid_record=True) if slow else run.kill_after(wait, delay)
        seqs = [int(a) for a in acked(lines)]
        assert seqs == sorted(seqs) and all(s > last_acked for s in seqs)
        if seqs:
            last_acked = seqs[-1]
        torn_tails[slow] += torn(log)
        count = check_appended(root, sid, expected, last_acked)
        unacked_kept += count - 1 - last_acked
    elapsed = time.monotonic() - started
    print(
        f"{APPEND_KILLS} kills in {elapsed:.1f}s: {count} entries "
        f"({log.stat().st_size / 1e6:.0f} MB), torn tails: {torn_tails[False]} by plain writers, "
        f"{torn_tails[True]} by slow ones, "
        f"{unacked_kept} unacknowledged entries found complete"
    )
    # After the last kill: this process continues the history, and the torn tail (if
    # any) is cut so the new entry follows the last valid one.
    store = FileStore(root, offload=None)  # large records in the log
    store.write(sid, [entry(seed, count)], snapshot(count))
    assert check_appended(root, sid, expected, count) == count + 1
    # The file itself, byte for byte: one line per entry, each as the writer encoded it
    # (with its checksum), and each write's closing record.
    lines = [line for line in log.read_bytes().splitlines(keepends=True) if not line.startswith(b'{"sk.v":')]
    assert len(lines) == count + 1
    for seq, line in enumerate(lines):
        assert line == frame(orjson.dumps(expected[seq]) + b"\n"), f"entry {seq} of the log"
    # Without torn tails the test would not exercise recovery at all.
    assert torn_tails[True] > 0, "no kill left a torn tail: the test did not exercise recovery"


CREATE_KILLS = 15


def test_sigkill_during_create_leaves_all_or_nothing(tmp_path: Path) -> None:
    seed = _seed()
    print(f"STATEKEEP_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    acknowledged: set[int] = set()
    first = 0  # the first index the next writer creates
    cut_short = unacked_whole = 0
    schedule = kill_schedule(rng, max_lines=2, max_delay=0.03)
    for kill in range(CREATE_KILLS):
        run = Run.start(tmp_path, "create", str(root), str(seed), str(first))
        run.expect("ready")
        wait, delay = next(schedule)
        lines = run.kill_after(wait, delay)
        new = [int(i) for i in acked(lines)]
        assert new == list(range(first, first + len(new)))
        acknowledged.update(new)
        cut_short += any(name.startswith(".creating-") for name in leftovers(root))

        store = FileStore(root)
        store.delete("nobody")  # the first write or delete removes the dead writer's leftovers
        listed = {r.id for r in store.list()}
        assert leftovers(root) == [], f"kill {kill}: staging folders left behind"
        names = {p.name for p in root.iterdir() if not p.name.startswith(".")} if root.exists() else set()
        assert listed == names, "a State folder exists that the listing does not show, or the reverse"
        for i in range(first, first + len(new) + 2):
            sid = f"c{i}"
            record = store.read(sid)
            if record is None:
                assert i not in acknowledged, f"kill {kill}: acknowledged create of {sid} lost"
                assert sid not in listed
                continue
            unacked_whole += i not in acknowledged
            ents, snap = created_state(seed, i)
            assert sid in listed
            assert [digest(e) for e in record.entries] == [digest(e) for e in ents], f"{sid} is half made"
            assert record.snapshot == snap
        existing = [int(n[1:]) for n in names]
        assert sorted(existing) == list(range(len(existing))), "a gap in the created States"
        first = len(existing)
    print(
        f"{CREATE_KILLS} kills: {first} States, {cut_short} creates cut short (staging folder "
        f"removed), {unacked_whole} unacknowledged creates found whole"
    )
    # Creating again after the crashes works, also for an id whose create was cut short.
    store = FileStore(root, offload=None)  # large records in the log
    ents, snap = created_state(seed, first)
    store.write(f"c{first}", ents, snap, create=True)
    assert store.read(f"c{first}").entries == ents


DELETE_KILLS = 12
DELETE_BATCH = 8


def test_sigkill_during_delete_leaves_state_whole_or_gone(tmp_path: Path) -> None:
    seed = _seed()
    print(f"STATEKEEP_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    store = FileStore(root, offload=None)  # large records in the log
    made = 0
    remaining: list[int] = []
    mid_delete = 0
    for kill in range(DELETE_KILLS):
        while len(remaining) < DELETE_BATCH:
            ents, snap = created_state(seed, made)
            store.write(f"c{made}", ents, snap, create=True)
            remaining.append(made)
            made += 1
        run = Run.start(tmp_path, "delete", str(root), *(f"c{i}" for i in remaining))
        run.expect("ready")
        lines = run.kill_after(rng.randint(0, 2), rng.uniform(0.0, 0.02))
        gone = set(acked(lines))
        mid_delete += any(name.startswith(".deleting-") for name in leftovers(root))

        fresh = FileStore(root)
        fresh.delete("nobody")  # the first write or delete removes the dead writer's leftovers
        listed = {r.id for r in fresh.list()}
        assert leftovers(root) == [], f"kill {kill}: a dead writer's delete folder was not removed"
        assert listed == {p.name for p in root.iterdir() if not p.name.startswith(".")}
        still = []
        for i in remaining:
            sid = f"c{i}"
            record = fresh.read(sid)
            if record is None:
                assert sid not in listed
                continue
            assert sid not in gone, f"kill {kill}: {sid} is back after its delete was acknowledged"
            ents, snap = created_state(seed, i)
            assert sid in listed
            assert [digest(e) for e in record.entries] == [digest(e) for e in ents], f"{sid} is half deleted"
            assert record.snapshot == snap
            still.append(i)
        # Deletes run in order: what survives is a suffix of what was asked.
        assert still == remaining[len(remaining) - len(still) :]
        remaining = still
    print(f"{DELETE_KILLS} kills: {made - len(remaining)} deleted, {mid_delete} deletes cut after the rename")
    # The store still works: a deleted id can be created again, the others deleted.
    ents, snap = created_state(seed, 0)
    store.write("c0", ents, snap, create=True)
    for i in remaining:
        store.delete(f"c{i}")
    assert [r.id for r in store.list()] == ["c0"]


def test_writer_entries_are_deterministic_and_of_mixed_size() -> None:
    """The parent recomputes the writer's content, and torn tails need entries of MBs."""
    assert entry(7, 3) == entry(7, 3) and entry(7, 3) != entry(8, 3)
    sizes = [crash_writer.entry_size(1, s) for s in range(200)]
    assert min(sizes) < 1_000 and max(sizes) > 3_000_000
