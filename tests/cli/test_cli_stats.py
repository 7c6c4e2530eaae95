"""``statekeep stats`` on a known store (File, SQLite, PostgreSQL, Redis): States by status
and agent, the sum of their entries (also for States saved without a snapshot ``seq``, or
with one the history has since passed), bytes where the store can tell; and its errors."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statekeep import State, Store, agent_info
from statekeep.cli import main
from statekeep.stores._urls import open_store
from tests.support.stores import URL_KINDS, store_url

STAMP = "2026-01-01T00:00:00+00:00"


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(params=URL_KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path, "stats")


def run(task: str, agent: str, sid: str, replies: int) -> State:
    state = State(task, id=sid)
    state.begin_run(agent_info(agent, "scripted", tools=[]))
    for i in range(replies):
        state.request("scripted")
        state.add_reply(f"reply {i}")
    return state


@pytest.fixture
def known(url: str) -> Iterator[str]:
    """Five States, 30 entries: finished (a, 7 entries), limit (a, 5), running (b, 8),
    two raw-written ones without an agent: 4 entries (no snapshot seq) and 6 (a snapshot
    seq of 2, left behind by later writes without a snapshot)."""
    with open_store(url, create=True) as store:
        done = run("one", "a", "done", 2)  # task, run_start, 2 x (request, reply): 6
        done.finish("ok")  # 7
        store.save(done)
        limited = run("two", "a", "limited", 1)  # 4
        limited.stop("limit")  # 5
        store.save(limited)
        store.save(run("three", "b", "busy", 3))  # 8
        raw(store, "raw", 4, seq=None)
        raw(store, "stale", 6, seq=2)
    yield url


def raw(store: Store, sid: str, count: int, seq: int | None) -> None:
    snapshot = {"task": sid, "created_at": STAMP, "updated_at": STAMP, "turn": 0}
    snapshot |= {"stopped_by": None, "finished": False}
    if seq is not None:
        snapshot["seq"] = seq
    entries = [{"seq": 0, "kind": "task", "at": STAMP, "text": sid}]
    entries += [{"seq": i, "kind": "user", "at": STAMP, "text": f"u{i}"} for i in range(1, count)]
    cut = 3 if seq is not None else count
    store.write(sid, entries[:cut], snapshot, create=True)
    if cut < count:
        store.write(sid, entries[cut:], None)


def test_stats_counts_states_entries_statuses_and_agents(known: str) -> None:
    result = cli("stats", "--store", known, "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["states"] == 5 and stats["entries"] == 7 + 5 + 8 + 4 + 6
    assert stats["by_status"] == {"running": 3, "finished": 1, "limit": 1}
    assert stats["by_agent"] == {"a": 2, "b": 1} and stats["without_agent"] == 2
    if known.startswith("redis://"):
        assert stats["bytes"] is None
    else:
        assert isinstance(stats["bytes"], int) and stats["bytes"] > 0


def test_stats_as_text(known: str) -> None:
    result = cli("stats", "--store", known)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == ["States   5", "entries  30"]
    assert lines[2].startswith("bytes    ") and (lines[2].endswith("unknown") == known.startswith("redis"))
    assert lines[3] == "by status:" and lines[4].split() == ["running", "3"]
    assert lines[-1].split() == ["(no", "agent)", "2"]
    assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_sqlite_bytes_count_the_database_file_and_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}", create=True) as store:
        store.save(run("one", "a", "x", 1))
        # Open, the store has its WAL beside the file: both are counted.
        size = sum(p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("store.db"))
        assert size > path.stat().st_size
        result = cli("stats", "--store", f"sqlite:///{path}", "--json", "--quiet")
        assert json.loads(result.stdout)["bytes"] >= size


def test_an_empty_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = cli("stats", "--store", str(tmp_path / "empty"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) | {"bytes": 0} == {
        "states": 0,
        "entries": 0,
        "bytes": 0,
        "by_status": {},
        "by_agent": {},
        "without_agent": 0,
        "not_listed": 0,
        "blobs": 0,
        "blob_bytes": 0,
    }


def test_states_no_listing_shows_are_counted_apart(url: str) -> None:
    with open_store(url, create=True) as store:
        store.save(run("one", "a", "done", 1))
        store.write("bare", [{"seq": 0, "kind": "note", "at": STAMP, "text": "x"}], None, create=True)
    result = cli("stats", "--store", url, "--json")
    stats = json.loads(result.stdout)
    assert (stats["states"], stats["not_listed"]) == (1, 1)
    text = cli("stats", "--store", url).stdout
    assert "not listed 1 (States without a snapshot" in text


# -- exit statuses --------------------------------------------------------------------------


def test_stats_of_a_missing_store_exits_1(tmp_path: Path) -> None:
    result = cli("stats", "--store", str(tmp_path / "nowhere"))
    assert result.exit_code == 1 and "no store at" in result.stderr and "pass --store" in result.stderr


def test_stats_with_a_bad_url_or_option_exits_2() -> None:
    result = cli("stats", "--store", "ftp://host/x")
    assert result.exit_code == 2 and "unknown store URL scheme 'ftp'" in result.stderr
    assert cli("stats", "--bogus").exit_code == 2  # click's own usage error


def test_stats_of_a_database_that_is_not_a_store_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    conn.close()
    result = cli("stats", "--store", f"sqlite:///{path}")
    assert result.exit_code == 3, result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("statekeep: ")


def test_version_is_the_plain_form() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "--version"], capture_output=True, text=True, timeout=60
    )
    from importlib.metadata import version

    assert (proc.returncode, proc.stdout) == (0, f"statekeep {version('statekeep')}\n")


def test_help_documents_the_exit_statuses() -> None:
    text = " ".join(cli("--help").stdout.split())
    for status in ("0 ok", "1 not found", "2 bad usage", "3 data error", "130 stopped with Ctrl-C"):
        assert status in text


def stats_on_terminal(store_url: str, *extra: str) -> tuple[int, str, str]:
    """Run ``statekeep stats`` with its stderr on a terminal: exit status, stdout, the terminal's text."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeep", "stats", "--store", store_url, *extra],
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    chunks: list[bytes] = []

    def pump() -> None:
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=60)
        reader.join(timeout=60)
    finally:
        os.close(leader)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def test_stats_shows_a_progress_bar_on_a_terminal_unless_quiet(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "store"), create=True) as store:
        for i in range(3):
            store.save(run("task", "a", f"s{i}", 1))
    status, out, terminal = stats_on_terminal(str(tmp_path / "store"))
    assert status == 0 and out.splitlines()[:2] == ["States   3", "entries  12"]
    assert "counting" in terminal
    status, out, terminal = stats_on_terminal(str(tmp_path / "store"), "--quiet")
    assert status == 0 and out.splitlines()[:2] == ["States   3", "entries  12"]
    assert terminal == ""


def test_ctrl_c_stops_stats_with_130_and_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while counting (the KeyboardInterrupt Python raises on SIGINT): exit status 130
    and one line on stderr, not click's "Aborted!" and status 1."""
    with open_store(str(tmp_path / "store"), create=True) as store:
        store.save(run("one", "a", "one", 1))

    def interrupted(store: Store, state_id: str) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("statekeep.cli._stats.entry_count", interrupted)
    result = cli("stats", "--store", str(tmp_path / "store"))
    assert result.exit_code == 130
    assert result.stderr.splitlines() == ["statekeep: stats stopped (Ctrl-C)"]
