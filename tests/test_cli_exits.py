"""Every command's exit statuses, the same for all: 1 when there is no store there, 2 for a
store URL that is bad usage (or an option click does not know), 3 for a database that is
not a statekeep store; each failure one line on stderr, ``statekeep: ...``, no traceback."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

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
