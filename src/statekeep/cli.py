"""The ``statekeep`` command: inspect saved runs, and the demo.

Every failure is one line on stderr and an exit status: 0 ok, 1 not found (no store, no
State, a server that cannot be reached), 2 bad usage, 3 data error (a damaged State, a
file or database that is not a statekeep store, a store of a newer statekeep). Everything
printed comes from stored data with its control characters escaped, and without passwords.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from ._errors import CorruptStateError, NotAStoreError, UnsupportedFormatError
from ._ids import ID_RULE, validate_id
from ._records import Record
from ._redaction import redact_text
from ._store import Store
from ._urls import _looks_sqlite, open_store

DEFAULT_STORE = ".statekeep"
_STORE_HELP = "the store: a folder (default ./.statekeep) or a URL such as sqlite:///runs.db"

#: Exit statuses.
OK, NOT_FOUND, USAGE, DATA_ERROR = 0, 1, 2, 3

# Characters a terminal acts on (C0, DEL, C1: cursor moves, screen clears, new lines) or
# that reorder text (bidirectional controls), and line separators: shown escaped.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def safe(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``),
    so that stored data cannot move the cursor, clear the screen or fake a line."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def _say(text: str, *, err: bool = False) -> None:
    click.echo(safe(text), err=err)


def _fail(message: str, code: int = NOT_FOUND) -> NoReturn:
    _say(f"statekeep: {redact_text(message)}", err=True)
    sys.exit(code)


def _exit_code(exc: Exception) -> int:
    """The exit status of an error a command met (see the module docstring)."""
    errors = (
        CorruptStateError | NotAStoreError | UnsupportedFormatError | sqlite3.DatabaseError | RuntimeError
    )
    if isinstance(exc, errors):
        return DATA_ERROR
    if isinstance(exc, ConnectionError | FileNotFoundError | LookupError | OSError):
        return NOT_FOUND
    if isinstance(exc, ValueError | ImportError):
        return USAGE
    return DATA_ERROR


@contextmanager
def _reporting() -> Iterator[None]:
    """Run a command: an error becomes one line on stderr with its exit status, and each
    distinct warning (Redis's durability, States left out of a listing) one short note."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except Exception as exc:
            failure: Exception | None = exc
        else:
            failure = None
        finally:
            for message in dict.fromkeys(str(w.message) for w in caught):
                note = message.removeprefix("statekeep: ")
                _say(f"statekeep: note: {redact_text(note)}", err=True)
    if failure is not None:
        known = (
            ValueError,
            LookupError,
            OSError,
            RuntimeError,
            ImportError,
            sqlite3.Error,
        )
        text = str(failure) if isinstance(failure, known) else f"{type(failure).__name__}: {failure}"
        _fail(text, _exit_code(failure))


def _open(url: str) -> Store:
    """Open an existing store; the commands never create one, nor write to one they read."""
    store = open_store(url, create=False)
    local = getattr(store, "path", None)  # FileStore and SQLiteStore: a folder or a file
    if isinstance(local, Path) and not local.exists():
        hint = (
            f"; for a SQLite database write sqlite:///{url}"
            if "://" not in url and _looks_sqlite(url)
            else ""
        )
        _fail(
            f"no store at {url!r} ({local} does not exist){hint}; pass --store or run 'statekeep demo' first"
        )
    return store


def _state_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_id(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a State id: an id is {ID_RULE}") from None


store_option = click.option(
    "--store", "store_url", default=DEFAULT_STORE, show_default=True, help=_STORE_HELP
)


@click.group(
    epilog="Exit status: 0 ok, 1 not found (store, State or server), 2 bad usage, "
    "3 data error (a damaged State, or not a statekeep store)."
)
@click.version_option(package_name="statekeep")
def main() -> None:
    """Keep AI agent runs outside the process, and look at them."""


@main.command("list")
@store_option
def list_states(store_url: str) -> None:
    """List saved States, most recently updated first."""
    with _reporting(), _open(store_url) as store:
        rows = store.list()
    if not rows:
        _say("no saved States")
        return
    _say(f"{'ID':<34} {'UPDATED (UTC)':<19} {'TURN':>4}  {'STATUS':<10} TASK")
    for row in rows:
        status = "finished" if row.finished else (row.stopped_by or "running")
        when = row.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        _say(f"{row.id:<34} {when:<19} {row.turn:>4}  {_short(status, 10):<10} {_short(row.task, 60)}")


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
def show(state_id: str, store_url: str) -> None:
    """Show one State's history as a timeline."""
    with _reporting(), _open(store_url) as store:
        record = store.read(state_id)
    if record is None:
        _fail(f"no State {state_id!r} in {store_url}")
    for line in timeline(state_id, record):
        click.echo(line)


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
@click.option("--yes", "-y", is_flag=True, help="delete without asking (needed when there is no terminal)")
def delete(state_id: str, store_url: str, yes: bool) -> None:
    """Delete one State, history and snapshot, after asking (unless --yes)."""
    if not yes and not sys.stdin.isatty():
        _fail("delete asks before it deletes, and there is no terminal to ask on; pass --yes", USAGE)
    with _reporting(), _open(store_url) as store:
        # A damaged State can be deleted too: that is often why one deletes it.
        try:
            record, damage = store.read(state_id), None
        except CorruptStateError as exc:
            record, damage = None, str(exc)
        if record is None and damage is None:
            _fail(f"no State {state_id!r} in {store_url}")
        if not yes:
            what = f"damaged: {damage}" if record is None else _summary(record)
            _say(f"State {state_id}: {_short(what, 200)}", err=True)
            if not click.confirm("Delete it?", default=False, err=True):
                _fail("nothing deleted")
        store.delete(state_id)
    _say(f"deleted {state_id}")


@main.command()
@click.option(
    "--store",
    "store_url",
    default=DEFAULT_STORE,
    show_default=True,
    help="the store to run it in: a folder or a URL such as sqlite:///demo.db",
)
def demo(store_url: str) -> None:
    """Run an agent, kill it with SIGKILL mid-tool-call, then load it and finish the run."""
    from ._demo import run

    with _reporting():
        status = run(store_url)
    sys.exit(status)


def _summary(record: Record) -> str:
    snap = record.snapshot or {}
    return f"{len(record.entries)} entries, turn {snap.get('turn', '?')}, task {str(snap.get('task', ''))!r}"


def timeline(state_id: str, record: Record) -> list[str]:
    """A readable history: one line per entry, long texts shortened, control characters
    escaped. Any entry the store accepts is shown, whatever its fields hold."""
    snap = record.snapshot if isinstance(record.snapshot, dict) else {}
    lines = [f"State {state_id}: {_short(str(snap.get('task', '')), 100)}"]
    if snap:
        status = "finished" if snap.get("finished") else (snap.get("stopped_by") or "running")
        lines.append(
            f"created {_time(snap.get('created_at'))} · updated {_time(snap.get('updated_at'))} · "
            f"turn {_short(str(snap.get('turn')), 20)} · {_short(str(status), 40)}"
        )
    lines.append("")
    for entry in record.entries:
        kind = _short(str(entry.get("kind", "?")), 30)
        seq = _short(str(entry.get("seq", "?")), 20)
        lines.append(f"{seq:>5}  {_time(entry.get('at'), clock=True)}  {kind:<13} {_describe(entry)}")
    return [safe(line) for line in lines]


def _describe(e: dict[str, Any]) -> str:
    try:
        return _describe_kind(e)
    except Exception:  # a field of an unexpected type: show the entry as it is
        return _rest(e)


def _describe_kind(e: dict[str, Any]) -> str:
    kind = e.get("kind")
    if kind in ("task", "user"):
        return _short(_text(e.get("text")))
    if kind == "run_start":
        agent = _dict(e.get("agent"))
        tools = ", ".join(_text(t) for t in _list(agent.get("tools"))) or "none"
        return _short(
            f"agent {agent.get('name')!r} · model {_text(agent.get('model'))} · tools: {tools}", 120
        )
    if kind == "model_request":
        return _short(f"asking {_text(e.get('model'))}")
    if kind == "model_reply":
        calls = [
            f"{_text(c.get('name'))}({_args(c.get('args'))}) [{_text(c.get('id'))}]"
            for c in map(_dict, _list(e.get("tool_calls")))
        ]
        text = _short(_text(e.get("text")), 60) if e.get("text") else ""
        parts = (f'"{text}"' if text else "", _short(", ".join(calls), 120))
        return " → ".join(p for p in parts if p) or "(empty)"
    if kind == "tool_result":
        head = f"{_text(e.get('name'))} [{_text(e.get('call_id'))}] {_text(e.get('outcome'))}"
        return f"{_short(head, 60)}: {_short(_text(e.get('output')), 70)}"
    if kind in ("model_error", "error"):
        return _short(_text(e.get("message")))
    if kind == "stop":
        answer = e.get("answer")
        by = _short(f"by {_text(e.get('by'))}", 40)
        return by + (f": {_short(_text(answer), 70)}" if answer is not None else "")
    if kind == "data":
        key = _short(_text(e.get("key")), 40)
        return f"{key} deleted" if e.get("deleted") else f"{key} = {_short(repr(e.get('value')), 60)}"
    return _rest(e)


def _rest(e: dict[str, Any]) -> str:
    return _short(str({k: v for k, v in e.items() if k not in ("seq", "kind", "at")}))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _args(args: Any) -> str:
    if not isinstance(args, dict):
        return _short(repr(args), 40)
    return _short(", ".join(f"{k}={v!r}" for k, v in args.items()), 50)


def _short(text: str, width: int = 80) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _time(value: Any, *, clock: bool = False) -> str:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return "?"
    return when.strftime("%H:%M:%S.%f")[:-3] if clock else when.strftime("%Y-%m-%d %H:%M:%S")
