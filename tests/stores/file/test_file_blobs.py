"""FileStore's blobs (large values stored once, in ``.blobs/``): erasure on the raw bytes, gc
beside a writer in another process, SIGKILL of a writer mid-blob, and a power cut at every
step of blob writes and gc (through the I/O seam, as test_filestore_powerloss.py does)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, Keyring, Record
from statekeep.stores import OsIO
from statekeep.testing import snapshot
from tests.stores.file.test_filestore_crash import Run
from tests.support.children import blob_writer
from tests.support.powerloss import build, crash_points
from tests.support.powerloss_recorder import RecordingIO

WRITER = blob_writer.__file__
BIG = 40_000  # above the default bound (32 KiB)


def raw_bytes(root: Path) -> bytes:
    """Every byte of every file under the store's folder."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def blob_files(root: Path) -> list[str]:
    folder = root / ".blobs"
    return sorted(p.name for p in folder.iterdir() if p.name != "lock") if folder.exists() else []


def start_writer(tmp_path: Path, *args: str) -> Run:
    stderr = (tmp_path / "writer.stderr").open("w+b")
    proc = subprocess.Popen(
        [sys.executable, WRITER, *args], stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL
    )
    run = Run(proc, stderr)
    threading.Thread(target=run._pump, daemon=True).start()
    return run


# -- erasure ------------------------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_delete_and_gc_leave_no_byte_of_the_value(tmp_path: Path, sealed: bool) -> None:
    root = tmp_path / "store"
    ring = Keyring({"k1": bytes(range(32))}, "k1") if sealed else None
    store = FileStore(root, encrypt=ring)
    secret = "SECRET-PAGE-" + "q" * BIG
    kept = "KEPT-PAGE-" + "k" * BIG
    store.write("gone", [{"seq": 0, "kind": "note", "v": secret}], snapshot(), create=True)
    store.write("gone", [{"seq": 1, "kind": "note", "v": secret}], snapshot())  # the same value twice
    store.write("stays", [{"seq": 0, "kind": "note", "v": kept}], snapshot(), create=True)
    assert len(blob_files(root)) == 2
    if not sealed:
        assert b"SECRET-PAGE-" in raw_bytes(root)  # stored once, in its blob
        assert raw_bytes(root).count(b"SECRET-PAGE-") == 1
    store.delete("gone")
    assert len(blob_files(root)) == 2  # until gc
    collected = store.gc()
    assert (collected, collected.blobs) == (0, 1)
    assert blob_files(root) == blob_files(root)[:1]
    if not sealed:
        assert b"SECRET-PAGE-" not in raw_bytes(root)
        assert b"KEPT-PAGE-" in raw_bytes(root)
    assert store.read("stays").entries[0]["v"] == kept
    store.close()


def test_gc_removes_in_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gc removes in rounds (each under the blob lock), and counts every round's."""
    from statekeep.stores._file import blobs

    monkeypatch.setattr(blobs, "BATCH", 2)
    store = FileStore(tmp_path / "store")
    values = [f"{i}-" + "v" * BIG for i in range(5)]
    store.write(
        "gone", [{"seq": i, "kind": "note", "v": v} for i, v in enumerate(values)], snapshot(), create=True
    )
    store.write("kept", [{"seq": 0, "kind": "note", "v": values[0]}], snapshot(), create=True)
    store.delete("gone")
    assert store.gc(dry_run=True).blobs == 4
    collected = store.gc()
    assert (collected.blobs, collected.blob_bytes) == (4, 4 * (BIG + 4))
    assert len(blob_files(tmp_path / "store")) == 1
    assert store.read("kept").entries[0]["v"] == values[0]
    store.close()


def test_blob_names_and_stats(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from statekeep.cli import main

    root = tmp_path / "store"
    store = FileStore(root)
    store.write("a", [{"seq": 0, "kind": "note", "v": "x" * BIG}], snapshot(), create=True)
    store.close()
    result = CliRunner().invoke(main, ["stats", "--store", str(root), "--json", "-q"])
    assert result.exit_code == 0, result.output
    assert '"blobs": 1' in result.output and f'"blob_bytes": {BIG + 2}' in result.output


def test_cli_gc_says_what_blobs_went(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from statekeep.cli import main

    root = tmp_path / "store"
    store = FileStore(root)
    store.write("a", [{"seq": 0, "kind": "note", "v": "x" * BIG}], snapshot(), create=True)
    store.delete("a")
    store.close()
    dry = CliRunner().invoke(main, ["gc", "--store", str(root), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "0 expired States would be removed, and 1 unreferenced blobs" in dry.output
    done = CliRunner().invoke(main, ["gc", "--store", str(root), "--yes"])
    assert done.exit_code == 0, done.output
    assert f"removed 0 expired States, and 1 unreferenced blobs ({BIG + 2} bytes)" in done.output
    assert blob_files(root) == []


def test_a_missing_blob_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = FileStore(root)
    store.write("a", [{"seq": 0, "kind": "note", "v": "x" * BIG}], snapshot(), create=True)
    (name,) = blob_files(root)
    os.unlink(root / ".blobs" / name)
    with pytest.raises(Exception, match=rf"State 'a' entry seq 0 refers to blob '{name}'"):
        store.read("a")
    store.close()


# -- gc beside writers in another process -----------------------------------------------


def test_gc_beside_a_writer_process_loses_no_referenced_blob(tmp_path: Path) -> None:
    """A writer process creates States whose values are new blobs or ones already stored,
    while this process deletes some and runs gc as fast as it can; every State left reads
    back whole (a blob gc removed while a write referred to it would be missing)."""
    root, seed, count = tmp_path / "store", 7, 60
    store = FileStore(root)
    store.write("seed", [{"seq": 0, "kind": "note", "v": "s" * BIG}], snapshot(), create=True)
    run = start_writer(tmp_path, str(root), str(seed), "0", str(count))
    run.expect("ready")
    rounds, deleted = 0, set()
    while (line := run.next_line()) is not None and line != "done":
        i = int(line.split()[1])
        if i % 3 == 0 and i % 2:
            store.delete(f"b{i}")  # its shared value: still referred to by others, or not
            deleted.add(i)
        store.gc()
        rounds += 1
    assert run.proc.wait(60) == 0
    store.gc()
    for i in range(count):
        got = store.read(f"b{i}")
        if i in deleted:
            assert got is None
        else:
            assert got is not None and got.entries[0]["v"] == blob_writer.value(seed, i), i
    assert rounds >= count
    store.close()


# -- SIGKILL ----------------------------------------------------------------------------

KILLS = 10


def test_sigkill_mid_blob_write_never_leaves_a_missing_blob(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    first = 0
    for kill in range(KILLS):
        run = start_writer(tmp_path, str(root), str(seed), str(first), "0")
        run.expect("ready")
        lines = run.kill_after(rng.randint(0, 2), rng.uniform(0.0, 0.03))
        acked = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
        store = FileStore(root)
        held = {row.id for row in store.list()}
        for i in acked:
            assert f"b{i}" in held, f"kill {kill}: acknowledged b{i} missing"
        for sid in held:  # acknowledged or not: whole, never a missing blob
            got = store.read(sid)
            assert got is not None
            assert got.entries[0]["v"] == blob_writer.value(seed, int(sid[1:])), sid
        store.gc()  # removes what the dead writer left half-made (temp files, unreferred blobs)
        blobs = root / ".blobs"
        assert not blobs.exists() or not [n for n in os.listdir(blobs) if n.startswith("tmp-")]
        for sid in held:
            assert store.read(sid) is not None
        first = max([int(s[1:]) for s in held], default=-1) + 1
        store.close()


# -- power loss ---------------------------------------------------------------------------


class QuietIO(OsIO):  # no fsync (speed), as the power-loss test's stores
    def fsync(self, fd: int) -> None:
        pass


def value(tag: str, size: int = BIG) -> str:
    return (tag * (size // len(tag) + 1))[:size]


@dataclass(frozen=True, slots=True)
class Call:
    sid: str | None  # None: gc
    op: str
    entries: list[dict[str, Any]]
    start: int
    end: int


def record(base: Path) -> tuple[RecordingIO, list[Call]]:
    io = RecordingIO(base)
    store = FileStore(base / "store", io=io)
    calls: list[Call] = []

    def call(sid: str | None, op: str, ents: list[dict[str, Any]]) -> None:
        start = io.mark()
        if op == "gc":
            store.gc()
        elif op == "delete":
            assert sid is not None
            store.delete(sid)
        else:
            assert sid is not None
            store.write(sid, ents, snapshot(sid), create=op == "create")
        calls.append(Call(sid, op, ents, start, io.mark()))

    one, two, three = value("one-"), value("two-", 60_000), value("three-")
    call("a", "create", [{"seq": 0, "kind": "note", "v": one}])
    call("a", "append", [{"seq": 1, "kind": "note", "v": two}, {"seq": 2, "kind": "note", "v": one}])
    call("b", "create", [{"seq": 0, "kind": "note", "v": {"page": two, "more": three}}])
    call("a", "delete", [])
    call(None, "gc", [])
    call("b", "append", [{"seq": 1, "kind": "note", "v": one}])
    store.close()
    return io, calls


def expected(calls: list[Call], k: int, sid: str) -> tuple[Record | None, Call | None]:
    done: Record | None = None
    under_way = None
    for c in calls:
        if c.sid != sid or k <= c.start:
            continue
        if k < c.end:
            under_way = c
        elif c.op == "delete":
            done = None
        elif c.op == "create":
            done = Record(c.entries, snapshot(sid))
        else:
            assert done is not None
            done = Record(done.entries + c.entries, snapshot(sid))
    return done, under_way


def judge(got: Record | None, done: Record | None, call: Call | None) -> str | None:
    if call is None or call.op == "delete":
        ok = got == done or (call is not None and got is None)
    elif call.op == "create":
        ok = got is None or got == Record(call.entries, snapshot(call.sid))
    else:
        assert done is not None
        ok = got in (done, Record(done.entries + call.entries, snapshot(call.sid)))
    return None if ok else f"found {got!r:.200}, expected {done!r:.200} or the call under way {call}"


async def recover(root: Path, calls: list[Call], k: int) -> str | None:
    store = FileStore(root, io=QuietIO())
    try:
        for sid in ("a", "b"):
            done, call = expected(calls, k, sid)
            try:
                got = await store.aread(sid)
            except Exception as exc:  # a missing blob, above all
                return f"read({sid!r}) raised {type(exc).__name__}: {exc}"
            problem = judge(got, done, call)
            if problem:
                return f"read({sid!r}): {problem}"
        await store.agc()
        for sid in ("a", "b"):  # gc of a crash state keeps what its States refer to
            if (got := await store.aread(sid)) is not None:
                assert got.entries
    finally:
        await store.aclose()
    return None


def test_a_power_cut_at_every_step_of_blob_writes_and_gc(tmp_path: Path) -> None:
    """Cut after every op of the scenario, keeping any subset of what was not yet durable:
    every State reads as before or as after the call under way, never with a missing blob."""
    (tmp_path / "recorded").mkdir()
    io, calls = record(tmp_path / "recorded")
    assert any("/.blobs/" in str(op) or ".blobs" in str(op) for op in io.ops)
    failures: list[str] = []
    checked = 0

    async def run() -> None:
        nonlocal checked
        for k, disk in crash_points(io):
            rng = random.Random(f"blobs-{k}")
            states = [s for s in disk.crash_states(rng) if not s.hole]
            for state in states[:24]:
                checked += 1
                where = tmp_path / f"s{checked}"
                build(state.tree, where)
                problem = await recover(where / "store", calls, k)
                if problem:
                    failures.append(
                        f"cut after op {k} ({io.ops[k - 1] if k else '-'}): {problem}; {state.how:.300}"
                    )

    asyncio.run(run())
    print(f"{len(io.ops) + 1} crash points, {checked} crash states checked")
    assert not failures, "\n".join(failures[:5])
    assert checked > len(io.ops)
