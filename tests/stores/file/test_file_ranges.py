"""FileStore range reads: read(id, since=N) reads back from the log's end (the contract
itself runs on every store in the conformance suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeep import CorruptStateError, FileStore, Record
from statekeep.stores._file.reads import read_range
from statekeep.testing import entries, snapshot
from tests.stores.file.test_logformat import format_1_store


def test_a_range_read_does_not_read_the_history_before_since(tmp_path: Path) -> None:
    # Damage in the first write: a whole read names it; reading the end never reaches it.
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 3), snapshot(turn=1), create=True)
    for turn in range(2, 6):
        store.write("a", entries(3 * turn - 3, 3), snapshot(turn=turn))
    store.close()
    log = tmp_path / "s" / "a" / "log.jsonl"
    data = bytearray(log.read_bytes())
    data[data.index(b'"entry 1"') + 2] ^= 1  # a flipped bit in seq 1's line
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="line 2"):
        FileStore(tmp_path / "s").read("a")
    assert FileStore(tmp_path / "s").read("a", since=12) == Record(entries(12, 3), snapshot(turn=5))


def test_a_format_1_log_is_read_whole_and_cut(tmp_path: Path) -> None:
    format_1_store(tmp_path / "s")
    store = FileStore(tmp_path / "s")
    assert store.read("a", since=1) == Record(entries(1, 2), snapshot("a"))
    store.write("a", entries(3, 2), None)  # goes on in format 2 after the old lines
    assert FileStore(tmp_path / "s").read("a", since=2) == Record(entries(2, 3), snapshot("a"))


def test_an_unfinished_write_at_the_end_is_not_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 4), snapshot(turn=1), create=True)
    store.close()
    with open(tmp_path / "s" / "a" / "log.jsonl", "ab") as log:
        log.write(b'{"seq":4,"kind":"note","text":"cut sh')  # a crash mid-write
    assert FileStore(tmp_path / "s").read("a", since=2) == Record(entries(2, 2), snapshot(turn=1))


def test_a_log_missing_acknowledged_writes_is_refused_by_a_range_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 2), snapshot(turn=1), create=True)
    store.write("a", entries(2, 2), snapshot(turn=2))
    store.close()  # writes snapshot.json, tagged with the log's length
    log = tmp_path / "s" / "a" / "log.jsonl"
    data = log.read_bytes()
    log.write_bytes(data[: data.index(b'{"seq":2')])  # the second write lost
    with pytest.raises(CorruptStateError, match="acknowledged entries are missing"):
        FileStore(tmp_path / "s").read("a", since=1)


def test_a_range_read_keeps_a_snapshot_an_earlier_write_set(tmp_path: Path) -> None:
    # A write with snapshot=None records where the snapshot is: read back by its offset.
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 2), snapshot(turn=1), create=True)
    store.write("a", entries(2, 2), None)
    store.write("a", entries(4, 2), None)
    assert FileStore(tmp_path / "s").read("a", since=5) == Record(entries(5, 1), snapshot(turn=1))


def test_reading_back_and_reading_whole_give_the_same_records_from_every_seq(tmp_path: Path) -> None:
    # FileStore reads back from the log's end only when since is near it (reads.BACKWARDS_SHARE);
    # either way a range read is the whole history cut at since.
    store = FileStore(tmp_path / "s")
    store.write("a", entries(0, 3), snapshot(turn=1), create=True)
    store.write("a", entries(3, 4), None)  # the snapshot stays the one at turn 1
    store.write("a", entries(7, 2), snapshot(turn=3))
    store.write("a", entries(9, 1), None)
    whole = store.read("a")
    assert whole is not None and len(whole.entries) == 10
    for since in range(12):
        want = Record(whole.entries[since:], snapshot(turn=3))
        for share in (0.0, 1.0):  # always whole and cut, always backwards
            got = read_range(store._folder, "a", since, share=share)
            assert got is not None
            assert (got() if callable(got) else got) == want, (since, share)
        assert store.read("a", since=since) == want, since


def _history_of_small_writes(root: Path) -> Path:
    store = FileStore(root)
    store.write("a", entries(0, 10), snapshot(turn=1), create=True)
    for first in range(10, 30, 2):
        store.write("a", entries(first, 2), snapshot(turn=first))
    store.close()
    return root / "a" / "log.jsonl"


def _flip(log: Path, marker: bytes, offset: int) -> None:
    data = bytearray(log.read_bytes())
    data[data.index(marker) + offset] ^= 1
    log.write_bytes(bytes(data))


@pytest.mark.parametrize("since", [25, 29, 30])
def test_damage_in_the_last_write_is_reported_not_read_around(tmp_path: Path, since: int) -> None:
    # A flipped bit in the last acknowledged write: reading back must not fall back to the
    # write before it, which would drop acknowledged entries without a word.
    log = _history_of_small_writes(tmp_path / "s")
    _flip(log, b'"entry 29"', 3)
    for read in (lambda s: s.read("a"), lambda s: s.read("a", since=since)):
        with pytest.raises(CorruptStateError, match="checksum"):
            read(FileStore(tmp_path / "s"))


def test_a_checked_line_whose_checksum_key_is_damaged_is_not_read_as_plain(tmp_path: Path) -> None:
    log = _history_of_small_writes(tmp_path / "s")
    _flip(log, b'"entry 26","sk.crc"', len(b'"entry 26","sk.cr'))  # "sk.crc" -> "sk.crb"
    for read in (lambda s: s.read("a"), lambda s: s.read("a", since=25)):
        with pytest.raises(CorruptStateError, match="line"):
            read(FileStore(tmp_path / "s"))
    assert FileStore(tmp_path / "s").read("a", since=28) == Record(entries(28, 2), snapshot(turn=28))
