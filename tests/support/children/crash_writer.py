"""A writer that tests/stores/file/test_filestore_crash.py kills with SIGKILL at random moments.

Run as ``python crash_writer.py MODE ROOT ...``; it prints a line after each acknowledged
operation (flushed), so the parent knows what the store promised before the kill:

- ``append ROOT SID SEED [slow]``: create State SID if it does not exist, then append
  entries of mixed size forever, 1-3 per write, each with a new snapshot. Prints
  ``ready NEXT`` once it knows where it resumes, then ``ack LAST`` after each write
  returns. With ``slow``, its I/O plays a slow disk: a buffer of more than 256 KiB goes
  out 256 KiB per ``os.write`` (short writes, which ``os.write`` may do anyway) with a 1 ms
  pause after each, and ``chunk REMAINING`` is printed before each; so a kill at a
  random moment after a ``chunk`` line most often lands in the middle of a record.
- ``create ROOT SEED FIRST``: create States ``c{FIRST}``, ``c{FIRST+1}``, ... forever,
  printing ``ack I`` after each create returns.
- ``delete ROOT ID ...``: delete the States in order, printing ``ack ID`` after each.

The content of every entry and snapshot is a pure function of (seed, seq) or (seed, i)
so the parent can recompute what the writer would have written.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from typing import Any

SMALL, MEDIUM, LARGE = (100, 1_000), (10_000, 200_000), (1_000_000, 4_000_000)
CHUNK = 256 * 1024


def _payload(tag: str, size: int) -> str:
    """``size`` hex characters, deterministic from ``tag``: a 64 KiB block of its own,
    repeated (cheap to make, so the writer spends its time writing, not hashing)."""
    block = hashlib.shake_128(tag.encode()).hexdigest(32_768)
    return (block * (size // len(block) + 1))[:size]


def entry_size(seed: int, seq: int) -> int:
    rng = random.Random(f"size:{seed}:{seq}")
    roll = rng.random()
    low, high = SMALL if roll < 0.6 else MEDIUM if roll < 0.8 else LARGE
    return rng.randint(low, high)


def entry(seed: int, seq: int) -> dict[str, Any]:
    """The entry the append writer writes at ``seq``."""
    return {"seq": seq, "kind": "blob", "data": _payload(f"entry:{seed}:{seq}", entry_size(seed, seq))}


def snapshot(last_seq: int) -> dict[str, Any]:
    """The snapshot the append writer stores with a write whose last entry is ``last_seq``."""
    return {
        "task": "crash",
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "turn": max(last_seq, 0),
        "stopped_by": None,
        "finished": False,
        "last_seq": last_seq,
    }


def created_state(seed: int, i: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(entries, snapshot) of State ``c{i}`` made by the create writer."""
    rng = random.Random(f"create:{seed}:{i}")
    count = rng.randint(1, 2)
    ents = []
    for seq in range(count):
        low, high = (SMALL, MEDIUM, LARGE)[rng.randrange(3)]
        size = rng.randint(low, min(high, 2_500_000))
        ents.append({"seq": seq, "kind": "blob", "data": _payload(f"create:{seed}:{i}:{seq}", size)})
    snap = snapshot(count - 1) | {"task": f"c{i}"}
    return ents, snap


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _append(root: str, sid: str, seed: int, slow: bool) -> None:
    from statekeep import FileStore
    from statekeep.stores import OsIO

    class SlowDisk(OsIO):
        def write(self, fd: int, data: memoryview) -> int:
            if len(data) <= CHUNK:
                return super().write(fd, data)
            _say(f"chunk {len(data)}")
            done = super().write(fd, data[:CHUNK])
            time.sleep(0.001)  # the device is slow; nothing waits on this
            return done

    store = FileStore(root, io=SlowDisk() if slow else None, offload=None)  # large records in the log
    rng = random.Random()  # batch sizes differ from run to run; the content does not
    record = store.read(sid)
    if record is None:
        _say("ready 0")
        store.write(sid, [entry(seed, 0)], snapshot(0), create=True)
        _say("ack 0")
        next_seq = 1
    else:
        next_seq = len(record.entries)
        _say(f"ready {next_seq}")
    while True:
        count = rng.randint(1, 3)
        ents = [entry(seed, s) for s in range(next_seq, next_seq + count)]
        next_seq += count
        store.write(sid, ents, snapshot(next_seq - 1))
        _say(f"ack {next_seq - 1}")


def _create(root: str, seed: int, first: int) -> None:
    from statekeep import FileStore

    store = FileStore(root, offload=None)  # large records in the log (blobs: blob_writer.py)
    _say("ready")
    i = first
    while True:
        ents, snap = created_state(seed, i)
        store.write(f"c{i}", ents, snap, create=True)
        _say(f"ack {i}")
        i += 1


def _delete(root: str, ids: list[str]) -> None:
    from statekeep import FileStore

    store = FileStore(root, offload=None)  # large records in the log (blobs: blob_writer.py)
    _say("ready")
    for sid in ids:
        store.delete(sid)
        _say(f"ack {sid}")
    _say("done")


def main(argv: list[str]) -> None:
    mode, root, *rest = argv
    if mode == "append":
        _append(root, rest[0], int(rest[1]), rest[2:] == ["slow"])
    elif mode == "create":
        _create(root, int(rest[0]), int(rest[1]))
    elif mode == "delete":
        _delete(root, rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
