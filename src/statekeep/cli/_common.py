"""What every ``statekeep`` command shares: opening the store, options, errors and exit codes.

Every failure is one line on stderr and an exit status: 0 ok, 1 not found (no store, no
State), 2 bad usage, 3 data error (a damaged State, a file or database that is not a
statekeep store, a store of a newer statekeep), 4 store unreachable (its server cannot be
reached, or refused statekeep: its database, user, password or a setting), 130 stopped
with Ctrl-C (any command that runs inside :func:`reporting`). Everything printed comes from
stored data with its control characters escaped, and without passwords.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from .._core.errors import (
    CorruptStateError,
    NotAStoreError,
    UnsafeStoreError,
    UnsupportedFormatError,
)
from .._core.ids import ID_RULE, validate_id
from .._core.labels import LABEL_RULE, check_labels
from .._core.passwords import redact_text
from .._core.query import decode_cursor
from .._run.resumecheck import ResumeWarning
from .._store.contract import Store
from ..stores._memory import MemoryStore
from ..stores._urls import _looks_sqlite, open_store
from ._keys import load_keyring
from ._render import DEFAULT_STORE, safe
from ._words import cli_text

_STORE_HELP = "the store: a folder (default ./.statekeep) or a URL such as sqlite:///runs.db"
_NO_STORE = "pass --store or run 'statekeep demo' first"

#: Exit statuses (and 130: stopped with Ctrl-C, as shells report SIGINT).
OK, NOT_FOUND, USAGE, DATA_ERROR, UNREACHABLE, INTERRUPTED = 0, 1, 2, 3, 4, 130

STOPPED = "COMMAND stopped (Ctrl-C)"  # reporting()'s default line, the command's name filled in


def say(text: str, *, err: bool = False) -> None:
    click.echo(safe(text), err=err)


def fail(message: str, code: int = NOT_FOUND) -> NoReturn:
    say(f"statekeep: {redact_text(message)}", err=True)
    sys.exit(code)


def emit(lines: Iterable[str]) -> None:
    """Print ``lines`` (escaped already) to stdout in one write and one flush, so a pipe sees
    them at once. A reader that went away (``| head``) ends the command quietly, exit status 0."""
    text = "\n".join(lines)
    if not text:
        return
    try:
        click.echo(text)
    except BrokenPipeError:
        # Later writes (the interpreter's last flush) go nowhere instead of failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(OK)


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


def exit_code(exc: Exception) -> int:
    """The exit status of an error a command met (see the module docstring)."""
    if isinstance(exc, ConnectionError):
        return UNREACHABLE  # a server store's: cannot be reached, or refused us
    if isinstance(exc, FileNotFoundError | LookupError | sqlite3.OperationalError):
        return NOT_FOUND  # no store or State to be had (an unopenable or locked database)
    if isinstance(exc, _DATA_ERRORS):
        return DATA_ERROR
    if isinstance(exc, OSError):
        return NOT_FOUND
    if isinstance(exc, ValueError | ImportError):
        return USAGE
    return DATA_ERROR


@contextmanager
def reporting(stopped: str | None = STOPPED) -> Iterator[None]:
    """Run a command: an error becomes one line on stderr with its exit status, and each
    distinct warning (Redis's durability, States left out of a listing) one short note.
    Ctrl-C is exit status 130 with the line ``statekeep: {stopped}`` (by default "COMMAND
    stopped (Ctrl-C)"; no line if None), not click's "Aborted!" and status 1: one mechanism
    for every command. Anything to tidy before that line (a progress bar) goes inside."""
    interrupted = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except KeyboardInterrupt:
            failure: Exception | None = None
            interrupted = True
        except Exception as exc:
            failure = exc
        else:
            failure = None
        finally:
            # statekeep's own notes only (a library's DeprecationWarning is not the user's news)
            ours = (str(w.message) for w in caught if issubclass(w.category, RuntimeWarning | ResumeWarning))
            for message in dict.fromkeys(ours):
                note = message.removeprefix("statekeep: ")
                say(f"statekeep: note: {redact_text(note)}", err=True)
    if interrupted:
        if stopped is STOPPED:
            command = click.get_current_context(silent=True)
            stopped = f"{command.info_name if command else 'statekeep'} stopped (Ctrl-C)"
        if stopped is not None:
            say(f"statekeep: {stopped}", err=True)
        sys.exit(INTERRUPTED)
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
        fail(cli_text(failure, text), exit_code(failure))


def open_store_at(
    url: str, keys_file: str | None = None, *, allow_plaintext: bool = False, missing: str = _NO_STORE
) -> Store:
    """Open an existing store (with the keys ``--keys``/``$STATEKEEP_KEYS`` give, if any);
    the commands never create one, nor write to one they read. ``missing``: what to do
    when there is no store there, in the words of the command's own arguments."""
    keyring = load_keyring(keys_file)
    protect = {} if keyring is None else {"encrypt": keyring, "allow_plaintext": allow_plaintext}
    store = open_store(url, create=False, **protect)
    local = getattr(store, "path", None)  # FileStore and SQLiteStore: a folder or a file
    if isinstance(local, Path) and not local.exists():
        hint = (
            f"; for a SQLite database write sqlite:///{url}"
            if "://" not in url and _looks_sqlite(url)
            else ""
        )
        fail(f"no store at {url!r} ({local} does not exist){hint}; {missing}")
    return store


def refuse_memory(store: Store, why: str) -> None:
    """Exit 2 (closing ``store``) if it is a memory:// store, which ``why`` cannot use."""
    if isinstance(store, MemoryStore):
        store.close()
        fail(
            f"{why}: give a folder, sqlite:///, postgresql:// or redis:// (a memory:// store is new, "
            "empty and private to this command's process)",
            USAGE,
        )


def state_id_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_id(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a State id: an id is {ID_RULE}") from None


def optional_id_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else state_id_arg(ctx, param, value)


store_option = click.option(
    "--store", "store_url", default=DEFAULT_STORE, show_default=True, help=_STORE_HELP
)


def labels_arg(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, eq, text = value.partition("=")
        if not eq:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        try:
            check_labels({key: text})
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a label: {LABEL_RULE}") from None
        labels[key] = text
    return labels


def text_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A filter's value: given empty, it would match nothing, so it is refused."""
    if value is not None and not value:
        raise click.BadParameter("is empty: give a value, or leave the option out")
    return value


def after_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--after``: what a previous page printed, checked before the store is opened."""
    if value is not None:
        try:
            decode_cursor(value)
        except ValueError:
            raise click.BadParameter(
                f"{value!r} is not what a listing printed after --after; start again without it"
            ) from None
    return value
