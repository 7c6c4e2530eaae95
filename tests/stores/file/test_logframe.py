"""The log decoder (statekeep.stores._file.logformat.scan_log): round trips, torn and zero-filled tails, garbage,
mutated logs and corruption reports, as unit tests and Hypothesis fuzzing.

Rules under test (see the logframe module and notes/durability.md): the longest valid prefix
is kept; what follows it is a torn tail (ignored, never an error) when no complete line in it
holds a JSON object; a damaged line followed by a complete JSON object is corruption and raises
CorruptStateError naming the file and the line. Lines are split on b"\\n" only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from statekeep import CorruptStateError, FileStore
from statekeep.stores._file.logformat import LogScan, scan_log

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ---------------------------------------------------------------------

TRICKY = '\u2028\u2029\u0085\r\n\t\x00\x1f"\\/{}[]:, é日🤖\ufeff'
texts = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(list(TRICKY)), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
payloads = st.dictionaries(texts.filter(lambda k: k != "seq"), json_values, max_size=4)


@st.composite
def logs(draw: st.DrawFn, min_size: int = 0, max_size: int = 8) -> tuple[list[dict], bytes]:
    bodies = draw(st.lists(payloads, min_size=min_size, max_size=max_size))
    ents = [{"seq": i, **body} for i, body in enumerate(bodies)]
    return ents, encode_log(ents)


def encode_log(ents: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in ents)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


# -- checks every successful scan must pass --------------------------------------------


def check_consistent(data: bytes, scan: LogScan, start_seq: int = 0) -> None:
    """What a returned scan promises about ``data``, whatever ``data`` is."""
    assert 0 <= scan.end <= len(data)
    assert scan.end == 0 or data[scan.end - 1 : scan.end] == b"\n"
    lines = data[: scan.end].split(b"\n")[:-1] if scan.end else []
    # Every returned entry is exactly the parse of one input line, in order: nothing invented.
    assert len(lines) == len(scan.entries)
    for line, entry in zip(lines, scan.entries, strict=True):
        assert orjson.loads(line) == entry
        assert dumps(orjson.loads(line)) == dumps(entry)
    assert [e["seq"] for e in scan.entries] == list(range(start_seq, start_seq + len(scan.entries)))
    assert all(type(e) is dict and type(e["seq"]) is int for e in scan.entries)
    assert scan.next_seq == start_seq + len(scan.entries)
    assert scan.torn == (scan.end < len(data))
    # A returned (not raised) tail holds no complete line with a JSON object in it.
    for line in data[scan.end :].split(b"\n")[:-1]:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        assert not isinstance(value, dict), line


def expected_prefix(data: bytes, cut: int) -> tuple[int, int]:
    """(complete lines, end offset) of ``data[:cut]`` when ``data`` is a valid log."""
    end = data.rfind(b"\n", 0, cut) + 1
    return data.count(b"\n", 0, end), end


def names_line(message: str, line: int) -> bool:
    return re.search(rf"\bline {line}\b", message) is not None


# -- unit tests -----------------------------------------------------------------------


def test_empty_log() -> None:
    scan = scan_log(b"")
    assert scan == LogScan([], 0, 0, False)


def test_valid_log_round_trips() -> None:
    ents = [{"seq": i, "kind": "note", "text": f"entry {i}"} for i in range(5)]
    data = encode_log(ents)
    scan = scan_log(data)
    assert scan.entries == ents
    assert (scan.end, scan.next_seq, scan.torn) == (len(data), 5, False)


def test_every_cut_of_a_valid_log_is_a_torn_tail() -> None:
    ents = [{"seq": i, "text": "x" * i, "nested": {"a": [i, None]}} for i in range(6)]
    data = encode_log(ents)
    for cut in range(len(data) + 1):
        count, end = expected_prefix(data, cut)
        scan = scan_log(data[:cut])
        assert scan.entries == ents[:count], cut
        assert (scan.end, scan.next_seq, scan.torn) == (end, count, end < cut), cut


@pytest.mark.parametrize("zeros", [1, 7, 4096])
def test_zero_filled_tail_is_torn(zeros: int) -> None:
    ents = [{"seq": i} for i in range(3)]
    data = encode_log(ents)
    for tail in (b"\x00" * zeros, b'{"seq":3,"te' + b"\x00" * zeros):
        scan = scan_log(data + tail)
        assert scan.entries == ents
        assert (scan.end, scan.next_seq, scan.torn) == (len(data), 3, True)


def test_zero_filled_line_with_newline_at_the_end_is_ignored() -> None:
    # After a power cut a file may be extended with zeros and hold a later page: a complete
    # but unreadable last line is the debris of one interrupted append, not an error.
    data = encode_log([{"seq": 0}])
    scan = scan_log(data + b"\x00" * 10 + b"\n")
    assert scan.entries == [{"seq": 0}]
    assert scan.torn


def test_non_object_json_lines_in_the_tail_are_debris() -> None:
    data = encode_log([{"seq": 0}])
    for tail in (b"[1,2]\n", b"5\n", b'"str"\n', b"null\n\n", b"garbage\n[]\n"):
        scan = scan_log(data + tail)
        assert scan.entries == [{"seq": 0}], tail
        assert scan.torn


@pytest.mark.parametrize(
    "bad",
    [b"garbage", b'{"seq":2,"te', b"\x00\x00\x00", b"", b'{"seq":2}{"seq":3}', b"[1]", b"\xff\xfe"],
)
def test_damaged_line_followed_by_valid_line_raises_naming_the_line(bad: bytes) -> None:
    ents = [{"seq": i, "text": f"e{i}"} for i in range(5)]
    lines = [orjson.dumps(e) + b"\n" for e in ents]
    data = b"".join(lines[:2]) + bad + b"\n" + b"".join(lines[3:])
    with pytest.raises(CorruptStateError) as info:
        scan_log(data, name="/x/run/log.jsonl")
    message = str(info.value)
    assert "/x/run/log.jsonl" in message
    assert names_line(message, 3), message
    assert not names_line(message, 1) and not names_line(message, 2)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"seq":1}', "duplicate seq"),
        (b'{"seq":5}', "skipped seq"),
        (b'{"seq":"2"}', "str seq"),
        (b'{"seq":2.0}', "float seq"),
        (b'{"seq":true}', "bool seq"),
        (b'{"text":"no seq"}', "no seq"),
        (b"{}", "empty object"),
    ],
)
def test_complete_object_with_wrong_seq_is_corruption(line: bytes, why: str) -> None:
    data = encode_log([{"seq": 0}, {"seq": 1}]) + line + b"\n"
    with pytest.raises(CorruptStateError) as info:
        scan_log(data, name="L")
    assert names_line(str(info.value), 3), (why, str(info.value))


def test_bool_seq_one_is_not_seq_one() -> None:
    data = encode_log([{"seq": 0}]) + b'{"seq":true}\n'
    with pytest.raises(CorruptStateError):
        scan_log(data)
    assert scan_log(b'{"seq":true}').entries == []  # unfinished: torn, not an entry


def test_line_numbers_count_from_first_line_and_start() -> None:
    ents = [{"seq": i} for i in range(6)]
    data = encode_log(ents)
    offset = len(encode_log(ents[:3]))
    scan = scan_log(data, start=offset, start_seq=3, first_line=4)
    assert scan.entries == ents[3:]
    assert (scan.end, scan.next_seq, scan.torn) == (len(data), 6, False)
    broken = data[:offset] + b"oops\n" + data[offset:]
    with pytest.raises(CorruptStateError) as info:
        scan_log(broken, start=offset, start_seq=3, first_line=4)
    assert names_line(str(info.value), 4), str(info.value)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_line_separators_in_strings_round_trip(char: str) -> None:
    ents = [
        {"seq": 0, "text": f"a{char}b", f"k{char}": char},
        {"seq": 1, "text": char * 3, "list": [char, {"x": char}]},
        {"seq": 2, "text": "after"},
    ]
    data = encode_log(ents)
    assert data.count(b"\n") == 3  # the encoder never writes a raw newline inside a line
    scan = scan_log(data)
    assert scan.entries == ents
    assert (scan.next_seq, scan.torn) == (3, False)
    # str.splitlines() would split these lines apart; the decoder must not.
    if char in "\u2028\u2029\u0085":  # written raw (JSON allows it), unlike control characters
        assert char.encode() in data
        assert len(data.decode().splitlines()) > 3


def test_line_separators_round_trip_through_file_store(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    text = "x\u2028y\u2029z\u0085w\rv\r\nu"
    ents = [{"seq": 0, "text": text, text: [text]}, {"seq": 1, "text": "next"}]
    store.write("sep", ents, {"text": text}, create=True)
    for reader in (store, FileStore(tmp_path / "store")):
        record = reader.read("sep")
        assert record.entries == ents
        assert record.snapshot == {"text": text}
    store.write("sep", [{"seq": 2, "text": text}], None)
    assert len(FileStore(tmp_path / "store").read("sep").entries) == 3


def damage_log_on_disk(store: FileStore, state_id: str) -> int:
    """Append a damaged line and a valid one, as another process or a disk fault might.
    Returns the 1-based number of the damaged line."""
    log = store.path / state_id / "log.jsonl"
    count = log.read_bytes().count(b"\n")
    with open(log, "ab") as f:
        f.write(b"garbage\n" + orjson.dumps({"seq": count + 1}) + b"\n")
    return count + 1


def test_file_store_read_names_the_damaged_line(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    store.write("run", [{"seq": i} for i in range(5)], None, create=True)
    bad = damage_log_on_disk(store, "run")
    with pytest.raises(CorruptStateError) as info:
        FileStore(tmp_path / "store").read("run")
    assert str(store.path / "run" / "log.jsonl") in str(info.value)
    assert names_line(str(info.value), bad), str(info.value)


def test_file_store_append_with_warm_cache_names_the_damaged_line(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    store.write("run", [{"seq": i} for i in range(5)], None, create=True)  # caches the log's tail
    bad = damage_log_on_disk(store, "run")
    with pytest.raises(CorruptStateError) as info:
        store.write("run", [{"seq": 5}], None)
    assert names_line(str(info.value), bad), str(info.value)


# -- fuzzing --------------------------------------------------------------------------


@FUZZ
@given(logs())
def test_fuzz_valid_logs_round_trip(log: tuple[list[dict], bytes]) -> None:
    ents, data = log
    scan = scan_log(data)
    assert dumps(scan.entries) == dumps(ents)
    assert (scan.end, scan.next_seq, scan.torn) == (len(data), len(ents), False)
    check_consistent(data, scan)


@FUZZ
@given(logs(min_size=1), st.data())
def test_fuzz_any_cut_gives_the_longest_valid_prefix(
    log: tuple[list[dict], bytes], data: st.DataObject
) -> None:
    ents, raw = log
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    zeros = data.draw(st.integers(0, 64), label="zero-filled tail")
    torn = raw[:cut] + b"\x00" * zeros
    count, end = expected_prefix(raw, cut)
    scan = scan_log(torn)  # never raises
    assert dumps(scan.entries) == dumps(ents[:count])
    assert (scan.end, scan.next_seq, scan.torn) == (end, count, end < len(torn))
    check_consistent(torn, scan)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_garbage_only_ever_raises_corrupt_state(data: bytes) -> None:
    try:
        scan = scan_log(data)
    except CorruptStateError:
        return
    check_consistent(data, scan)


@st.composite
def mixed_logs(draw: st.DrawFn) -> bytes:
    """Valid lines (with plausible, sometimes wrong, seqs) interleaved with garbage."""
    chunks = []
    seq = 0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["entry", "entry", "wrong-seq", "garbage", "json", "newline"]))
        if kind == "entry":
            chunks.append(orjson.dumps({"seq": seq, **draw(payloads)}) + b"\n")
            seq += 1
        elif kind == "wrong-seq":
            chunks.append(orjson.dumps({"seq": draw(st.integers(0, 10))}) + b"\n")
        elif kind == "garbage":
            chunks.append(draw(st.binary(max_size=20)))
        elif kind == "json":
            chunks.append(orjson.dumps(draw(json_values)) + draw(st.sampled_from([b"", b"\n"])))
        else:
            chunks.append(b"\n")
    return b"".join(chunks)


@FUZZ
@given(mixed_logs(), st.integers(0, 3))
def test_fuzz_mixed_garbage_and_entries(data: bytes, start_seq: int) -> None:
    try:
        scan = scan_log(data)
    except CorruptStateError as exc:
        event("corrupt")
        assert re.search(r"\bline \d+\b", str(exc))
    else:
        event(f"torn={scan.torn} entries>0={bool(scan.entries)}")
        check_consistent(data, scan)
    # A scan that starts later (as after a cached tail) keeps the same promises.
    try:
        shifted = scan_log(data, start_seq=start_seq)
    except CorruptStateError:
        return
    assert shifted.end <= len(data)
    assert [e["seq"] for e in shifted.entries] == list(range(start_seq, shifted.next_seq))


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> tuple[bytes, int]:
    """Apply 1 to 3 byte flips, inserts or deletes; return the result and the lowest
    position (in the original) that any of them touched."""
    out = bytearray(data)
    first = len(data)
    # Apply from the back so earlier positions still mean the same byte of the original.
    spots = sorted(
        draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=3, unique=True)), reverse=True
    )
    for pos in spots:
        how = draw(st.sampled_from(["flip", "insert", "delete", "set"]))
        if how == "flip":
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif how == "set":
            out[pos] = draw(st.integers(0, 255))
        elif how == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=3))
        else:
            del out[pos]
        first = min(first, pos)
    return bytes(out), first


@FUZZ
@given(logs(min_size=1), st.data())
def test_fuzz_mutated_logs(log: tuple[list[dict], bytes], data: st.DataObject) -> None:
    """A mutated log gives a prefix of the original or CorruptStateError.

    The lines before the first touched byte are intact and must come back unchanged. The line
    holding the first touched byte may come back changed: a flipped byte inside a string value
    can make a different but valid entry, and the format has no checksum to notice that.
    What follows it is either original lines (a longer valid result) or must not be dropped
    silently when it holds a complete object.
    """
    ents, raw = log
    mutated, first = data.draw(mutations(raw), label="mutation")
    assume(mutated != raw)
    intact = raw.count(b"\n", 0, first)  # complete original lines before the first mutation
    try:
        scan = scan_log(mutated)
    except CorruptStateError as exc:
        event("corrupt")
        assert re.search(r"\bline \d+\b", str(exc))
        return
    event("same" if scan.entries == ents else "prefix" if len(scan.entries) < len(ents) else "changed entry")
    check_consistent(mutated, scan)
    assert len(scan.entries) >= intact  # nothing before the damage is ever dropped
    assert dumps(scan.entries[:intact]) == dumps(ents[:intact])
    assert len(scan.entries) <= len(ents) + 3  # at most a few lines a mutation could split off


@FUZZ
@given(logs(min_size=2), st.data())
def test_fuzz_broken_line_followed_by_valid_lines_raises(
    log: tuple[list[dict], bytes], data: st.DataObject
) -> None:
    ents, _ = log
    lines = [orjson.dumps(e) + b"\n" for e in ents]
    k = data.draw(st.integers(0, len(lines) - 2), label="broken line")
    line = lines[k]
    # Ways to break a line so it is no longer one JSON object: drop its first or last
    # brace, cut it short, or overwrite a structural byte with a NUL.
    how = data.draw(st.sampled_from(["no-open", "no-close", "cut", "nul"]), label="how")
    if how == "no-open":
        broken = line[1:]
    elif how == "no-close":
        broken = line[:-2] + b"\n"
    elif how == "cut":
        broken = line[: data.draw(st.integers(0, len(line) - 2), label="cut")] + b"\n"
    else:
        broken = b"\x00" + line[1:]
    damaged = b"".join(lines[:k]) + broken + b"".join(lines[k + 1 :])
    with pytest.raises(CorruptStateError) as info:
        scan_log(damaged, name="the-log")
    message = str(info.value)
    assert message.startswith("the-log: ")
    assert names_line(message, k + 1), message
    # The same break as the last line is a torn tail: the prefix comes back, no error.
    tail_only = b"".join(lines[:k]) + broken
    scan = scan_log(tail_only)
    assert dumps(scan.entries) == dumps(ents[:k])
    assert scan.torn


@FUZZ
@given(logs(min_size=1), st.integers(1, 8))
def test_fuzz_stale_or_repeated_line_is_corruption(log: tuple[list[dict], bytes], back: int) -> None:
    ents, raw = log
    stale = ents[max(0, len(ents) - back)]  # an older, valid entry written again
    with pytest.raises(CorruptStateError) as info:
        scan_log(raw + orjson.dumps(stale) + b"\n")
    assert names_line(str(info.value), len(ents) + 1), str(info.value)
