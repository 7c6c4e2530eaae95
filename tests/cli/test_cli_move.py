"""``statekeep export``, ``import`` and ``copy`` as a user runs them: summaries, exit codes,
progress on a terminal, and a copy killed with SIGKILL then run again."""

from __future__ import annotations

import base64
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from statekeep import FileStore, Keyring, SQLiteStore, State
from statekeep.cli import main
from tests.cli.test_cli_protect import run_on_a_terminal
from tests.support.move_runs import contents, cut_short_and_leased, make_runs

KEY = os.urandom(32)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def source(tmp_path: Path) -> tuple[str, list[str]]:
    with FileStore(tmp_path / "src") as store:
        return str(tmp_path / "src"), make_runs(store, 5, big=1)


def test_copy_copies_then_skips_and_says_so(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    dst = f"sqlite:///{tmp_path}/dst.db"
    first = cli("copy", src, dst)
    assert first.exit_code == 0, first.output
    assert first.output == f"copy: {len(ids)} copied, 0 extended, 0 already there (skipped)\n"
    again = cli("copy", src, dst)
    assert again.output == f"copy: 0 copied, 0 extended, {len(ids)} already there (skipped)\n"
    with FileStore(src) as a, SQLiteStore(tmp_path / "dst.db") as b:
        assert contents(b, ids) == contents(a, ids)
    quiet = cli("copy", src, dst, "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


def test_copy_by_ids_and_by_filter(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    assert cli("copy", src, str(tmp_path / "one"), "--ids", ids[1]).output.startswith("copy: 1 copied")
    by_label = cli("copy", src, str(tmp_path / "team"), "--filter", "team=a")
    by_option = cli("copy", src, str(tmp_path / "team2"), "--label", "team=a")
    with FileStore(src) as a:
        wanted = len(a.list(labels={"team": "a"}))
    assert by_label.output.startswith(f"copy: {wanted} copied") and by_option.output == by_label.output
    finished = cli("copy", src, str(tmp_path / "done"), "--filter", "status=finished")
    with FileStore(tmp_path / "done") as d:
        assert {r.status for r in d.list()} == {"finished"}
    assert finished.exit_code == 0


def test_a_state_that_differs_is_refused_by_name_and_left_as_it_was(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, ids = source
    with FileStore(tmp_path / "dst") as dst:
        mine = State("my own run", id=ids[2])
        dst.save(mine)
        before = contents(dst, [ids[2]])
    result = CliRunner().invoke(main, ["copy", src, str(tmp_path / "dst")])
    assert result.exit_code == 3
    assert f"State {ids[2]!r} differs in the destination" in result.stderr
    assert "--rename-prefix" in result.stderr and len(result.stderr.splitlines()) == 1
    with FileStore(tmp_path / "dst") as dst:
        assert contents(dst, [ids[2]]) == before
        assert len(dst.list()) == len(ids)  # the others were copied
    renamed = cli("copy", src, str(tmp_path / "dst"), "--rename-prefix", "moved-")
    assert renamed.exit_code == 0 and renamed.output.startswith(f"copy: {len(ids)} copied")


def test_exit_codes_for_missing_states_and_bad_usage(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, _ = source
    missing = cli("copy", src, str(tmp_path / "d"), "--ids", "no-such-run")
    assert missing.exit_code == 1 and "no-such-run" in missing.stderr
    assert cli("export", "-o", str(tmp_path / "x.jsonl"), "--store", src).exit_code == 2  # nothing chosen
    assert cli("export", "a", "--all", "-o", str(tmp_path / "x.jsonl"), "--store", src).exit_code == 2
    assert cli("copy", src, str(tmp_path / "d"), "--rename-prefix", "no/slash").exit_code == 2
    assert cli("copy", src, src).exit_code == 2
    assert cli("copy", str(tmp_path / "nowhere"), str(tmp_path / "d")).exit_code == 1


def test_export_then_import_elsewhere_and_again(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    out = tmp_path / "runs.jsonl"
    exported = cli("export", "--all", "-o", str(out), "--store", src)
    assert exported.exit_code == 0 and exported.output.startswith(f"export: {len(ids)} States (")
    dst = f"sqlite:///{tmp_path}/dst.db"
    imported = cli("import", str(out), "--store", dst)
    assert imported.output == f"import: {len(ids)} copied, 0 extended, 0 already there (skipped)\n"
    assert cli("import", str(out), "--store", dst).output.endswith(f"{len(ids)} already there (skipped)\n")
    with FileStore(src) as a, SQLiteStore(tmp_path / "dst.db") as b:
        assert contents(b, ids) == contents(a, ids)


def test_export_to_stdout_with_filters(source: tuple[str, list[str]]) -> None:
    src, _ = source
    result = CliRunner().invoke(main, ["export", "--status", "finished", "-o", "-", "--store", src])
    lines = result.stdout_bytes.splitlines()
    assert orjson.loads(lines[0])["format"] == "statekeep-export"
    shown = [orjson.loads(line)["snapshot"]["finished"] for line in lines if line.startswith(b'{"state"')]
    assert shown and all(shown)
    assert result.stderr.startswith(f"export: {len(shown)} States")


def test_a_damaged_file_is_a_data_error_and_imports_nothing(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, ids = source
    out = tmp_path / "runs.jsonl"
    cli("export", *ids, "-o", str(out), "--store", src)
    out.write_bytes(out.read_bytes().replace(b"please do it", b"please do IT", 1))
    result = cli("import", str(out), "--store", str(tmp_path / "dst"))
    assert result.exit_code == 3 and "checksum" in result.stderr and "export it again" in result.stderr
    assert not (tmp_path / "dst").exists() or not any((tmp_path / "dst").iterdir())
    out.write_bytes(out.read_bytes()[:-30])
    cut = cli("import", str(out), "--store", str(tmp_path / "dst"))
    assert cut.exit_code == 3 and "truncated" in cut.stderr


def test_encrypted_source_exported_and_copied_clear_then_sealed_again(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_bytes(orjson.dumps({"current": "k1", "keys": {"k1": base64.b64encode(KEY).decode()}}))
    with FileStore(tmp_path / "sealed", encrypt=Keyring({"k1": KEY}, current="k1")) as sealed:
        ids = make_runs(sealed, 3)
        held = contents(sealed, ids)
    sealed_url = str(tmp_path / "sealed")
    without = cli("copy", sealed_url, str(tmp_path / "clear0"))
    assert without.exit_code == 2 and "--src-keys" in without.stderr
    clear = cli("copy", sealed_url, str(tmp_path / "clear"), "--src-keys", str(keys), "--plaintext")
    assert clear.exit_code == 0
    with FileStore(tmp_path / "clear") as clear:
        assert contents(clear, ids) == held
    out = tmp_path / "runs.jsonl"
    assert cli("export", "--all", "-o", str(out), "--store", sealed_url, "--keys", str(keys)).exit_code == 0
    assert b"summarise the report" in out.read_bytes()
    back = f"sqlite:///{tmp_path}/back.db"
    assert cli("import", str(out), "--store", back, "--keys", str(keys)).exit_code == 0
    assert b"summarise" not in (tmp_path / "back.db").read_bytes()
    with SQLiteStore(tmp_path / "back.db", encrypt=Keyring({"k1": KEY}, current="k1")) as again:
        assert contents(again, ids) == held


def test_progress_bars_on_a_terminal_and_none_when_piped(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, ids = source
    code, shown = run_on_a_terminal(["copy", src, str(tmp_path / "dst")])
    assert code == 0 and "copying" in shown and "100%" in shown, shown
    code, shown = run_on_a_terminal(["export", "--all", "-o", str(tmp_path / "x.jsonl"), "--store", src])
    assert code == 0 and "exporting" in shown and "100%" in shown, shown
    code, shown = run_on_a_terminal(["import", str(tmp_path / "x.jsonl"), "--store", str(tmp_path / "d2")])
    assert code == 0 and "importing" in shown and "100%" in shown, shown
    code, shown = run_on_a_terminal(["copy", src, str(tmp_path / "dst3"), "--quiet"])
    assert code == 0 and shown == ""
    piped: Any = subprocess.run(
        [sys.executable, "-m", "statekeep", "copy", src, str(tmp_path / "dst4")],
        capture_output=True,
        timeout=120,
    )
    assert piped.returncode == 0 and piped.stderr == b""
    assert piped.stdout.decode() == f"copy: {len(ids)} copied, 0 extended, 0 already there (skipped)\n"


def test_a_copy_killed_with_sigkill_then_run_again_ends_with_every_state_equal(tmp_path: Path) -> None:
    with FileStore(tmp_path / "src") as store:
        ids = make_runs(store, 300, big=12, big_size=2200)
    dst_path = tmp_path / "dst.db"
    args = [sys.executable, "-m", "statekeep", "copy", str(tmp_path / "src"), f"sqlite:///{dst_path}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while True:  # wait until the destination holds some States, then kill the copy
            assert proc.poll() is None, "the copy ended before it could be killed"
            if dst_path.exists():
                with SQLiteStore(dst_path) as peek:
                    if peek.list(limit=1):
                        break
            assert time.monotonic() < deadline, "the copy wrote nothing in 120 s"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with SQLiteStore(dst_path) as dst:
        left = len(dst.list())
    assert 0 < left < len(ids)
    again = subprocess.run(args, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr
    copied, extended, same = (int(w) for w in again.stdout.split()[1::2][:3])
    assert same == left and copied + extended + same == len(ids), again.stdout  # the listed ones were whole
    with FileStore(tmp_path / "src") as src, SQLiteStore(dst_path) as dst:
        assert contents(dst, ids) == contents(src, ids)


def test_a_rename_prefix_too_long_is_bad_usage_and_writes_nothing(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, _ = source
    with FileStore(src) as store:
        long_one = State("long", id="a" * 120)
        long_one.add_user("x")
        store.save(long_one)
    for args in (
        ["copy", src, f"sqlite:///{tmp_path}/dst.db", "--rename-prefix", "imported-"],
        [
            "import",
            str(tmp_path / "runs.jsonl"),
            "--store",
            f"sqlite:///{tmp_path}/dst.db",
            "--rename-prefix",
            "imported-",
        ],
    ):
        if args[0] == "import":
            assert cli("export", "--all", "-o", str(tmp_path / "runs.jsonl"), "--store", src).exit_code == 0
        result = cli(*args)
        assert result.exit_code == 2, result.output
        assert "--rename-prefix 'imported-' makes 1 State ids longer" in result.stderr
        assert len(result.stderr.splitlines()) == 1
        with SQLiteStore(tmp_path / "dst.db") as dst:
            assert dst.list() == []


@pytest.mark.parametrize("command", ["copy", "import"])
def test_a_leased_state_fails_with_cli_words_and_the_others_are_moved(
    command: str, source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, ids = source
    with FileStore(src) as store, SQLiteStore(tmp_path / "dst.db") as dst:
        cut_short_and_leased(store, dst, ids[2])
    dst_url, out = f"sqlite:///{tmp_path}/dst.db", str(tmp_path / "runs.jsonl")
    if command == "copy":
        result = cli("copy", src, dst_url)
    else:
        assert cli("export", "--all", "-o", out, "--store", src).exit_code == 0
        result = cli("import", out, "--store", dst_url)
    assert result.exit_code == 3
    assert f"State {ids[2]!r}" in result.stderr and "worker-1" in result.stderr
    assert "lease=" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert "run it again" in result.stderr and "the copy" not in result.stderr  # import's words too
    with SQLiteStore(tmp_path / "dst.db") as dst:
        assert len(dst.list()) == len(ids) - 1


def test_keys_from_the_environment_do_not_silently_make_plaintext_copies(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    document = orjson.dumps({"current": "k1", "keys": {"k1": base64.b64encode(KEY).decode()}}).decode()
    keys.write_text(document)
    with FileStore(tmp_path / "sealed", encrypt=Keyring({"k1": KEY}, current="k1")) as sealed:
        ids = make_runs(sealed, 2)
    sealed_url, env = str(tmp_path / "sealed"), {"STATEKEEP_KEYS": document}
    refused = CliRunner().invoke(main, ["copy", sealed_url, str(tmp_path / "clear")], env=env)
    assert refused.exit_code == 2 and "--dst-keys" in refused.stderr and "--plaintext" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and not (tmp_path / "clear").exists()
    sealing = ["copy", sealed_url, str(tmp_path / "sealed2"), "--dst-keys", str(keys)]
    assert CliRunner().invoke(main, sealing, env=env).exit_code == 0
    clear = ["copy", sealed_url, str(tmp_path / "clear"), "--plaintext"]
    assert CliRunner().invoke(main, clear, env=env).exit_code == 0
    with FileStore(tmp_path / "clear") as copied:
        assert len(copied.list()) == len(ids)
    # the destination is sealed, its keys not given: the hint names the destination's option
    again = cli("copy", sealed_url, str(tmp_path / "sealed2"), "--src-keys", str(keys), "--plaintext")
    assert again.exit_code == 2 and "give the destination's keys with --dst-keys" in again.stderr


def test_a_sqlite_database_that_is_not_a_store_is_refused_unchanged(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, _ = source
    app = tmp_path / "app.db"
    with sqlite3.connect(app) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    before = app.read_bytes()
    assert cli("export", "--all", "-o", str(tmp_path / "runs.jsonl"), "--store", src).exit_code == 0
    for args in (
        ["copy", src, f"sqlite:///{app}"],
        ["import", str(tmp_path / "runs.jsonl"), "--store", f"sqlite:///{app}"],
    ):
        result = cli(*args)
        assert result.exit_code == 3, result.output
        assert "not" in result.stderr and "users" in result.stderr and len(result.stderr.splitlines()) == 1
        assert app.read_bytes() == before


def test_all_moves_states_without_a_snapshot_too(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    with FileStore(src) as store:
        store.write(
            "raw-nosnap",
            [{"seq": 0, "kind": "note", "text": "x", "at": "2026-01-01T00:00:00+00:00"}],
            None,
            create=True,
        )
    copied = cli("copy", src, f"sqlite:///{tmp_path}/dst.db")
    assert copied.exit_code == 0 and copied.output.startswith(f"copy: {len(ids) + 1} copied")
    exported = cli("export", "--all", "-o", str(tmp_path / "runs.jsonl"), "--store", src)
    assert exported.output.startswith(f"export: {len(ids) + 1} States")
    with SQLiteStore(tmp_path / "dst.db") as dst:
        assert dst.read("raw-nosnap") is not None


def test_export_file_mode_folder_and_one_state(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    new = tmp_path / "new.jsonl"
    one = cli("export", ids[1], "-o", str(new), "--store", src)
    assert one.output.startswith("export: 1 State (")
    assert new.stat().st_mode & 0o777 == 0o600  # the States in clear: the owner's only
    shared = tmp_path / "shared.jsonl"
    shared.write_text("")
    shared.chmod(0o644)
    assert cli("export", "--all", "-o", str(shared), "--store", src).exit_code == 0
    assert shared.stat().st_mode & 0o777 == 0o644 and shared.stat().st_size > 0
    nowhere = cli("export", "--all", "-o", str(tmp_path / "no" / "such" / "x.jsonl"), "--store", src)
    assert nowhere.exit_code == 1 and "no such folder" in nowhere.stderr
    assert len(nowhere.stderr.splitlines()) == 1


def test_export_to_a_reader_that_goes_away_exits_0_quietly(source: tuple[str, list[str]]) -> None:
    src, _ = source  # one State has several thousand entries: more than a pipe holds
    args = [sys.executable, "-m", "statekeep", "export", "--all", "-o", "-", "--store", src, "-q"]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b'{"format"')
        proc.stdout.close()  # as `| head -1` does
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None and proc.stderr.read() == b""


def test_copy_carries_agent_memory(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    with FileStore(src) as store:
        store.memory().put("user-prefs", {"tone": "terse"})
        store.memory("team").put("style", "short")
    whole = cli("copy", src, str(tmp_path / "all"))
    assert whole.exit_code == 0 and "memory 'default': 1 copied" in whole.output
    some = cli("copy", src, str(tmp_path / "some"), "--ids", ids[0], "--memory-scope", "team")
    assert some.exit_code == 0
    with FileStore(tmp_path / "all") as every, FileStore(tmp_path / "some") as chosen:
        assert (
            every.memory().get("user-prefs").value == {"tone": "terse"}
            and every.memory("team").get("style") is None
        )
        assert (
            chosen.memory("team").get("style").value == "short" and chosen.memory().get("user-prefs") is None
        )
    assert cli("copy", src, str(tmp_path / "x"), "--memory-scope", "bad scope!").exit_code == 2


def test_export_and_import_carry_agent_memory(source: tuple[str, list[str]], tmp_path: Path) -> None:
    src, ids = source
    with FileStore(src) as store:
        store.memory().put("user-prefs", {"tone": "terse"})
    out = tmp_path / "runs.jsonl"
    exported = cli("export", "--all", "-o", str(out), "--store", src)
    assert exported.output.startswith(f"export: {len(ids)} States and 1 agent memory keys (")
    imported = cli("import", str(out), "--store", str(tmp_path / "dst"))
    assert imported.exit_code == 0 and "memory 'default': 1 copied" in imported.output
    with FileStore(tmp_path / "dst") as dst:
        assert dst.memory().get("user-prefs").value == {"tone": "terse"}
    one = cli("export", ids[0], "-o", str(tmp_path / "one.jsonl"), "--store", src)
    assert one.output.startswith("export: 1 State (")  # chosen States: no memory unless asked


def test_import_dash_reads_what_export_dash_writes_and_checks_it_first(
    source: tuple[str, list[str]], tmp_path: Path
) -> None:
    src, ids = source
    dst = f"sqlite:///{tmp_path}/dst.db"
    statekeep = [sys.executable, "-m", "statekeep"]
    with subprocess.Popen(
        [*statekeep, "export", "--all", "-o", "-", "--store", src, "-q"], stdout=subprocess.PIPE
    ) as out:
        into = subprocess.run(
            [*statekeep, "import", "-", "--store", dst], stdin=out.stdout, capture_output=True, timeout=120
        )
        assert out.stdout is not None
        out.stdout.close()
        assert out.wait(timeout=60) == 0
    assert into.returncode == 0, into.stderr
    assert into.stdout.decode() == f"import: {len(ids)} copied, 0 extended, 0 already there (skipped)\n"
    with FileStore(src) as a, SQLiteStore(tmp_path / "dst.db") as b:
        assert contents(b, ids) == contents(a, ids)
    exported = cli("export", "--all", "-o", "-", "--store", src, "-q").stdout_bytes
    edited = exported.replace(b"please do it", b"please do IT", 1)
    damaged = CliRunner().invoke(main, ["import", "-", "--store", str(tmp_path / "d2")], input=edited)
    assert damaged.exit_code == 3 and "checksum" in damaged.stderr, damaged.output
    assert not (tmp_path / "d2").exists() or not any((tmp_path / "d2").iterdir())


def test_copy_and_import_refuse_memory_as_the_store_they_write_to(source: tuple[str, list[str]]) -> None:
    # A memory:// store is new, empty and private to the command's own process: what a copy
    # or an import wrote there would be gone as the command ends, which "N copied" hid.
    src, _ = source
    exported = cli("export", "--all", "-o", "-", "--store", src, "-q").stdout_bytes
    runs = [
        cli("copy", src, "memory://"),
        CliRunner().invoke(main, ["import", "-", "--store", "memory://"], input=exported),
    ]
    for result in runs:
        assert result.exit_code == 2, result.output
        assert "memory://" in result.stderr and "copied" not in result.stdout, result.output
