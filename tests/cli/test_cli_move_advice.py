"""What ``copy``, ``export`` and ``import`` tell the user to do speaks in the options that
command has (and the commands it names, in theirs) and in full paths; and keys that open a
source never make clear copies unasked."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner, Result

from statekeep import FileStore, Keyring, State
from statekeep.cli import main
from tests.support.move_runs import make_runs

KEY = os.urandom(32)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def options_of(command: str) -> set[str]:
    found = main.commands[command]
    assert isinstance(found, click.Command)
    return {opt for param in found.params for opt in param.opts if opt.startswith("--")}


def speaks_in_its_own_flags(command: str, text: str) -> None:
    """Every --flag a message names is an option of ``command``, or of the statekeep
    command it tells the user to run (``statekeep delete ID --store ...``)."""
    for sub, args in re.findall(r"statekeep ([a-z]+)([^;)]*)", text):
        assert set(re.findall(r"--[a-z][a-z-]*", args)) <= options_of(sub), text
    rest = re.sub(r"statekeep [a-z]+[^;)]*", "", text.replace("statekeep: ", ""))
    assert set(re.findall(r"--[a-z][a-z-]*", rest)) <= options_of(command), text


@pytest.fixture
def source(tmp_path: Path) -> tuple[str, list[str]]:
    with FileStore(tmp_path / "src") as store:
        return str(tmp_path / "src"), make_runs(store, 3)


def test_copy_from_no_store_names_its_argument_and_the_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("copy", "nowhere", "dst")
    assert result.exit_code == 1
    speaks_in_its_own_flags("copy", result.stderr)
    assert str(tmp_path / "nowhere") in result.stderr and "SRC_URL" in result.stderr


@pytest.mark.parametrize("command", ["copy", "import"])
def test_a_state_that_differs_is_resolved_with_the_full_destination(
    command: str, source: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, ids = source
    monkeypatch.chdir(tmp_path)
    with FileStore(tmp_path / "dst") as dst:
        dst.save(State("my own run", id=ids[1]))
    assert cli("export", "--all", "-o", "runs.jsonl", "--store", src).exit_code == 0
    result = cli("copy", src, "dst") if command == "copy" else cli("import", "runs.jsonl", "--store", "dst")
    assert result.exit_code == 3, result.output
    speaks_in_its_own_flags(command, result.stderr)
    assert f"statekeep delete {ids[1]} --store {tmp_path / 'dst'}" in result.stderr
    assert "--rename-prefix" in result.stderr


def test_ids_not_in_the_source_name_how_to_list_that_source(
    source: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    copied = cli("copy", "src", "dst", "--ids", "no-such-run")
    assert copied.exit_code == 1 and f"statekeep list --store {tmp_path / 'src'}" in copied.stderr
    speaks_in_its_own_flags("copy", copied.stderr)
    exported = cli("export", "no-such-run", "-o", "x.jsonl", "--store", "src")
    assert exported.exit_code == 1 and f"not in {tmp_path / 'src'}: no-such-run" in exported.stderr
    assert f"written to {tmp_path / 'x.jsonl'}" in exported.stdout


def test_files_are_named_by_their_full_paths(
    source: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, _ = source
    monkeypatch.chdir(tmp_path)
    keys = cli("copy", src, "dst", "--src-keys", "nokeys.json", "--dst-keys", "nokeys.json")
    assert keys.exit_code == 2 and str(tmp_path / "nokeys.json") in keys.stderr
    speaks_in_its_own_flags("copy", keys.stderr)
    missing = cli("import", "nofile.jsonl", "--store", "dst")
    assert missing.exit_code == 1 and str(tmp_path / "nofile.jsonl") in missing.stderr
    (tmp_path / "afolder").mkdir()
    folder = cli("export", "--all", "-o", "afolder", "--store", src)
    assert folder.exit_code == 1 and str(tmp_path / "afolder") in folder.stderr
    assert ".partial" not in folder.stderr and "a folder" in folder.stderr


@pytest.mark.parametrize("opened_by", ["--src-keys", "$STATEKEEP_KEYS"])
def test_a_sealed_source_is_never_copied_in_clear_without_plaintext(opened_by: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    document = orjson.dumps({"current": "k1", "keys": {"k1": base64.b64encode(KEY).decode()}}).decode()
    keys.write_text(document)
    with FileStore(tmp_path / "sealed", encrypt=Keyring({"k1": KEY}, current="k1")) as sealed:
        ids = make_runs(sealed, 2)
    given = ["--src-keys", str(keys)] if opened_by == "--src-keys" else []
    env = {"STATEKEEP_KEYS": document} if opened_by == "$STATEKEEP_KEYS" else {}
    args = ["copy", str(tmp_path / "sealed"), str(tmp_path / "clear"), *given]
    refused = CliRunner().invoke(main, args, env=env)
    assert refused.exit_code == 2, refused.output
    assert "--dst-keys" in refused.stderr and "--plaintext" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and not (tmp_path / "clear").exists()
    assert CliRunner().invoke(main, [*args, "--plaintext"], env=env).exit_code == 0
    with FileStore(tmp_path / "clear") as copied:
        assert len(copied.list()) == len(ids)


def no_library_words(text: str) -> None:
    for words in ("encrypt=", "allow_plaintext", "Keyring(", "create="):
        assert words not in text, text


def test_keys_trouble_is_told_in_the_options_of_the_command(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_bytes(orjson.dumps({"current": "k1", "keys": {"k1": base64.b64encode(KEY).decode()}}))
    with FileStore(tmp_path / "sealed", encrypt=Keyring({"k1": KEY}, current="k1")) as sealed:
        make_runs(sealed, 1)
    with FileStore(tmp_path / "clear") as clear:
        make_runs(clear, 1)
    sealed_url, clear_url, k = str(tmp_path / "sealed"), str(tmp_path / "clear"), str(keys)
    cases = [  # (command line, what it must tell)
        (["copy", sealed_url, str(tmp_path / "d1")], "--src-keys FILE"),
        (["copy", clear_url, str(tmp_path / "d2"), "--src-keys", k, "--plaintext"], "without --src-keys"),
        (["copy", sealed_url, clear_url, "--src-keys", k, "--dst-keys", k], "without --dst-keys"),
        (["copy", clear_url, sealed_url, "--plaintext"], "--dst-keys FILE"),
        (["export", "--all", "-o", str(tmp_path / "x.jsonl"), "--store", sealed_url], "--keys FILE"),
        (
            ["export", "--all", "-o", str(tmp_path / "y.jsonl"), "--store", clear_url, "--keys", k],
            "without --keys",
        ),
    ]
    assert (
        cli("export", "--all", "-o", str(tmp_path / "s.jsonl"), "--store", sealed_url, "--keys", k).exit_code
        == 0
    )
    cases += [
        (["import", str(tmp_path / "s.jsonl"), "--store", clear_url, "--keys", k], "without --keys"),
        (["import", str(tmp_path / "s.jsonl"), "--store", sealed_url], "--keys FILE"),
    ]
    for args, told in cases:
        result = cli(*args)
        assert result.exit_code in (2, 3), (args, result.output)
        assert told in result.stderr and "State 'run-" in result.stderr, (args, result.stderr)
        speaks_in_its_own_flags(args[0], result.stderr)
        no_library_words(result.stderr)
