"""FileStore's log format 2 (statekeep.stores._file.logformat): checksummed lines, writes closed by a
record carrying the snapshot, recovery that tells an unfinished write (even one with
holes) from damage, reading back from the end, and upgrading stores of format 1.

The format 1 rules (plain lines) are tested in tests/stores/file/test_logframe.py: a log of format 2
may start with such lines, and they are read as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from statekeep import CorruptStateError, FileStore, Record, State, UnsupportedFormatError
from statekeep.stores._file.logformat import closing_record, frame, scan_log
from statekeep.stores._file.logtail import decode_copy, encode_copy, entries_back, last_write
from statekeep.testing import entries, snapshot
from tests.stores.file.test_logframe import scalars as values

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAGE = 4096


def build(
    writes: list[tuple[list[dict[str, Any]], dict[str, Any] | None]], legacy: int = 0
) -> tuple[bytes, list[int]]:
    """A log of ``legacy`` format 1 lines, then the writes (entries, snapshot or None to
    keep it), seqs given in order. Returns it and where each write (or line) ends."""
    data, ends, seq, at = b"", [], 0, None
    for _ in range(legacy):
        data += orjson.dumps({"seq": seq, "old": True}) + b"\n"
        seq += 1
        ends.append(len(data))
    for ents, snap in writes:
        body = b""
        for entry in ents:
            body += frame(orjson.dumps({"seq": seq} | entry) + b"\n")
            seq += 1
        encoded = None if snap is None else orjson.dumps(snap)
        record = closing_record(seq, body, encoded, at)
        if encoded is not None:
            at = len(data) + len(body)
        data += body + record
        ends.append(len(data))
    return data, ends


@st.composite
def logs(draw: st.DrawFn, min_writes: int = 1) -> tuple[bytes, list[int]]:
    writes = draw(
        st.lists(
            st.tuples(
                st.lists(
                    st.dictionaries(st.sampled_from(["text", "kind", "n"]), values, max_size=2), max_size=3
                ),
                st.none() | st.fixed_dictionaries({"task": st.text(max_size=20)}),
            ),
            min_size=min_writes,
            max_size=5,
        )
    )
    return build(writes, legacy=draw(st.integers(0, 2)))


def entries_up_to(data: bytes, end: int) -> list[dict[str, Any]]:
    return scan_log(data[:end]).entries


# -- round trip, cuts, holes ---------------------------------------------------------


def test_lines_are_json_objects_with_a_checksum() -> None:
    data, _ = build([([{"kind": "user", "text": "hi"}], {"task": "t"}), ([], None)])
    lines = [orjson.loads(line) for line in data.splitlines()]
    assert lines[0] == {"seq": 0, "kind": "user", "text": "hi", "sk.crc": lines[0]["sk.crc"]}
    assert lines[1]["sk.snapshot"] == {"task": "t"} and lines[1]["sk.next"] == 1
    assert lines[2]["sk.at"] == len(data.splitlines()[0]) + 1  # the snapshot kept, where it is
    scan = scan_log(data)
    assert scan.entries == [{"seq": 0, "kind": "user", "text": "hi"}]  # as written: no checksum
    assert (scan.snapshot, scan.next_seq, scan.end, scan.torn) == ({"task": "t"}, 1, len(data), False)


@FUZZ
@given(logs(), st.data())
def test_any_cut_keeps_exactly_the_complete_writes(log: tuple[bytes, list[int]], data: st.DataObject) -> None:
    raw, ends = log
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    done = max([0] + [e for e in ends if e <= cut])
    scan = scan_log(raw[:cut])
    assert scan.end == done and scan.torn == (cut > done)
    assert scan.entries == entries_up_to(raw, done)


@FUZZ
@given(logs(min_writes=2), st.data())
def test_an_unfinished_write_with_holes_is_cut_never_corruption(
    log: tuple[bytes, list[int]], data: st.DataObject
) -> None:
    """A power cut keeps any subset of an unfinished write's pages: lost ones read as zeros."""
    raw, ends = log
    start = ends[-2]  # the last write is the unfinished one
    size = data.draw(st.integers(start + 1, len(raw)), label="size")  # how much the file kept
    pages = range(start // PAGE, (size - 1) // PAGE + 1)
    kept = data.draw(st.sets(st.sampled_from(list(pages))), label="kept pages")
    damaged = bytearray(raw[:size])
    for page in pages:
        if page not in kept:
            lo, hi = max(page * PAGE, start), min((page + 1) * PAGE, size)
            damaged[lo:hi] = bytes(hi - lo)
    assume(bytes(damaged) != raw)
    scan = scan_log(bytes(damaged))
    assert scan.end == start and scan.entries == entries_up_to(raw, start)
    found = last_write(lambda at, n: bytes(damaged[at : at + n]), len(damaged))
    assert found is None or (found.end, found.next_seq) == (start, scan.next_seq)


def test_a_closing_record_that_survived_without_its_entries_closes_nothing() -> None:
    big = [{"text": "x" * 3 * PAGE}]
    raw, ends = build([([{"text": "a"}], {"task": "1"}), (big, {"task": "2"})])
    damaged = bytearray(raw)
    damaged[ends[0] : ends[0] + PAGE] = bytes(PAGE)  # the entry's first page lost, the record kept
    scan = scan_log(bytes(damaged))
    assert (scan.end, scan.snapshot) == (ends[0], {"task": "1"})
    found = last_write(lambda at, n: bytes(damaged[at : at + n]), len(damaged))
    assert found is not None and found.end == ends[0]


@FUZZ
@given(logs(min_writes=2), st.data())
def test_a_flipped_byte_in_a_complete_write_is_corruption(
    log: tuple[bytes, list[int]], data: st.DataObject
) -> None:
    """Any byte but the last newline (without it the last write reads as unfinished) and
    but a zero (which reads as a page a power cut lost, in the last write)."""
    raw, ends = log
    at = data.draw(st.integers(0, len(raw) - 2), label="at")
    new = data.draw(st.integers(1, 255).filter(lambda b: b != raw[at]), label="byte")
    damaged = raw[:at] + bytes([new]) + raw[at + 1 :]
    legacy_lines = sum(1 for e in ends if raw[:e].count(b'"sk.') == 0)
    assume(at >= (ends[legacy_lines - 1] if legacy_lines else 0))  # format 1 lines have no checksum
    with pytest.raises(CorruptStateError, match="line"):
        scan_log(damaged)


def test_a_checksum_changed_to_another_spelling_of_the_same_number_is_corruption() -> None:
    """Read as a number, "ABCD0123" is "abcd0123": a checksum is compared as written. (A
    closing record's own checksum: no other covers its line.)"""
    raw, _ = build([([{"text": "a"}], {"task": "1"}), ([{"text": "b"}], {"task": "2"})])
    lines = raw.split(b"\n")
    at = lines[1].index(b'"sk.crc":"') + len(b'"sk.crc":"')
    crc = lines[1][at : at + 8]
    assert crc != crc.upper()  # it has a hex letter to write in uppercase
    lines[1] = lines[1][:at] + crc.upper() + lines[1][at + 8 :]
    with pytest.raises(CorruptStateError, match="line 2"):
        scan_log(b"\n".join(lines))


def test_damage_followed_by_a_complete_write_names_the_line() -> None:
    raw, _ = build([([{"text": "a"}], {"task": "1"}), ([{"text": "b"}], {"task": "2"})])
    lines = raw.split(b"\n")
    lines[0] = b"\x00" * len(lines[0])  # zeros, as a lost page, but a complete write follows
    with pytest.raises(
        CorruptStateError, match=r"^L: line 1 is damaged and followed by a complete write on line 4"
    ):
        scan_log(b"\n".join(lines), name="L")


def test_a_newer_format_is_refused() -> None:
    raw, _ = build([([{"text": "a"}], {"task": "1"})])
    newer = raw.replace(b'{"sk.v":3', b'{"sk.v":5')
    body = newer.split(b"\n")[1]
    fixed = frame(body[: body.rindex(b',"sk.crc"')] + b"}\n")  # its checksum made right again
    with pytest.raises(UnsupportedFormatError, match=r"newer statekeep.*upgrade"):
        scan_log(newer.split(b"\n")[0] + b"\n" + fixed)


def test_a_write_closes_in_the_newer_format_only_when_an_older_statekeep_would_misread_it() -> None:
    # Format 4: entries that refer to blobs, or a log a trim rewrote to start with its base;
    # every other write closes in format 3, which a statekeep reading up to 3 reads on.
    plain = frame(b'{"seq":0,"kind":"note","text":"a"}\n')
    blobbed = frame(b'{"seq":1,"kind":"note","v":{"sk.blob":"ab","size":9},"sk.blobs":["ab"]}\n')
    assert closing_record(1, plain, None, None).startswith(b'{"sk.v":3,')
    assert closing_record(2, blobbed, None, None).startswith(b'{"sk.v":4,')
    assert closing_record(1, plain, None, None, trimmed=True).startswith(b'{"sk.v":4,')


# -- from the end ------------------------------------------------------------------------------


@FUZZ
@given(logs(), st.data())
def test_last_write_and_entries_back_agree_with_a_whole_scan(
    log: tuple[bytes, list[int]], data: st.DataObject
) -> None:
    raw, _ = log
    scan = scan_log(raw)
    read_at = lambda at, n: raw[at : at + n]  # noqa: E731
    found = last_write(read_at, len(raw))
    if not scan.framed:
        assert found is None
        return
    assert found is not None and (found.end, found.next_seq, found.snapshot_at) == (
        scan.end,
        scan.next_seq,
        scan.snapshot_at,
    )
    first = data.draw(st.integers(0, scan.next_seq), label="first")
    back = entries_back(read_at, scan.end, first, scan.next_seq)
    assert back is None or back == scan.entries[first:]


def test_the_snapshot_copy_round_trips_and_a_damaged_one_reads_as_none() -> None:
    raw = encode_copy(120, 3, b'{"task":"t"}')
    copy = decode_copy(raw)
    assert copy is not None and (copy.log_size, copy.next_seq, copy.snapshot) == (120, 3, {"task": "t"})
    for bad in (raw[:-5], raw.replace(b"120", b"121"), bytes(len(raw)), b""):
        assert decode_copy(bad) is None
    legacy = decode_copy(b'{"task":"t"}')  # format 1: the snapshot itself
    assert legacy is not None and (legacy.log_size, legacy.snapshot) == (None, {"task": "t"})


# -- FileStore: stores of format 1, and of a newer format ---------------------------------------


def format_1_store(root: Path) -> bytes:
    """A store as statekeep wrote it before format 2: plain lines, snapshot.json whole."""
    root.mkdir(mode=0o700)
    (root / ".statekeep-store").write_bytes(b'{"format":1}')
    (root / "a").mkdir(mode=0o700)
    log = b"".join(orjson.dumps(e) + b"\n" for e in entries(0, 3))
    for name, data in (("log.jsonl", log), ("snapshot.json", orjson.dumps(snapshot("a")))):
        (root / "a" / name).write_bytes(data)
        os.chmod(root / "a" / name, 0o600)
    return log


@pytest.mark.parametrize("keep_snapshot", [True, False])
def test_a_format_1_store_is_read_and_goes_on_in_format_2_without_rewriting(
    tmp_path: Path, keep_snapshot: bool
) -> None:
    root = tmp_path / "s"
    old = format_1_store(root)
    store = FileStore(root)
    assert store.read("a") == Record(entries(0, 3), snapshot("a"))
    assert [r.id for r in store.list()] == ["a"]
    new_snapshot = None if keep_snapshot else snapshot("a", turn=3)
    store.write("a", entries(3, 2), new_snapshot)
    store.close()
    log = (root / "a" / "log.jsonl").read_bytes()
    assert log.startswith(old)  # the old lines stay as they were
    want = Record(entries(0, 5), snapshot("a") if keep_snapshot else new_snapshot)
    (root / "a" / "snapshot.json").unlink()  # the log alone has it all now
    assert FileStore(root).read("a") == want
    assert [r.task for r in FileStore(root).list()] == ["a"]
    assert orjson.loads((root / ".statekeep-store").read_bytes())["format"] == 2


def test_a_store_or_log_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    FileStore(root).write("a", entries(0, 1), snapshot(), create=True)
    (root / ".statekeep-store").write_bytes(b'{"format":3}')
    for call in (lambda s: s.read("a"), lambda s: s.list(), lambda s: s.write("a", entries(1, 1), None)):
        with pytest.raises(UnsupportedFormatError, match=r"newer statekeep.*upgrade statekeep"):
            call(FileStore(root))
    assert orjson.loads((root / ".statekeep-store").read_bytes()) == {"format": 3}  # nothing changed


def test_a_format_1_state_keeps_its_snapshot_through_writes_that_add_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    format_1_store(root)
    store = FileStore(root)
    store.write("a", entries(0, 3), None)  # re-sent: nothing new to write, still format 1
    store.write("a", entries(3, 1), None)  # the first format 2 write moves the snapshot in
    assert FileStore(root).read("a") == Record(entries(0, 4), snapshot("a"))


def test_a_fork_of_a_trimmed_state_closes_in_the_newer_format(tmp_path: Path) -> None:
    # Its log starts with the base, as the trimmed one's does: a statekeep reading up to format
    # 3 must refuse it as newer, not report it damaged.
    store = FileStore(tmp_path / "store")
    state = State("trimmed", id="t")
    state.add_user("a")
    state.compact("said a", through=1)
    state.add_user("b")
    store.save(state)
    store.trim("t", before=2)
    store.fork("t", new_id="f")
    (log,) = (tmp_path / "store").rglob("f/log.jsonl")
    first, closing = log.read_bytes().splitlines()[0], log.read_bytes().splitlines()[-1]
    assert first.startswith(b'{"seq":1,"kind":"base"') and closing.startswith(b'{"sk.v":4,')
