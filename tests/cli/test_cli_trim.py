"""``statekeep trim ID --before SEQ``: through the CLI runner, on a FileStore and a SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeep import FileStore, SQLiteStore, Store
from statekeep.testing._trim import compacted_run
from tests.cli.test_cli import cli, on_terminal


def made(kind: str, tmp_path: Path) -> tuple[Store, str]:
    if kind == "file":
        return FileStore(tmp_path / "store"), str(tmp_path / "store")
    return SQLiteStore(tmp_path / "runs.db"), f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture(params=["file", "sqlite"])
def saved(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, int]:
    store, url = made(request.param, tmp_path)
    with store:
        state, through = compacted_run("run-1")
        store.save(state)
    return url, through


def first_seq(url: str) -> int:
    from statekeep import open_store

    with open_store(url) as store:
        record = store.read("run-1")
        assert record is not None
        return int(record.entries[0]["seq"])


def test_trim_removes_the_entries_and_says_so(saved: tuple[str, int]) -> None:
    url, through = saved
    result = cli("trim", "run-1", "--before", str(through + 1), "--store", url, "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"trimmed run-1: its history starts at its base record, seq {through}\n"
    assert first_seq(url) == through
    shown = cli("show", "run-1", "--store", url)
    assert shown.exit_code == 0, shown.output
    assert f"trimmed: stands for seqs 0 to {through}, turn 6 · plan the trip" in shown.stdout


def test_trim_past_the_compaction_is_a_usage_error_and_changes_nothing(saved: tuple[str, int]) -> None:
    url, through = saved
    result = cli("trim", "run-1", "--before", str(through + 2), "--store", url, "--yes")
    assert result.exit_code == 2 and f"at most {through + 1}" in result.stderr
    assert first_seq(url) == 0


def test_trim_of_an_unknown_id_or_without_before(saved: tuple[str, int]) -> None:
    url, _ = saved
    result = cli("trim", "nobody", "--before", "3", "--store", url, "--yes")
    assert result.exit_code == 1 and "no State 'nobody'" in result.stderr
    result = cli("trim", "run-1", "--store", url, "--yes")
    assert result.exit_code == 2 and "--before" in result.stderr
    result = cli("trim", "run-1", "--before", "0", "--store", url, "--yes")
    assert result.exit_code == 2 and "before must be a seq >= 1" in result.stderr
    assert first_seq(url) == 0


def test_trim_without_a_terminal_needs_yes(saved: tuple[str, int]) -> None:
    url, through = saved
    result = cli("trim", "run-1", "--before", str(through + 1), "--store", url)
    assert result.exit_code == 2 and "pass --yes" in result.stderr
    assert first_seq(url) == 0


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 1)])
def test_trim_asks_on_a_terminal(saved: tuple[str, int], answer: str, code: int) -> None:
    url, through = saved
    returncode, _, err = on_terminal(answer, "trim", "run-1", "--before", str(through + 1), "--store", url)
    assert returncode == code, err
    assert first_seq(url) == (through if code == 0 else 0)


def test_a_trimmed_state_copies_exports_and_imports(saved: tuple[str, int], tmp_path: Path) -> None:
    from statekeep import open_store

    url, through = saved
    assert cli("trim", "run-1", "--before", str(through + 1), "--store", url, "--yes").exit_code == 0
    copied = f"sqlite:///{tmp_path / 'copy.db'}"
    result = cli("copy", url, copied)
    assert result.exit_code == 0, result.output
    exported = tmp_path / "runs.jsonl"
    assert cli("export", "run-1", "--store", url, "-o", str(exported)).exit_code == 0
    result = cli("import", str(exported), "--store", str(tmp_path / "imported"))
    assert result.exit_code == 0, result.output
    with (
        open_store(url) as source,
        open_store(copied) as copy,
        open_store(str(tmp_path / "imported")) as back,
    ):
        want = source.load("run-1")
        for store in (copy, back):
            got = store.load("run-1")
            assert got.history == want.history and got.data == want.data
            assert got.history[0]["seq"] == through
