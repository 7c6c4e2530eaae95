"""The ``statekeep`` command line: list, show, delete, ``--store``, ``--version``, ``--help``.

Run in-process with click's CliRunner, and as a real ``python -m statekeep`` subprocess.
Exit status 1 for a missing store, an unknown id or an unreachable server, 2 for bad usage
(a malformed id or store URL, delete without a terminal or --yes), 3 for a data error (a
damaged State, a file or database that is not a statekeep store); each one line on stderr.
"""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from statekeep import ID_RULE, FileStore, SQLiteStore, State, agent_info
from statekeep._run.resume import INTERRUPTED_TOOL
from statekeep.cli import main
from tests.support.stores import sqlite_looks

LONG_TASK = "Book a table for four people in Paris on Friday evening, " * 5
LONG_ANSWER = "Booked: Chez Janou, Friday 20:00, a table for four, confirmed by phone with the owner. " * 3


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeep", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def ids_listed(output: str) -> list[str]:
    lines = output.splitlines()
    assert lines[0].split() == ["ID", "UPDATED", "(UTC)", "TURN", "STATUS", "TASK"]
    return [line.split()[0] for line in lines[1:]]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A FileStore folder with three States, saved oldest first: booked, limited, crashed."""
    path = tmp_path / "store"
    store = FileStore(path)

    booked = State(LONG_TASK, id="booked")
    booked.begin_run(agent_info("agent", "scripted", tools=["lookup"]))
    booked.request("scripted")
    booked.add_reply("Looking.", [{"id": "call-1", "name": "lookup", "args": {"city": "Paris", "people": 4}}])
    booked.add_tool_result("call-1", "Paris: Chez Janou")
    booked.request("scripted")
    booked.add_reply(LONG_ANSWER)
    booked.finish(LONG_ANSWER)
    store.save(booked)

    limited = State("Keep going", id="limited")
    limited.add_user("line one\nline two")
    limited.begin_run(agent_info("agent", "scripted", tools=["t1"]))
    limited.request("scripted")
    limited.add_reply("", [{"id": "c1", "name": "t1", "args": {}}])
    limited.add_tool_result("c1", "ValueError: no", is_error=True)
    limited.set_data("cart", {"items": ["x"]})
    limited.delete_data("cart")
    limited.request("scripted")
    limited.add_model_error("TimeoutError: slow")
    limited.add_error("TimeoutError: slow")
    limited.stop("limit")
    store.save(limited)

    crashed = State("Crash in the middle", id="crashed")
    crashed.begin_run(agent_info("agent", "scripted", tools=["book"]))
    crashed.request("scripted")
    crashed.add_reply("Booking.", [{"id": "call-2", "name": "book", "args": {"place": "Chez Janou"}}])
    store.save(crashed)
    store.save(store.load("crashed"))  # the repair: an 'unknown' result for call-2
    return path


# -- list ---------------------------------------------------------------------------------


def test_list_shows_rows_newest_first(folder: Path) -> None:
    result = cli("list", "--store", str(folder))
    assert result.exit_code == 0, result.output
    assert ids_listed(result.stdout) == ["crashed", "limited", "booked"]
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows["booked"].split()[3:5] == ["2", "finished"]
    assert rows["limited"].split()[3:5] == ["1", "limit"]
    assert rows["crashed"].split()[3:5] == ["1", "running"]
    # The task is shortened to 60 characters.
    assert rows["booked"].endswith(LONG_TASK[:59] + "…")
    assert rows["crashed"].endswith("Crash in the middle")

    # Updating a State moves it to the top.
    store = FileStore(folder)
    limited = store.load("limited")
    limited.add_user("again")
    store.save(limited)
    assert ids_listed(cli("list", "--store", str(folder)).stdout) == ["limited", "crashed", "booked"]


def test_list_of_an_empty_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = cli("list", "--store", str(tmp_path / "empty"))
    assert (result.exit_code, result.stdout) == (0, "no saved States\n")


def test_list_of_a_missing_store_folder_fails_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = cli("list", "--store", str(missing))
    assert result.exit_code == 1
    assert f"no store at '{missing}'" in result.stderr and result.stdout == ""
    assert not missing.exists()  # listing does not create it


def test_the_default_store_is_dot_statekeep(folder: Path, tmp_path: Path) -> None:
    proc = run_cli("list", cwd=tmp_path)
    assert proc.returncode == 1 and "no store at '.statekeep'" in proc.stderr
    folder.rename(tmp_path / ".statekeep")
    proc = run_cli("list", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ids_listed(proc.stdout) == ["crashed", "limited", "booked"]


# -- show ---------------------------------------------------------------------------------


def test_show_prints_a_timeline(folder: Path) -> None:
    result = cli("show", "booked", "--store", str(folder))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"State booked: {LONG_TASK.strip()[:99]}…"
    assert lines[1].endswith("· turn 2 · finished") and lines[1].startswith("created ")
    assert lines[2] == ""
    body = lines[3:]
    assert [line.split()[0] for line in body] == [str(seq) for seq in range(8)]
    assert [line.split()[2] for line in body] == [
        "task",
        "run_start",
        "model_request",
        "model_reply",
        "tool_result",
        "model_request",
        "model_reply",
        "stop",
    ]
    assert "agent 'agent' · model scripted · tools: lookup" in body[1]
    assert body[2].endswith("asking scripted")
    assert body[3].endswith("\"Looking.\" → lookup(city='Paris', people=4) [call-1]")
    assert body[4].endswith("lookup [call-1] done: Paris: Chez Janou")
    # Long texts are shortened with '…'.
    assert body[0].endswith(LONG_TASK[:79] + "…")
    assert body[6].endswith(f'"{LONG_ANSWER[:59]}…"')
    assert body[7].endswith(f"by finish: {LONG_ANSWER[:69]}…")
    assert LONG_ANSWER.strip() not in result.stdout and LONG_TASK.strip() not in result.stdout


def test_show_describes_every_kind_and_outcome(folder: Path) -> None:
    result = cli("show", "limited", "--store", str(folder))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "· turn 1 · limit" in out
    assert "user          line one line two" in out  # newlines flattened
    assert "t1() [c1]" in out
    assert "t1 [c1] error: ValueError: no" in out
    assert "cart = {'items': ['x']}" in out and "cart deleted" in out
    assert "model_error   TimeoutError: slow" in out and "error         TimeoutError: slow" in out
    assert out.rstrip().endswith("by limit")

    result = cli("show", "crashed", "--store", str(folder))
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stdout.splitlines() if "tool_result" in line]
    assert f"book [call-2] unknown: {INTERRUPTED_TOOL[:69]}…" in line
    assert "· turn 1 · running" in result.stdout


def test_show_an_unknown_id_exits_1(folder: Path) -> None:
    result = cli("show", "nobody", "--store", str(folder))
    assert result.exit_code == 1
    assert f"no State 'nobody' in {folder}" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("bad", ["../x", "a b", "é", "x" * 129])
def test_show_a_malformed_id_exits_2_with_the_id_rule(folder: Path, bad: str) -> None:
    result = cli("show", bad, "--store", str(folder))
    assert result.exit_code == 2
    assert f"{bad!r} is not a State id" in result.stderr and ID_RULE in result.stderr


def test_show_in_a_missing_store_exits_1(tmp_path: Path) -> None:
    result = cli("show", "booked", "--store", str(tmp_path / "nowhere"))
    assert result.exit_code == 1 and "no store at" in result.stderr


# -- delete -------------------------------------------------------------------------------


def test_delete_removes_a_state(folder: Path) -> None:
    result = cli("delete", "limited", "--store", str(folder), "--yes")
    assert (result.exit_code, result.stdout) == (0, "deleted limited\n")
    assert FileStore(folder).read("limited") is None
    assert ids_listed(cli("list", "--store", str(folder)).stdout) == ["crashed", "booked"]
    result = cli("delete", "limited", "--store", str(folder), "--yes")
    assert result.exit_code == 1 and "no State 'limited'" in result.stderr


def test_delete_an_unknown_or_malformed_id(folder: Path) -> None:
    result = cli("delete", "nobody", "--store", str(folder), "--yes")
    assert result.exit_code == 1 and f"no State 'nobody' in {folder}" in result.stderr
    result = cli("delete", "../booked", "--store", str(folder), "--yes")
    assert result.exit_code == 2 and ID_RULE in result.stderr
    assert [row.id for row in FileStore(folder).list()] == ["crashed", "limited", "booked"]


# -- --store ------------------------------------------------------------------------------


def test_store_accepts_a_file_url(folder: Path) -> None:
    result = cli("list", "--store", f"file://{folder}")
    assert result.exit_code == 0, result.output
    assert ids_listed(result.stdout) == ["crashed", "limited", "booked"]
    assert cli("show", "booked", "--store", f"file://{folder}").exit_code == 0


def test_a_missing_folder_given_as_a_file_url_exits_1(tmp_path: Path) -> None:
    result = cli("list", "--store", f"file://{tmp_path / 'nowhere'}")
    assert result.exit_code == 1 and "no store at" in result.stderr


def test_memory_store_is_empty() -> None:
    result = cli("list", "--store", "memory://")
    assert (result.exit_code, result.stdout) == (0, "no saved States\n")
    result = cli("show", "booked", "--store", "memory://")
    assert result.exit_code == 1 and "no State 'booked' in memory://" in result.stderr
    assert cli("delete", "booked", "--store", "memory://", "--yes").exit_code == 1


@pytest.mark.parametrize("command", [["list"], ["show", "booked"], ["delete", "booked", "--yes"]])
def test_an_unknown_url_scheme_exits_2_naming_it(command: list[str]) -> None:
    result = cli(*command, "--store", "ftp://host/runs")
    assert result.exit_code == 2
    assert "unknown store URL scheme 'ftp'" in result.stderr


# -- --version, --help --------------------------------------------------------------------


def test_version() -> None:
    result = cli("--version")
    assert result.exit_code == 0 and version("statekeep") in result.stdout


def test_help_lists_the_commands() -> None:
    result = cli("--help")
    assert result.exit_code == 0
    commands = result.stdout.split("Commands:")[1]
    for name, summary in [
        ("list", "List saved States"),
        ("show", "Show one State's history"),
        ("delete", "Delete one State"),
        ("demo", "Run an agent"),
        ("gc", "Remove expired States"),
        ("fork", "Copy a State's history"),
    ]:
        assert any(line.split()[:1] == [name] and summary in line for line in commands.splitlines()), name
    for command in ("list", "show", "delete", "gc", "fork"):
        assert "--store" in cli(command, "--help").stdout


# -- as a real process ----------------------------------------------------------------------


def test_the_cli_as_a_subprocess(folder: Path, tmp_path: Path) -> None:
    proc = run_cli("list", "--store", "store", cwd=tmp_path)  # a relative folder
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == cli("list", "--store", str(folder)).stdout

    proc = run_cli("show", "booked", "--store", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == cli("show", "booked", "--store", str(folder)).stdout

    proc = run_cli("show", "../x", "--store", str(folder))
    assert proc.returncode == 2 and ID_RULE in proc.stderr
    proc = run_cli("show", "nobody", "--store", str(folder))
    assert proc.returncode == 1 and "no State 'nobody'" in proc.stderr

    proc = run_cli("--version")
    assert proc.returncode == 0 and version("statekeep") in proc.stdout

    proc = run_cli("delete", "crashed", "--store", str(folder), "--yes")
    assert (proc.returncode, proc.stdout) == (0, "deleted crashed\n")
    assert FileStore(folder).read("crashed") is None


# -- what is printed comes from stored data: control characters escaped ------------------------

EVIL = "x\nFAKE-ROW 2026-01-01 00:00:00    9  finished   pwned\x1b[2J\x1b[H\x07\u202e"


def raw_state(store: FileStore, sid: str, history: list[dict[str, Any]], **snap: Any) -> None:
    """A State written through the raw API, with whatever its entries and snapshot hold."""
    when = "2026-11-29T10:00:00+00:00"
    snapshot = {"task": "t", "created_at": when, "updated_at": when, "turn": 1, "stopped_by": None}
    snapshot.update({"finished": False, **snap})
    store.write(sid, [{"seq": i, **e} for i, e in enumerate(history)], snapshot, create=True)


def assert_inert(output: str, lines: int) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output
    assert "\\x1b[2J" in output  # shown, escaped
    assert len(output.splitlines()) == lines and not any(
        line.startswith("FAKE-ROW") for line in output.splitlines()
    )


def test_list_escapes_control_characters(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    raw_state(store, "evil", [{"kind": "task", "text": "t"}], stopped_by=EVIL, task=EVIL)
    result = cli("list", "--store", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout, 2)


def test_show_escapes_control_characters_in_every_field(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    history = [
        {"kind": EVIL, "text": "t"},
        {"kind": "run_start", "agent": {"name": EVIL, "model": EVIL, "tools": [EVIL]}},
        {"kind": "model_request", "model": EVIL},
        {
            "kind": "model_reply",
            "text": EVIL,
            "tool_calls": [{"id": EVIL, "name": EVIL, "args": {EVIL: EVIL}}],
        },
        {"kind": "tool_result", "name": EVIL, "call_id": EVIL, "outcome": EVIL, "output": EVIL},
        {"kind": "data", "key": EVIL, "value": EVIL},
        {"kind": "data", "key": EVIL, "deleted": True},
        {"kind": "model_error", "message": EVIL},
        {"kind": "stop", "by": EVIL, "answer": EVIL},
    ]
    raw_state(store, "evil", history, stopped_by=EVIL, task=EVIL, turn=EVIL)
    result = cli("show", "evil", "--store", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout, 3 + len(history))


def test_show_survives_any_entry_the_raw_api_accepts(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    odd: list[Any] = [None, 7, "text", [1, None], {"a": None}, True]
    history = [{"kind": "task", "text": None}]
    for kind in ("task", "user", "run_start", "model_request", "model_reply", "tool_result", "model_error",
                 "stop", "data", "error", "other", 5, None):  # fmt: skip
        for value in odd:
            history.append(
                {
                    "kind": kind,
                    "text": value,
                    "agent": value,
                    "tool_calls": value,
                    "args": value,
                    "model": value,
                    "name": value,
                    "output": value,
                    "by": value,
                    "answer": value,
                    "key": value,
                    "value": value,
                    "message": value,
                    "at": value,
                    "deleted": value,
                }
            )
        history.append({"kind": kind, "tool_calls": [None, {"args": None}], "agent": {"tools": None}})
    raw_state(store, "odd", history, task=["not", "text"], turn=None, finished="yes")
    result = cli("show", "odd", "--store", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3 + len(history)


# -- delete: asks first, and deletes a damaged State -------------------------------------------


def test_delete_without_a_terminal_needs_yes(folder: Path) -> None:
    result = cli("delete", "limited", "--store", str(folder))
    assert result.exit_code == 2 and "pass --yes" in result.stderr
    assert FileStore(folder).read("limited") is not None


def on_terminal(answer: str, *args: str) -> tuple[int, str, str]:
    """Run the command in a subprocess whose stdin is a terminal, answering its question."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "statekeep", *args],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(leader, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    return proc.returncode, out, err


@pytest.mark.parametrize(
    ("answer", "code"), [("n", 1), ("", 1), ("\x04", 1), ("y", 0)], ids=["n", "enter", "ctrl-d", "y"]
)
def test_delete_asks_on_a_terminal(folder: Path, answer: str, code: int) -> None:
    returncode, out, err = on_terminal(answer, "delete", "limited", "--store", str(folder))
    assert returncode == code, err
    assert "State limited: " in err and "Delete it? [y/N]" in err
    assert (FileStore(folder).read("limited") is None) == (code == 0)
    assert out == ("deleted limited\n" if code == 0 else "")
    assert code == 0 or err.rstrip().endswith("statekeep: nothing deleted")


def test_delete_removes_a_damaged_state(folder: Path) -> None:
    log = folder / "limited" / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = b'{"seq": 1, "kind": "no####'
    log.write_bytes(b"\n".join(lines))
    shown = cli("show", "limited", "--store", str(folder))
    assert shown.exit_code == 3 and "line 2" in shown.stderr and "Traceback" not in shown.output
    assert len(shown.stderr.splitlines()) == 1
    result = cli("delete", "limited", "--store", str(folder), "--yes")
    assert (result.exit_code, result.stdout) == (0, "deleted limited\n"), result.output
    assert cli("show", "limited", "--store", str(folder)).exit_code == 1


def test_delete_removes_a_damaged_state_in_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        store.save(State("t", id="bad"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE entries SET data = '{nope' WHERE state_id = 'bad'")
    conn.close()
    url = f"sqlite:///{db}".replace(":///", ":////", 1)
    assert cli("show", "bad", "--store", url).exit_code == 3
    assert cli("delete", "bad", "--store", url, "--yes").exit_code == 0
    assert cli("show", "bad", "--store", url).exit_code == 1


# -- everyday mistakes: one line, a documented status, nothing changed --------------------------


def one_line(result: Result, code: int, *parts: str) -> None:
    assert result.exit_code == code, result.output
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output, result.stderr
    assert result.stderr.startswith("statekeep: ")
    for part in parts:
        assert part in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["list"], ["show", "x"], ["delete", "x", "--yes"]])
def test_read_commands_never_write_to_another_programs_database(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = sqlite_looks(db)
    result = cli(*command, "--store", f"sqlite:///{db}".replace(":///", ":////", 1))
    one_line(result, 3, "is not a statekeep database", "users")
    assert sqlite_looks(db) == before


def test_a_database_path_without_sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with SQLiteStore(tmp_path / "app.db") as store:
        store.save(State("t", id="a"))
    one_line(cli("list", "--store", "app.db"), 2, "is a file, not a FileStore folder", "sqlite:///app.db")
    one_line(cli("list", "--store", "other.db"), 1, "no store at 'other.db'", "sqlite:///other.db")
    assert not (tmp_path / "other.db").exists()
    assert "a" in cli("list", "--store", "sqlite:///app.db").stdout


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n" * 100)
    one_line(
        cli("list", "--store", f"sqlite:///{notes}".replace(":///", ":////", 1)), 3, "not a SQLite database"
    )
    assert notes.read_text() == "shopping list\n" * 100


def test_an_empty_store_is_bad_usage() -> None:
    one_line(cli("list", "--store", ""), 2, "the store URL is empty")


def test_an_unreachable_server_is_one_line() -> None:
    from tests.support import servers

    port = servers.free_port()  # loopback, nothing listening
    for url in (f"postgresql://u:pw@127.0.0.1:{port}/db", f"redis://127.0.0.1:{port}/0"):
        pytest.importorskip("asyncpg" if url.startswith("postgresql") else "redis")
        one_line(cli("list", "--store", url), 4, f"127.0.0.1:{port}", "could not be reached")


def test_redis_durability_warning_is_one_short_note() -> None:
    pytest.importorskip("redis")
    from tests.support import servers

    try:
        server = servers.start_redis(extra=("--appendfsync", "everysec"))
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise
    try:
        from statekeep import open_store

        with pytest.warns(RuntimeWarning, match="appendfsync=everysec"), open_store(server.url) as store:
            store.save(State("t", id="a"))
        proc = run_cli("show", "a", "--store", server.url)
        assert proc.returncode == 0, proc.stderr
        notes = proc.stderr.splitlines()
        assert len(notes) == 1 and notes[0].startswith("statekeep: note: Redis at"), notes
        assert "appendfsync=everysec" in notes[0] and "RuntimeWarning" not in proc.stderr
        assert server.password not in proc.stderr
    finally:
        server.remove()


def test_a_store_another_user_could_change_is_a_data_error(folder: Path) -> None:
    os.chmod(folder, 0o770)  # group-writable: another user could plant a State
    result = cli("list", "--store", str(folder))
    assert result.exit_code == 3, result.output
    assert len(result.stderr.splitlines()) == 1 and "chmod go-w" in result.stderr


def test_show_json_is_one_document_of_the_record(folder: Path) -> None:
    result = cli("show", "booked", "--store", str(folder), "--json")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1
    shown = json.loads(result.stdout)
    record = FileStore(folder).read("booked")
    assert record is not None
    assert shown == {"id": "booked", "snapshot": record.snapshot, "entries": record.entries}
    assert shown["entries"][-1]["kind"] == "stop" and shown["snapshot"]["finished"] is True


def test_show_describes_steps_and_resumed_calls_in_words(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        state = State("bill", id="billing")
        store.step(state, "invoice", lambda: "INV-1")
        state.begin_run(agent_info("agent", "scripted"))
        state.request("scripted")
        state.add_reply("", [{"id": "c1", "name": "pay", "args": {}}])
        state._resume_call("c1", "idempotent")
        state.add_tool_result("c1", "paid")
        store.save(state)
    result = cli("show", "billing", "--store", str(tmp_path / "s"))
    assert result.exit_code == 0, result.output
    body = result.stdout.splitlines()[3:]
    assert "step 'invoice' starts" in body[1] and "step 'invoice' done: INV-1" in body[2]
    assert "pay [c1] runs again: idempotent" in body[6]


def test_approve_while_another_call_of_the_run_has_started_is_refused_and_saves_nothing(
    tmp_path: Path,
) -> None:
    with FileStore(tmp_path / "s") as store:
        state = State("pay", id="bill")
        state.begin_run(agent_info("payer", "m", tools=["pay"]))
        state.request("m")
        state.add_reply(
            "", [{"id": "c1", "name": "pay", "args": {}}, {"id": "c2", "name": "pay", "args": {}}]
        )
        state._wait_for_approval(["c1", "c2"])
        state.approve("c1")
        state.begin_run(agent_info("payer", "m", tools=["pay"]))
        state._resume_call("c1", "approved")  # c1 runs now (or its run was cut off there)
        store.save(state)
        before = store.read("bill")
    result = cli("approve", "bill", "c2", "--store", str(tmp_path / "s"))
    assert result.exit_code == 2 and "started and have no saved result (c1)" in result.stderr
    with FileStore(tmp_path / "s") as store:
        assert store.read("bill") == before
