"""The ``statekeep`` command: inspect saved runs, and the demo.

Every failure is one line on stderr and an exit status: 0 ok, 1 not found (no store, no
State, a server that cannot be reached), 2 bad usage, 3 data error (a damaged State, a
file or database that is not a statekeep store, a store of a newer statekeep). Everything
printed comes from stored data with its control characters escaped, and without passwords.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from ._agentcheck import ResumeWarning
from ._bridge import run_sync
from ._clikeys import KEYS_ENV, ProgressBar, keys_option, load_keyring
from ._errors import (
    CorruptStateError,
    DecryptionError,
    NotAStoreError,
    UnsafeStoreError,
    UnsupportedFormatError,
)
from ._ids import ID_RULE, validate_id
from ._redaction import redact_text
from ._render import DEFAULT_STORE, listing, row_json, safe, short, summary, timeline
from ._store import Store
from ._urls import _looks_sqlite, open_store
from ._writes import missing_error

_STORE_HELP = "the store: a folder (default ./.statekeep) or a URL such as sqlite:///runs.db"

#: Exit statuses (and 130: a rekey stopped with Ctrl-C, as shells report SIGINT).
OK, NOT_FOUND, USAGE, DATA_ERROR, INTERRUPTED = 0, 1, 2, 3, 130


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
        if isinstance(failure, DecryptionError):
            text += f" (give the keys with --keys FILE or ${KEYS_ENV})"
        _fail(text, _exit_code(failure))


def _open(url: str, keys_file: str | None = None, *, allow_plaintext: bool = False) -> Store:
    """Open an existing store (with the keys ``--keys``/``$STATEKEEP_KEYS`` give, if any);
    the commands never create one, nor write to one they read."""
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
        _fail(
            f"no store at {url!r} ({local} does not exist){hint}; pass --store or run 'statekeep demo' first"
        )
    return store


def _state_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_id(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a State id: an id is {ID_RULE}") from None


def _optional_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _state_id(ctx, param, value)


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


def _label(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, eq, text = value.partition("=")
        if not eq:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        labels[key] = text
    return labels


@main.command("list")
@store_option
@click.option("--agent", help="only States whose last run was by this agent")
@click.option("--parent", help="only the States spawned by this State (its subagents)")
@click.option("--label", "labels", multiple=True, callback=_label, help="KEY=VALUE; repeat: all must match")
@click.option("--status", help="finished, running, or why a run stopped (limit, ...)")
@click.option(
    "--limit", type=int, help="at most this many rows (one page; the next page's --after is printed)"
)
@click.option("--after", help="the --after a previous page printed: the page after it")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@keys_option
def list_states(
    store_url: str,
    agent: str | None,
    parent: str | None,
    labels: dict[str, str],
    status: str | None,
    limit: int | None,
    after: str | None,
    as_json: bool,
    keys_file: str | None,
) -> None:
    """List saved States, most recently updated first, filtered (filters combine with AND).
    The task of an encrypted State shows as [sealed] without --keys."""
    with _reporting(), _open(store_url, keys_file) as store:
        rows = store.list(
            agent=agent, parent=parent, labels=labels or None, status=status, limit=limit, after=after
        )
    following = getattr(rows, "next", None)
    if as_json:
        for row in rows:
            click.echo(row_json(row))
    elif not rows:
        _say("no saved States" if not any((agent, parent, labels, status, after)) else "no States match")
    else:
        for line in listing(rows):
            click.echo(line)
    if following is not None:
        _say(f"more: pass --after {following} for the next page", err=True)


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
@keys_option
def show(state_id: str, store_url: str, keys_file: str | None) -> None:
    """Show one State's history as a timeline (an encrypted one needs --keys)."""
    with _reporting(), _open(store_url, keys_file) as store:
        record = store.read(state_id)
    if record is None:
        _fail(str(missing_error(state_id, store_url)))
    for line in timeline(state_id, record):
        click.echo(line)


def _confirm(question: str, yes: bool) -> None:
    """Ask ``question`` on the terminal unless ``yes``; exit 1 ("nothing deleted") on no."""
    if yes:
        return
    try:
        sure = click.confirm(question, default=False, err=True)
    except click.Abort:  # Ctrl-C or end of input at the prompt
        sure = False
    if not sure:
        _fail("nothing deleted")


def _need_terminal(command: str, yes: bool) -> None:
    if not yes and not sys.stdin.isatty():
        _fail(f"{command} asks before it deletes, and there is no terminal to ask on; pass --yes", USAGE)


yes_option = click.option(
    "--yes", "-y", is_flag=True, help="delete without asking (needed when there is no terminal)"
)


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
@click.option("--children", is_flag=True, help="also every State spawned from it, at any depth")
@yes_option
@keys_option
def delete(state_id: str, store_url: str, children: bool, yes: bool, keys_file: str | None) -> None:
    """Delete one State, history and snapshot, after asking (unless --yes)."""
    _need_terminal("delete", yes)
    with _reporting(), _open(store_url, keys_file) as store:
        # A damaged State can be deleted too: that is often why one deletes it.
        try:
            record, damage = store.read(state_id), None
        except CorruptStateError as exc:
            record, damage = None, str(exc)
        if record is None and damage is None:
            _fail(str(missing_error(state_id, store_url)))
        tree = run_sync(store._atree(state_id), "alist") if children else [state_id]
        kids = f" and the {len(tree) - 1} States spawned from it" if len(tree) > 1 else ""
        if not yes:
            what = f"damaged: {damage}" if record is None else summary(record)
            _say(f"State {state_id}: {short(what, 200)}", err=True)
        _confirm(f"Delete it{kids}?", yes)
        store.delete(state_id, children=children)
    _say(f"deleted {state_id}{kids}")


@main.command()
@store_option
@click.option("--dry-run", is_flag=True, help="only count the expired States")
@yes_option
def gc(store_url: str, dry_run: bool, yes: bool) -> None:
    """Remove expired States (past their expires_at or the store's retention), after asking."""
    if not dry_run:
        _need_terminal("gc", yes)
    with _reporting(), _open(store_url) as store:
        # Counted by the clock that judges expiry: the store's, or the server's.
        expired = store.gc(dry_run=True)
        if dry_run:
            _say(f"{expired} expired States would be removed")
            return
        _confirm(f"Remove the {expired} expired States (and any that expire meanwhile)?", yes)
        removed = store.gc()
    _say(f"removed {removed} expired States")


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
@click.option("--at", "at_seq", type=int, help="the last seq to copy (default: the whole history)")
@click.option("--new-id", callback=_optional_id, help="the new State's id (default: a new random one)")
@keys_option
def fork(
    state_id: str, store_url: str, at_seq: int | None, new_id: str | None, keys_file: str | None
) -> None:
    """Copy a State's history (up to --at) into a new State; the source is not changed
    (an encrypted one needs --keys: the copy is re-sealed for its new place)."""
    with _reporting(), _open(store_url, keys_file) as store:
        made = store.fork(state_id, at_seq=at_seq, new_id=new_id)
    seq = (made.forked_from or {}).get("seq")
    _say(f"forked {state_id} at seq {seq} to {made.id}")


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


@main.command()
@store_option
@keys_option
@click.option(
    "--allow-plaintext", is_flag=True, help="also seal the records stored in clear (before encryption was on)"
)
@click.option(
    "--memory-scope",
    "scopes",
    multiple=True,
    default=("default",),
    show_default=True,
    help="the agent memory scopes to re-seal too; repeat for several",
)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar and no summary")
def rekey(
    store_url: str, keys_file: str | None, allow_plaintext: bool, scopes: tuple[str, ...], quiet: bool
) -> None:
    """Re-seal every record sealed with an older key with the current key.

    Run it after making a new key current: afterwards the old keys can leave the keyring,
    which needs the current key and every key records were sealed with. Safe beside
    running writers, and resumable: stopped part way, run it again (what is done is
    skipped). A progress bar shows on a terminal (stderr); a summary line is printed.
    """
    from ._rekey import rekey as rekey_store

    if keys_file is None and not os.environ.get(KEYS_ENV):
        _fail(
            f"rekey needs the keys: pass --keys FILE or set ${KEYS_ENV} (see statekeep rekey --help)", USAGE
        )
    bar = ProgressBar(shown=not quiet and sys.stderr.isatty())
    try:
        with _reporting(), _open(store_url, keys_file, allow_plaintext=allow_plaintext) as store:
            report = rekey_store(store, progress=bar, memory_scopes=scopes)
    except KeyboardInterrupt:
        bar.close()
        _fail("rekey stopped part way; run it again to finish (what is done is skipped)", INTERRUPTED)
    finally:
        bar.close()
    if report.unlisted:
        _fail(f"rekey: {report}", DATA_ERROR)
    if not quiet:
        _say(f"rekey: {report}")
