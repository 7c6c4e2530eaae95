"""The ``statekeep`` command: inspect saved runs, and the demo.

Every failure is one line on stderr and an exit status: 0 ok, 1 not found (no store, no
State, a server that cannot be reached), 2 bad usage, 3 data error (a damaged State, a
file or database that is not a statekeep store, a store of a newer statekeep). Everything
printed comes from stored data with its control characters escaped, and without passwords.
"""

from __future__ import annotations

import sqlite3
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from ._agentcheck import ResumeWarning
from ._errors import CorruptStateError, NotAStoreError, UnsafeStoreError, UnsupportedFormatError
from ._ids import ID_RULE, validate_id
from ._redaction import redact_text
from ._render import DEFAULT_STORE, listing, safe, short, summary, timeline
from ._store import Store
from ._urls import _looks_sqlite, open_store
from ._writes import missing_error

_STORE_HELP = "the store: a folder (default ./.statekeep) or a URL such as sqlite:///runs.db"

#: Exit statuses.
OK, NOT_FOUND, USAGE, DATA_ERROR = 0, 1, 2, 3


def _say(text: str, *, err: bool = False) -> None:
    click.echo(safe(text), err=err)


def _fail(message: str, code: int = NOT_FOUND) -> NoReturn:
    _say(f"statekeep: {redact_text(message)}", err=True)
    sys.exit(code)


# A damaged State, something that is not a statekeep store, a store of a newer statekeep.
# Damaged, newer, not a store, or changeable by another user.
_DATA_ERRORS = (
    CorruptStateError,
    NotAStoreError,
    UnsafeStoreError,
    UnsupportedFormatError,
    sqlite3.DatabaseError,
    RuntimeError,
)


def _exit_code(exc: Exception) -> int:
    """The exit status of an error a command met (see the module docstring)."""
    if isinstance(exc, ConnectionError | FileNotFoundError | LookupError | sqlite3.OperationalError):
        return NOT_FOUND  # no store, State or server to be had (an unopenable or locked database)
    if isinstance(exc, _DATA_ERRORS):
        return DATA_ERROR
    if isinstance(exc, OSError):
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
            # statekeep's own notes only (a library's DeprecationWarning is not the user's news)
            ours = (str(w.message) for w in caught if issubclass(w.category, RuntimeWarning | ResumeWarning))
            for message in dict.fromkeys(ours):
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
    for line in listing(rows):
        click.echo(line)


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
def show(state_id: str, store_url: str) -> None:
    """Show one State's history as a timeline."""
    with _reporting(), _open(store_url) as store:
        record = store.read(state_id)
    if record is None:
        _fail(str(missing_error(state_id, store_url)))
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
            _fail(str(missing_error(state_id, store_url)))
        if not yes:
            what = f"damaged: {damage}" if record is None else summary(record)
            _say(f"State {state_id}: {short(what, 200)}", err=True)
            try:
                sure = click.confirm("Delete it?", default=False, err=True)
            except click.Abort:  # Ctrl-C or end of input at the prompt
                sure = False
            if not sure:
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
