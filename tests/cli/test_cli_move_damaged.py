"""``copy``, ``export`` and ``import`` with damaged States in the source: the others move,
each State left behind is named with why, exit status 3 at the end; an export file records
what it left out (in its trailer) and ``import`` says so."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from statekeep import FileStore, Store
from statekeep.cli import main
from statekeep.stores._urls import open_store
from tests.support.move_runs import contents, make_runs
from tests.support.older import REPO, run_older
from tests.support.stores import URL_KINDS, plant_snapshot, store_url


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def damage(kind: str, store: Store, state_id: str) -> None:
    """Damage one State for real, as a disk fault or a hand edit would."""
    if kind == "file":  # a line in the middle of its log: its checksum no longer matches
        log = Path(str(store.path)) / state_id / "log.jsonl"
        lines = log.read_bytes().splitlines(keepends=True)
        assert b"gpt-x" in lines[2], lines[2]
        lines[2] = lines[2].replace(b"gpt-x", b"gpt-y")
        log.write_bytes(b"".join(lines))
    elif kind == "sqlite":  # its snapshot column no longer JSON
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE states SET snapshot = '{not json' WHERE id = ?", (state_id,))
        conn.close()
    else:
        asyncio.run(plant_snapshot(store, state_id, b"{not json"))


@pytest.fixture(params=URL_KINDS)
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str], list[str]]:
    """A store of some kind (its URL) holding runs (their ids), two of them damaged."""
    url = store_url(request.param, tmp_path, "damaged")
    with open_store(url) as store:
        ids = make_runs(store, 7)
        bad = [ids[3], ids[6]]  # run-0002 and run-0005
        for state_id in bad:
            damage(request.param, store, state_id)
    return url, ids, bad


def named_each(stderr: str, bad: list[str], words: str) -> None:
    """One line per State left behind, naming it and saying why."""
    lines = stderr.splitlines()
    assert len(lines) == len(bad), stderr
    for state_id in bad:
        (line,) = [line for line in lines if repr(state_id) in line]
        assert words in line, line


def test_copy_goes_past_damaged_states_and_names_each_left_behind(
    damaged: tuple[str, list[str], list[str]], tmp_path: Path
) -> None:
    url, ids, bad = damaged
    result = cli("copy", url, str(tmp_path / "dst"))
    assert result.exit_code == 3, result.output
    assert result.stdout == f"copy: {len(ids) - 2} copied, 0 extended, 0 already there (skipped), 2 failed\n"
    named_each(result.stderr, bad, "cannot be read in the source")
    good = [i for i in ids if i not in bad]
    with open_store(url, create=False) as src, FileStore(tmp_path / "dst") as dst:
        assert contents(dst, good) == contents(src, good)
        assert [dst.read(i) for i in bad] == [None, None]
    quiet = cli("copy", url, str(tmp_path / "dst"), "-q")  # the summary goes; the names stay
    assert quiet.exit_code == 3 and quiet.stdout == ""
    named_each(quiet.stderr, bad, "cannot be read in the source")


def test_export_goes_past_damaged_states_records_them_and_import_says_so(
    damaged: tuple[str, list[str], list[str]], tmp_path: Path
) -> None:
    url, ids, bad = damaged
    out = tmp_path / "runs.jsonl"
    result = cli("export", "--all", "-o", str(out), "--store", url)
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith(f"export: {len(ids) - 2} States (")
    named_each(result.stderr, bad, "cannot be read in the source")
    trailer = orjson.loads(out.read_bytes().splitlines()[-1])
    assert sorted(item["state"] for item in trailer["left_out"]) == sorted(bad)
    assert all(item["why"] for item in trailer["left_out"])
    imported = cli("import", str(out), "--store", str(tmp_path / "dst"))
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.startswith(f"import: {len(ids) - 2} copied, 0 extended")
    named_each(imported.stderr, bad, "the export left it out")
    good = [i for i in ids if i not in bad]
    with open_store(url, create=False) as src, FileStore(tmp_path / "dst") as dst:
        assert contents(dst, good) == contents(src, good)


def older_runs(folder: Path, count: int) -> list[str]:
    """:func:`make_runs` in a FileStore by the last release's statekeep (States without an
    incarnation: this release exports them in a format that release reads)."""
    made = run_older(
        f"""
        import sys
        sys.path.append({str(REPO)!r})
        from statekeep import FileStore
        from tests.support.move_runs import make_runs
        store = FileStore({str(folder)!r})
        print(" ".join(make_runs(store, {count})))
        store.close()
        """
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.split()


def test_a_file_exported_before_the_trailer_could_list_what_was_left_out_still_imports(
    tmp_path: Path,
) -> None:
    ids = older_runs(tmp_path / "src", 3)
    old = tmp_path / "old.jsonl"
    written = run_older(
        f"""
        from click.testing import CliRunner
        from statekeep.cli import main
        result = CliRunner().invoke(main, ["export", "--all", "-o", {str(old)!r}, "--store", {str(tmp_path / "src")!r}])
        assert result.exit_code == 0, result.output
        """
    )
    assert written.returncode == 0, written.stderr
    imported = cli("import", str(old), "--store", str(tmp_path / "dst"))
    assert imported.exit_code == 0 and imported.stderr == "", imported.output
    assert imported.stdout == f"import: {len(ids)} copied, 0 extended, 0 already there (skipped)\n"


def test_an_older_statekeep_imports_the_states_of_a_file_that_left_some_out(tmp_path: Path) -> None:
    # States it made (a State made by this release has an incarnation: export format 3,
    # which the older refuses, as tests/store/test_upgrade_incarnation.py checks).
    ids = older_runs(tmp_path / "src", 3)
    with FileStore(tmp_path / "src") as store:
        damage("file", store, ids[1])
    out = tmp_path / "runs.jsonl"
    assert cli("export", "--all", "-o", str(out), "--store", str(tmp_path / "src")).exit_code == 3
    imported = run_older(
        f"""
        from click.testing import CliRunner
        from statekeep.cli import main
        result = CliRunner().invoke(main, ["import", {str(out)!r}, "--store", {str(tmp_path / "dst")!r}])
        print(result.exit_code, result.output)
        """
    )
    assert imported.stdout == f"0 import: {len(ids) - 1} copied, 0 extended, 0 already there (skipped)\n\n"
    with FileStore(tmp_path / "src") as src, FileStore(tmp_path / "dst") as dst:
        good = [i for i in ids if i != ids[1]]
        assert contents(dst, good) == contents(src, good)


@pytest.mark.parametrize("command", ["copy", "import"])
def test_a_damaged_state_in_the_destination_is_left_as_it_is_and_named(command: str, tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as src:
        ids = make_runs(src, 4)
    assert cli("copy", str(tmp_path / "src"), str(tmp_path / "dst"), "--ids", ids[3]).exit_code == 0
    with FileStore(tmp_path / "dst") as dst:
        damage("file", dst, ids[3])
    broken = (tmp_path / "dst" / ids[3] / "log.jsonl").read_bytes()
    out = tmp_path / "runs.jsonl"
    assert cli("export", "--all", "-o", str(out), "--store", str(tmp_path / "src")).exit_code == 0
    if command == "copy":
        result = cli("copy", str(tmp_path / "src"), str(tmp_path / "dst"))
    else:
        result = cli("import", str(out), "--store", str(tmp_path / "dst"))
    assert result.exit_code == 3, result.output
    named_each(result.stderr, [ids[3]], "cannot be read in the destination")
    assert (tmp_path / "dst" / ids[3] / "log.jsonl").read_bytes() == broken
    good = [i for i in ids if i != ids[3]]
    with FileStore(tmp_path / "src") as src, FileStore(tmp_path / "dst") as dst:
        assert contents(dst, good) == contents(src, good)


def test_states_left_behind_and_ids_not_in_the_source_are_both_named(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as store:
        ids = make_runs(store, 3)
        damage("file", store, ids[1])
    chosen = [ids[0], ids[1], "no-such-run"]
    copied = cli(
        "copy", str(tmp_path / "src"), str(tmp_path / "dst"), *(a for i in chosen for a in ("--ids", i))
    )
    exported = cli("export", *chosen, "-o", str(tmp_path / "runs.jsonl"), "--store", str(tmp_path / "src"))
    for result in (copied, exported):
        assert result.exit_code == 3, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 2 and "no-such-run" in lines[0] and repr(ids[1]) in lines[1], result.stderr
