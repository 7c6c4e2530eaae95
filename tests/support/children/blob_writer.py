"""A writer of large values (stored once, as blobs) that tests/stores/file/test_file_blobs.py
kills with SIGKILL, or runs beside gc in another process.

Run as ``python blob_writer.py ROOT SEED FIRST COUNT``: creates States ``b{FIRST}``,
``b{FIRST+1}``, ... (COUNT of them; 0: forever), each with one entry holding a large value
(:func:`value`: every third one shared with others, so it is found already stored), printing
``ready`` first and ``ack I`` after each create returns, then ``done``.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

SHARED = 3  # values b0, b3, b6, ... are one of SHARED values, written again and again


def value(seed: int, i: int) -> str:
    """State ``b{i}``'s large value: 100 KB to 1.6 MB, a pure function of (seed, i)."""
    tag = f"{seed}-shared-{i % SHARED}" if i % 3 == 0 else f"{seed}-{i}"
    size = 100_000 * (1 + int(hashlib.sha256(tag.encode()).hexdigest(), 16) % 16)
    block = hashlib.shake_128(tag.encode()).hexdigest(32_768)
    return (block * (size // len(block) + 1))[:size]


def state(seed: int, i: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from statekeep.testing import snapshot

    return [{"seq": 0, "kind": "note", "v": value(seed, i)}], snapshot(f"b{i}")


def main() -> None:
    from statekeep import FileStore

    root, seed, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = FileStore(root)
    print("ready", flush=True)
    i = first
    while count == 0 or i < first + count:
        ents, snap = state(seed, i)
        store.write(f"b{i}", ents, snap, create=True)
        print(f"ack {i}", flush=True)
        i += 1
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
