"""The command line and encrypted stores: ``--keys FILE`` / ``$STATEKEEP_KEYS`` for list,
show and fork, ``statekeep rekey`` (progress on a terminal, quiet when piped), and keys
files that are missing or malformed (one line saying what to fix, never a key).
"""

from __future__ import annotations

import base64
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from statekeep import FileStore, Keyring, State
from statekeep.cli import main

K1, K2 = os.urandom(32), os.urandom(32)
SECRET = "the launch code is 0000"


def document(current: str, **keys: bytes) -> bytes:
    return orjson.dumps(
        {"current": current, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}}
    )


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def raw_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A FileStore sealed with k1: two States."""
    path = tmp_path / "store"
    store = FileStore(path, encrypt=Keyring({"k1": K1}, current="k1"))
    for sid in ("a", "b"):
        state = State(f"secret task {sid}", id=sid)
        state.add_user(SECRET)
        store.save(state)
    store.close()
    return path


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    files = {
        "old": tmp_path / "old.json",
        "rotated": tmp_path / "rotated.json",
        "new": tmp_path / "new.json",
    }
    files["old"].write_bytes(document("k1", k1=K1))
    files["rotated"].write_bytes(document("k2", k2=K2, k1=K1))
    files["new"].write_bytes(document("k2", k2=K2))
    return files


def no_key_in(text: str) -> None:
    for key in (K1, K2):
        assert base64.b64encode(key).decode() not in text and key.hex() not in text


def test_list_and_show_open_an_encrypted_store_with_keys(folder: Path, keys: dict[str, Path]) -> None:
    sealed = cli("list", "--store", str(folder))
    assert sealed.exit_code == 0 and "[sealed]" in sealed.output and "secret task" not in sealed.output
    listed = cli("list", "--store", str(folder), "--keys", str(keys["old"]))
    assert listed.exit_code == 0 and "secret task a" in listed.output
    shown = cli("show", "a", "--store", str(folder), "--keys", str(keys["old"]))
    assert shown.exit_code == 0 and SECRET in shown.output
    from_env = cli("show", "a", "--store", str(folder), env={"STATEKEEP_KEYS": keys["old"].read_text()})
    assert from_env.exit_code == 0 and SECRET in from_env.output


def test_show_without_the_key_names_the_key_id(folder: Path, keys: dict[str, Path]) -> None:
    result = cli("show", "a", "--store", str(folder), "--keys", str(keys["new"]))
    assert result.exit_code != 0 and "'k1'" in result.output and SECRET not in result.output
    no_key_in(result.output)


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "does not exist"),
        (b"{not json", "is not JSON (line 1, column 2)"),
        (b'{"current": "k1"}', '"keys" object'),
        (b'{"current": "k9", "keys": {"k1": "AAAA"}}', '"current"'),
        (b'{"current": "k1", "keys": {"k1": "c2hvcnQ="}}', "key 'k1'"),
        (b'{"current": "k1", "keys": {"k1": "not base64!"}}', "key 'k1'"),
    ],
)
def test_a_missing_or_malformed_keys_file_is_one_line_saying_what_to_fix(
    folder: Path, tmp_path: Path, content: bytes | None, says: str
) -> None:
    path = tmp_path / "keys.json"
    if content is not None:
        path.write_bytes(content)
    for command in (["list"], ["show", "a"], ["rekey"]):
        result = cli(*command, "--store", str(folder), "--keys", str(path))
        assert result.exit_code == 2, result.output
        assert says in result.output and len(result.output.strip().splitlines()) == 1, result.output
        assert "c2hvcnQ=" not in result.output and "AAAA" not in result.output


def test_rekey_without_keys_says_how_to_give_them(folder: Path) -> None:
    result = cli("rekey", "--store", str(folder), env={"STATEKEEP_KEYS": ""})
    assert result.exit_code == 2 and "--keys FILE or set $STATEKEEP_KEYS" in result.output


def test_rekey_moves_every_record_to_the_current_key_and_can_run_again(
    folder: Path, keys: dict[str, Path]
) -> None:
    before = raw_bytes(folder)
    assert b'"k1:' in before and SECRET.encode() not in before
    result = cli("rekey", "--store", str(folder), "--keys", str(keys["rotated"]))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("rekey: 2 States seen, ") and "re-sealing" not in result.output
    no_key_in(result.output)
    after = raw_bytes(folder)
    assert b'"k1:' not in after and b"sk.sealed:k1:" not in after and SECRET.encode() not in after
    shown = cli("show", "b", "--store", str(folder), "--keys", str(keys["new"]))  # k1 is no longer needed
    assert shown.exit_code == 0 and SECRET in shown.output
    again = cli("rekey", "--store", str(folder), "--keys", str(keys["rotated"]))
    assert (
        again.output.strip()
        == "rekey: 2 States seen, 0 records re-sealed, 2 States already on the current key"
    )
    quiet = cli("rekey", "--store", str(folder), "--keys", str(keys["rotated"]), "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


def run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run ``python -m statekeep ARGS`` with stdout and stderr on a pseudo-terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeep", *args], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_rekey_draws_a_progress_bar_on_a_terminal_and_none_when_piped(
    folder: Path, keys: dict[str, Path]
) -> None:
    args = ["rekey", "--store", str(folder), "--keys", str(keys["rotated"])]
    code, shown = run_on_a_terminal(args)
    assert code == 0 and "re-sealing" in shown and "100%" in shown, shown
    no_key_in(shown)
    piped: Any = subprocess.run([sys.executable, "-m", "statekeep", *args], capture_output=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == b""
    assert piped.stdout.decode().startswith("rekey: 2 States seen")


def test_rekey_fails_while_states_the_listing_leaves_out_remain(folder: Path, keys: dict[str, Path]) -> None:
    store = FileStore(folder, encrypt=Keyring({"k1": K1}, current="k1"))
    store.write("raw", [], {"task": "raw", "v": 1}, create=True)  # not a listing row
    store.close()
    result = cli("rekey", "--store", str(folder), "--keys", str(keys["rotated"]), "--quiet")
    assert result.exit_code == 3
    assert "States the listing leaves out were NOT reached" in result.output
