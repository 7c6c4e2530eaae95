"""Every command's exit statuses, the same for all: 1 when there is no store there, 2 for a
store URL that is bad usage (or an option click does not know), 3 for a database that is
not a statekeep store; each failure one line on stderr, ``statekeep: ...``, no traceback."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekeep import FileStore, State
from statekeep.cli import main

COMMANDS = {
    "list": ["list"],
    "show": ["show", "x"],
    "show-follow": ["show", "x", "--follow"],
    "show-json": ["show", "x", "--json"],
    "delete": ["delete", "x", "--yes"],
    "gc": ["gc", "--dry-run"],
    "fork": ["fork", "x"],
    "rekey": ["rekey"],
    "stats": ["stats"],
}


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys in $STATEKEEP_KEYS (rekey needs some before it opens the store)."""
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("STATEKEEP_KEYS", json.dumps({"current": "k1", "keys": {"k1": key}}))


def not_a_store(tmp_path: Path) -> str:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    conn.close()
    return f"sqlite:///{path}"


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
@pytest.mark.parametrize(
    ("where", "status"),
    [("missing", 1), ("bad-url", 2), ("not-a-store", 3)],
)
def test_every_command_exits_with_the_documented_status(
    command: list[str], where: str, status: int, tmp_path: Path
) -> None:
    url = {
        "missing": str(tmp_path / "nowhere"),
        "bad-url": "ftp://host/runs",
        "not-a-store": not_a_store(tmp_path),
    }[where]
    result = CliRunner().invoke(main, [*command, "--store", url])
    assert result.exit_code == status, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("statekeep: ")


@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
def test_an_unknown_option_is_click_usage_error_2(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--no-such-option"])
    assert result.exit_code == 2 and "No such option '--no-such-option'" in result.stderr


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
def test_ctrl_c_exits_130_in_one_line(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (the KeyboardInterrupt Python raises on SIGINT) in any command: exit status 130
    and one line naming it, not click's "Aborted!" and status 1; none for show --follow
    (Ctrl-C is how a follow ends), rekey's says to run it again."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("statekeep.cli._common.open_store", interrupted)
    result = CliRunner().invoke(main, [*command, "--store", str(tmp_path)])
    assert result.exit_code == 130, result.output
    if "--follow" in command:
        assert result.stderr == ""
    elif command[0] == "rekey":
        assert result.stderr.splitlines() == [
            "statekeep: rekey stopped part way; run it again to finish (what is done is skipped)"
        ]
    else:
        assert result.stderr.splitlines() == [f"statekeep: {command[0]} stopped (Ctrl-C)"]


@pytest.mark.parametrize("command", [["show", "big"], ["show", "big", "--json"], ["list", "--json"]])
def test_a_reader_that_goes_away_ends_a_command_quietly(command: list[str], tmp_path: Path) -> None:
    """``statekeep show ID | head -1``: the command ends at the closed pipe, exit status 0,
    nothing on stderr (as a follow does)."""
    with FileStore(tmp_path / "store") as store:
        state = State("a long run", id="big")
        for i in range(2000):  # more than a pipe holds
            state.add_user(f"question {i}: " + "x" * 40)
        store.save(state)
        for i in range(400):  # list --json: some 100 KB
            store.save(State(f"run {i}", id=f"run-{i}"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeep", *command, "--store", str(tmp_path / "store")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does after its line
    err = proc.stderr.read()
    assert (proc.wait(timeout=60), err) == (0, "")
