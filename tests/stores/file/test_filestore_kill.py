"""SIGKILL, many times, mostly in the middle of a write: writer processes (tests/support/children/kill_child.py)
append entries of a few bytes to several MB, with snapshots, to a FileStore through its
public API, and this test kills them with SIGKILL at least :data:`KILLS` times. For part of
the run two processes write the same State at once.

Where a kill lands is steered without waiting on time: each writer announces every step of
its I/O (its seam's writes are short, :data:`kill_child.CHUNK` bytes at most) before doing
it, and the test kills it either when it stops before a chosen step (``paused``: it waits
for the kill) or right after a chosen message while it runs on (``race``: the kill lands
somewhere later). The last message a dead writer sent tells where it died: in a write,
with its I/O under way or not yet, or between writes.

After each kill a fresh store in this process checks, through the public API only (the
log's format is the store's business): the entries are dense, each exactly as some writer
wrote it, every acknowledged write is there whole; the snapshot is the one written with
the last acknowledged write that carried one, or with a later write whose entries are
there whole (a write may keep the stored snapshot: ``None``); the next
writer continues from what ``read`` returns (it says ``ready N``), and so does a plain
write from this process. The seed is printed: STATEKEEP_KILL_SEED=... replays the same plan
(where the race kills land still varies).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore
from tests.support.children import kill_child
from tests.support.children.kill_child import planned

KILLS = 200
#: Is each write all or nothing after a kill, snapshot included? Not with the log format of
#: 0.x: some entries of a killed write can survive without the rest, or all of them without
#: its snapshot (the test counts both). A format whose writes end with a closing record
#: makes this True.
ATOMIC_WRITES = True
STATE_BYTES = 12_000_000  # then a new State: every check reads the whole State
TIMEOUT = 60.0  # a watchdog against a hung writer, never reached when things work


@pytest.fixture(scope="module")
def forkserver() -> ForkServerContext:
    """Writers are forked from a server that has statekeep imported: a real process per
    kill without a Python start-up each."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["statekeep", "tests.support.children.kill_child"])
    return ctx


@dataclass
class Writer:
    proc: BaseProcess
    conn: Connection
    tag: str
    said: list[str] = field(default_factory=list)

    @classmethod
    def start(
        cls, ctx: ForkServerContext, root: Path, sid: str, seed: int, tag: str, pause_at: int | None
    ) -> Writer:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(
            target=kill_child.writer, args=(theirs, str(root), sid, seed, tag, pause_at), daemon=True
        )
        proc.start()
        theirs.close()
        return cls(proc, ours, tag)

    def receive(self) -> str:
        """The writer's next message (it is alive: it only dies by our kill)."""
        if not self.conn.poll(TIMEOUT):
            self.proc.kill()
            pytest.fail(f"writer {self.tag} said nothing for {TIMEOUT}s after {self.said[-5:]}")
        try:
            line = self.conn.recv_bytes().decode()
        except EOFError:
            pytest.fail(f"writer {self.tag} died on its own (exit {self.proc.exitcode}): {self.said[-5:]}")
        if line.startswith("error "):
            pytest.fail(f"writer {self.tag} failed:\n{line[6:]}")
        self.said.append(line)
        return line

    def kill(self) -> str:
        """SIGKILL it, read what it said before dying, and tell where it died."""
        os.kill(self.proc.pid or 0, signal.SIGKILL)
        self.proc.join(TIMEOUT)
        while self.conn.poll():
            try:
                self.said.append(self.conn.recv_bytes().decode())
            except EOFError:
                break
        self.conn.close()
        assert self.proc.exitcode == -signal.SIGKILL, (self.tag, self.proc.exitcode, self.said[-3:])
        assert not any(line.startswith("error ") for line in self.said), self.said[-1]
        return where(self.said)

    def acks(self) -> list[tuple[str, int, int]]:
        """(tag, first seq, count) of every write that returned."""
        acks = [line.split() for line in self.said if line.startswith("ack ")]
        return [(self.tag, int(first), int(count)) for _, first, count in acks]


def where(said: list[str]) -> str:
    """Where a writer died, from what it said last: 'mid-I/O' (in a write whose I/O had
    begun), 'before I/O' (in a write, e.g. waiting for the other writer's lock), or
    'between writes'."""
    last = said[-1] if said else "ready"
    if last.startswith("start "):
        return "before I/O"
    if last.startswith(("io ", "paused")):
        opened = max((i for i, line in enumerate(said) if line.startswith("start ")), default=-1)
        closed = max((i for i, line in enumerate(said) if line.startswith(("ack ", "conflict"))), default=-1)
        return "mid-I/O" if opened > closed else "between writes"
    return "between writes"


@dataclass
class Checked:
    count: int  # entries
    size: int  # their data, in characters
    partial: frozenset[tuple[str, int]] = frozenset()  # writes (tag, first seq) only partly there
    stale: bool = False  # the snapshot is older than the last whole write that had one


def check(root: Path, sid: str, seed: int, tags: set[str], acked: set[tuple[str, int, int]]) -> Checked:
    """What a fresh store reads of ``sid`` after a kill (see the module docstring)."""
    with FileStore(root) as store:
        record = store.read(sid)
        listed = {saved.id for saved in store.list()}
    if record is None:
        assert not acked, f"State {sid} is gone, but writes were acknowledged: {sorted(acked)[:3]}"
        assert sid not in listed
        return Checked(0, 0)
    assert sid in listed
    groups: list[list[Any]] = []  # [tag, first, entries there, entries written] per write
    size = 0
    for seq, entry in enumerate(record.entries):
        tag, first, index, count = entry["w"]
        assert entry["seq"] == seq == first + index, f"{sid}: seq {seq} holds {entry['w']}"
        assert tag in tags, f"{sid}: seq {seq} was written by {tag!r}, who never wrote to it"
        assert entry == planned(seed, tag, first).entries[index], f"{sid}: entry {seq} differs"
        if index == 0:
            groups.append([tag, first, 1, count])
        else:
            assert groups and groups[-1][:3] == [tag, first, index], f"{sid}: seq {seq} {entry['w']}"
            groups[-1][2] = index + 1
        size += len(entry["data"])
    whole = {(tag, first) for tag, first, there, count in groups if there == count}
    missing = sorted(w for w in acked if w[:2] not in whole)
    assert not missing, f"{sid}: acknowledged writes lost: {missing}"
    acked_end = max((first + count - 1 for _, first, count in acked), default=-1)
    assert len(record.entries) > acked_end, (
        f"{sid}: {len(record.entries)} entries, seq {acked_end} acknowledged"
    )
    snap = record.snapshot
    assert snap is not None, f"{sid}: no snapshot, but the create carried one"
    tag, first, count = snap["w"]
    assert (tag, first) in whole and snap == planned(seed, tag, first).snapshot, (
        f"{sid}: snapshot {snap['w']}"
    )
    # The last acknowledged write's snapshot, or (if it kept the stored one) that of the last
    # acknowledged write before it that had one; a later one is fine too.
    floor = max((f + c - 1 for t, f, c in acked if planned(seed, t, f).snapshot is not None), default=-1)
    assert snap["last_seq"] >= floor, f"{sid}: snapshot of seq {snap['last_seq']}, older than {floor}"
    # Stale: a whole write with a snapshot, later than the one read, was never acknowledged
    # and its snapshot did not survive, while its entries did.
    newest = max(
        (f + c - 1 for t, f, _, c in groups if (t, f) in whole and planned(seed, t, f).snapshot), default=-1
    )
    partial = frozenset((t, f) for t, f, there, count in groups if there != count)
    stale = snap["last_seq"] < newest
    if ATOMIC_WRITES:
        assert not partial and not stale, f"{sid}: {partial} writes partly there, snapshot stale: {stale}"
    return Checked(len(record.entries), size, partial, stale)


def plain_write(root: Path, sid: str, seed: int, at: Checked) -> tuple[str, int, int]:
    """This process continues the State from what read returned."""
    write = planned(seed, "parent", at.count)
    with FileStore(root) as store:
        store.write(sid, write.entries, write.snapshot, create=at.count == 0)
    return ("parent", at.count, len(write.entries))


@dataclass
class Plan:
    """When the victim dies: as it stops before I/O step ``pause_at`` of its writes
    ('paused'), or ``after`` messages after its ``starts``-th write began, while it runs
    on ('race': the kill lands wherever it has got to by then)."""

    kind: str
    pause_at: int | None
    starts: int
    after: int

    @classmethod
    def draw(cls, rng: random.Random) -> Plan:
        kind = rng.choice(("paused", "race"))
        pause_at = rng.choice((rng.randint(0, 3), rng.randint(0, 15), rng.randint(0, 60)))
        return cls(kind, pause_at if kind == "paused" else None, rng.randint(1, 2), rng.randint(0, 8))

    def due(self, line: str) -> bool:
        """Is the victim to be killed now that it said ``line``?"""
        if self.kind == "paused":
            return line == "paused"
        if self.starts > 0:
            self.starts -= line.startswith("start ")
            return self.starts == 0 and self.after == 0
        self.after -= 1
        return self.after <= 0


def drive(writers: list[Writer], victim: Writer, plan: Plan, count: int) -> None:
    """Read what the writers say until the plan says to kill the victim."""
    while True:
        ready = wait([w.conn for w in writers], TIMEOUT)
        assert ready, f"no writer said anything for {TIMEOUT}s"
        for writer in writers:
            if writer.conn not in ready:
                continue
            line = writer.receive()
            if line.startswith("ready ") and len(writer.said) == 1:
                # What a writer resumes from is what read returned: the State as checked,
                # or more if the other writer has written since.
                resumed = int(line.split()[1])
                assert resumed == count or (resumed > count and len(writers) == 2), (writer.tag, line, count)
            if writer is victim and plan.due(line):
                return


def seed_from_env() -> int:
    return int(os.environ.get("STATEKEEP_KILL_SEED") or random.SystemRandom().randrange(2**32))


def test_sigkill_mostly_mid_write_keeps_every_acknowledged_write(
    tmp_path: Path, forkserver: ForkServerContext
) -> None:
    seed = seed_from_env()
    print(f"STATEKEEP_KILL_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    landed: Counter[str] = Counter()
    plans: Counter[str] = Counter()
    states, stale, conflicts, rounds = 0, 0, 0, 0
    partial: set[tuple[str, str, int]] = set()
    sid, tags, acked, at = "s0", {"parent"}, set[tuple[str, int, int]](), Checked(0, 0)
    while sum(landed.values()) < KILLS:
        rounds += 1
        two = rounds % 3 == 0  # every third round, two writers race for the same State
        names = [f"r{rounds}a", f"r{rounds}b"][: 2 if two else 1]
        tags.update(names)
        plan = Plan.draw(rng)
        victim_index = rng.randrange(len(names))
        writers = [
            Writer.start(forkserver, root, sid, seed, name, plan.pause_at if i == victim_index else None)
            for i, name in enumerate(names)
        ]
        victim = writers[victim_index]
        drive(writers, victim, plan, at.count)
        plans[plan.kind] += 1
        for writer in [victim, *(w for w in writers if w is not victim)]:
            landed[writer.kill()] += 1
            acked.update(writer.acks())
            conflicts += writer.said.count("conflict")
        at = check(root, sid, seed, tags, acked)
        partial |= {(sid, *w) for w in at.partial}
        stale += at.stale
        if at.size > STATE_BYTES:  # this process continues it once, then a new State
            acked.add(plain_write(root, sid, seed, at))
            check(root, sid, seed, tags, acked)
            states += 1
            sid, acked, at = f"s{states}", set(), Checked(0, 0)
    acked.add(plain_write(root, sid, seed, at))
    final = check(root, sid, seed, tags, acked)
    total = sum(landed.values())
    print(
        f"{total} kills in {rounds} rounds ({plans['paused']} paused, {plans['race']} raced): "
        f"{landed['mid-I/O']} mid-I/O, {landed['before I/O']} in a write before its I/O, "
        f"{landed['between writes']} between writes; {states + 1} States, {conflicts} conflicts "
        f"between two writers, {len(partial)} writes seen partly applied, {stale} checks saw a stale snapshot, last State {final.count} entries"
    )
    assert total >= KILLS
    assert landed["mid-I/O"] > total / 2, landed
    assert conflicts > 0, "the two writers never met on one seq"
