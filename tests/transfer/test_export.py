"""The export file: round trips between stores, and every damaged file refused before
anything is imported."""

from __future__ import annotations

import asyncio
import hashlib
import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeep import FileStore, MemoryStore, SQLiteStore, Store
from statekeep._core.errors import UnsupportedFormatError
from statekeep._transfer.exportfile import FORMAT, ExportFileError, verify
from statekeep._transfer.exporting import aexport, aimport
from tests.support.move_runs import contents, make_runs


def export(store: Store, out: Any, **options: Any) -> Any:
    return asyncio.run(aexport(store, out, **options))


def import_(store: Store, path: Path, **options: Any) -> Any:
    return asyncio.run(aimport(store, path, **options))


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, list[str], dict[str, Any]]:
    with FileStore(tmp_path / "src") as src:
        ids = make_runs(src, 5, big=1)
        out = tmp_path / "runs.jsonl"
        count, _, missing, *_ = export(src, out)
        assert (count, missing) == (len(ids), [])
        return out, ids, contents(src, ids)


def test_the_file_says_what_it_holds(exported: tuple[Path, list[str], dict[str, Any]]) -> None:
    out, ids, held = exported
    lines = out.read_bytes().splitlines()
    head, trailer = orjson.loads(lines[0]), orjson.loads(lines[-1])
    total = sum(len(e) for e, _ in held.values())
    # Version 3: the State lines carry each State's incarnation, which an import keeps.
    assert head["format"] == FORMAT and head["version"] == 3 and head["source"] == "FileStore"
    assert (head["states"], head["entries"]) == (len(ids), total)
    assert "decrypted" in head["holds"]
    assert trailer["end"] is True and (trailer["states"], trailer["entries"]) == (len(ids), total)
    assert len(lines) == 2 + len(ids) + total  # one line per State, one per entry


def test_import_into_another_kind_of_store_is_equal_and_idempotent(
    exported: tuple[Path, list[str], dict[str, Any]], tmp_path: Path
) -> None:
    out, ids, held = exported
    with SQLiteStore(tmp_path / "dst.db") as dst:
        report = import_(dst, out)
        assert (report.copied, report.failed) == (len(ids), {})
        assert contents(dst, ids) == held
        assert import_(dst, out).same == len(ids)
        renamed = import_(dst, out, rename_prefix="b-")
        assert renamed.copied == len(ids) and dst.load("b-run-0001-child").parent == "b-run-0001"


def test_export_to_a_stream_and_of_chosen_ids(tmp_path: Path) -> None:
    with MemoryStore() as src:
        ids = make_runs(src, 3)
        stream = io.BytesIO()
        count, _, missing, *_ = export(src, stream, ids=[ids[1], "gone"])
        assert (count, missing) == (1, ["gone"])
        (tmp_path / "one.jsonl").write_bytes(stream.getvalue())
        dst = MemoryStore()
        assert import_(dst, tmp_path / "one.jsonl").copied == 1
        assert [r.id for r in dst.list()] == [ids[1]]


def _refused(path: Path, match: str, error: type[Exception] = ExportFileError) -> None:
    """Refused by the check, and nothing imported."""
    dst = MemoryStore()
    with pytest.raises(error, match=match):
        import_(dst, path)
    assert dst.list() == []


def test_a_truncated_file_is_refused(exported: tuple[Path, list[str], dict[str, Any]]) -> None:
    out = exported[0]
    data = out.read_bytes()
    out.write_bytes(data[: data.rindex(b"\n", 0, -1) + 1])  # the trailer gone
    _refused(out, "truncated")
    out.write_bytes(data[: len(data) // 2])  # cut mid-line
    _refused(out, "truncated")


def test_an_edited_file_is_refused(exported: tuple[Path, list[str], dict[str, Any]]) -> None:
    out = exported[0]
    out.write_bytes(out.read_bytes().replace(b"summarise", b"summarize", 1))
    _refused(out, "checksum")


def test_a_dropped_entry_is_refused_even_with_a_fixed_checksum(
    exported: tuple[Path, list[str], dict[str, Any]],
) -> None:
    out = exported[0]
    lines = out.read_bytes().splitlines(keepends=True)
    del lines[1 + orjson.loads(lines[1])["entries"]]  # the last entry of the first State
    body = b"".join(lines[:-1])
    trailer = orjson.loads(lines[-1])
    trailer["sha256"] = hashlib.sha256(body).hexdigest()
    out.write_bytes(body + orjson.dumps(trailer) + b"\n")
    _refused(out, "lacks its last 1 entries")


def _with_fixed_checksum(lines: list[bytes]) -> bytes:
    body = b"".join(lines[:-1])
    trailer = orjson.loads(lines[-1])
    trailer["sha256"] = hashlib.sha256(body).hexdigest()
    return body + orjson.dumps(trailer) + b"\n"


@pytest.mark.parametrize("edit", ["swapped", "renumbered"])
def test_entries_out_of_order_are_refused_naming_the_state_and_line(
    edit: str, exported: tuple[Path, list[str], dict[str, Any]]
) -> None:
    out = exported[0]
    lines = out.read_bytes().splitlines(keepends=True)
    state = orjson.loads(lines[1])["state"]
    if edit == "swapped":  # lines 3 and 4 hold seq 0 and seq 1 of the first State
        lines[2], lines[3] = lines[3], lines[2]
    else:
        entry = orjson.loads(lines[3])
        entry["entry"]["seq"] = 7
        lines[3] = orjson.dumps(entry) + b"\n"
    out.write_bytes(_with_fixed_checksum(lines))
    expected = "line 3" if edit == "swapped" else "line 4"
    _refused(out, f"{expected}: State {state!r} has an entry with seq")


def test_a_newer_version_or_another_file_is_refused(exported: tuple[Path, list[str], dict[str, Any]]) -> None:
    out = exported[0]
    data = out.read_bytes()
    out.write_bytes(data.replace(b'"version":3', b'"version":4', 1))
    _refused(out, "newer statekeep", UnsupportedFormatError)
    out.write_bytes(b'{"some": "json"}\n')
    _refused(out, "not a statekeep export")
    out.write_bytes(b"")
    _refused(out, "empty")


def test_verify_holds_one_line_at_a_time() -> None:
    """verify() takes any iterable of lines: a generator is consumed once, in order."""
    stream = io.BytesIO()
    with MemoryStore() as src:
        make_runs(src, 2)
        export(src, stream)
    header = verify(line for line in io.BytesIO(stream.getvalue()))
    assert header.states == 4  # two runs, a child, a fork


def test_the_file_holds_no_retention_stamp_of_the_exporting_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "work.db", retention=timedelta(hours=1)) as src:
        ids = make_runs(src, 2)
        export(src, tmp_path / "runs.jsonl")
    lines = [orjson.loads(line) for line in (tmp_path / "runs.jsonl").read_bytes().splitlines()]
    assert "retention stamp" in lines[0]["holds"]
    snapshots = {line["state"]: line["snapshot"] for line in lines if "state" in line}
    assert snapshots[ids[0]]["expires_at"] is None and "expiry" not in snapshots[ids[0]]
    assert snapshots[ids[1]]["expires_at"] is not None  # keep_for: the State's own
    with FileStore(tmp_path / "archive") as archive:
        import_(archive, tmp_path / "runs.jsonl")
        assert archive.load(ids[0]).expires_at is None


def test_agent_memory_travels_in_an_export_file(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as src:
        ids = make_runs(src, 2)
        src.memory().put("user-prefs", {"tone": "terse"})
        src.memory("team").put("style", "short")
        plain = export(src, tmp_path / "plain.jsonl")
        assert (
            plain.memory == 0
            and orjson.loads((tmp_path / "plain.jsonl").read_bytes().splitlines()[0])["version"] == 3
        )
        both = export(src, tmp_path / "runs.jsonl", memory_scopes=["default", "team"])
        assert (both.states, both.memory) == (len(ids), 2)
    head = orjson.loads((tmp_path / "runs.jsonl").read_bytes().splitlines()[0])
    assert (
        head["version"] == 3  # 2 would do for memory alone; its States carry incarnations too
        and head["memory_scopes"] == ["default", "team"]
        and "agent memory" in head["holds"]
    )
    with SQLiteStore(tmp_path / "dst.db") as dst:
        report = import_(dst, tmp_path / "runs.jsonl", rename_prefix="x-")
        assert report.copied == len(ids) and report.memory["team"].copied == 1
        assert sorted(r.id for r in dst.list()) == sorted("x-" + i for i in ids)  # keys are no States
        assert dst.memory().get("user-prefs").value == {"tone": "terse"}  # never renamed
        assert dst.memory("team").get("style").value == "short"
        assert import_(dst, tmp_path / "runs.jsonl", rename_prefix="x-").memory["default"].same == 1


@pytest.mark.parametrize(
    "left_out", [{"state": "run-1"}, [{"state": "bad id!", "why": "x"}], [{"state": "run-1"}], ["run-1"]]
)
def test_a_trailer_whose_list_of_what_was_left_out_is_not_one_is_refused(
    exported: tuple[Path, list[str], dict[str, Any]], left_out: Any
) -> None:
    out = exported[0]
    lines = out.read_bytes().splitlines(keepends=True)
    trailer = orjson.loads(lines[-1])
    out.write_bytes(b"".join(lines[:-1]) + orjson.dumps({**trailer, "left_out": left_out}) + b"\n")
    _refused(out, "left_out")
    good = [{"state": "run-1", "why": "damaged"}, {"state": "k", "memory": "team", "why": "too"}]
    out.write_bytes(b"".join(lines[:-1]) + orjson.dumps({**trailer, "left_out": good}) + b"\n")
    with MemoryStore() as dst:
        report = import_(dst, out)
        assert report.left_out == {"run-1": "damaged", "memory team: k": "too"}
        assert len(dst.list()) == len(exported[1])
