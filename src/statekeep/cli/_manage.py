"""``statekeep delete``, ``gc``, ``fork``, ``rekey`` and ``demo``: change a store."""

from __future__ import annotations

import os
import sys
from contextlib import closing

import click

from .._core.errors import CorruptStateError, StateExistsError
from .._core.writes import missing_error
from .._runtime.bridge import run_sync
from ._common import (
    DATA_ERROR,
    USAGE,
    fail,
    open_store_at,
    optional_id_arg,
    reporting,
    say,
    state_id_arg,
    store_option,
)
from ._group import main
from ._keys import KEYS_ENV, ProgressBar, keys_option
from ._render import DEFAULT_STORE, short, summary


def _confirm(question: str, yes: bool) -> None:
    """Ask ``question`` on the terminal unless ``yes``; exit 1 ("nothing deleted") on no."""
    if yes:
        return
    try:
        sure = click.confirm(question, default=False, err=True)
    except click.Abort:  # Ctrl-C or end of input at the prompt
        sure = False
    if not sure:
        fail("nothing deleted")


def _need_terminal(command: str, yes: bool) -> None:
    if not yes and not sys.stdin.isatty():
        fail(f"{command} asks before it deletes, and there is no terminal to ask on; pass --yes", USAGE)


yes_option = click.option(
    "--yes", "-y", is_flag=True, help="delete without asking (needed when there is no terminal)"
)


@main.command()
@click.argument("state_id", callback=state_id_arg)
@store_option
@click.option("--children", is_flag=True, help="also every State spawned from it, at any depth")
@yes_option
@keys_option
def delete(state_id: str, store_url: str, children: bool, yes: bool, keys_file: str | None) -> None:
    """Delete one State, history and snapshot, after asking (unless --yes)."""
    _need_terminal("delete", yes)
    with reporting(), open_store_at(store_url, keys_file) as store:
        # A damaged State can be deleted too: that is often why one deletes it.
        try:
            record, damage = store.read(state_id), None
        except CorruptStateError as exc:
            record, damage = None, str(exc)
        if record is None and damage is None:
            fail(missing_error(state_id, store_url).found)
        tree = run_sync(store._atree(state_id), "alist") if children else [state_id]
        kids = f" and the {len(tree) - 1} States spawned from it" if len(tree) > 1 else ""
        if not yes:
            what = f"damaged: {damage}" if record is None else summary(record)
            say(f"State {state_id}: {short(what, 200)}", err=True)
        _confirm(f"Delete it{kids}?", yes)
        store.delete(state_id, children=children)
    say(f"deleted {state_id}{kids}")


@main.command()
@store_option
@click.option("--dry-run", is_flag=True, help="only count the expired States and unreferenced blobs")
@yes_option
def gc(store_url: str, dry_run: bool, yes: bool) -> None:
    """Remove expired States (past their expires_at or the store's retention), then the blobs
    (large values stored once) no State refers to any more, after asking."""
    if not dry_run:
        _need_terminal("gc", yes)
    with reporting(), open_store_at(store_url) as store:
        # Counted by the clock that judges expiry: the store's, or the server's.
        expired = store.gc(dry_run=True)
        if dry_run:
            say(f"{expired} expired States would be removed{_blobs(expired)}")
            return
        _confirm(f"Remove the {expired} expired States (and any that expire meanwhile)?", yes)
        removed = store.gc()
    say(f"removed {removed} expired States{_blobs(removed)}")


def _blobs(collected: int) -> str:
    """The blob part of gc's message (none for a store that keeps no blobs)."""
    blobs, size = getattr(collected, "blobs", 0), getattr(collected, "blob_bytes", 0)
    return f", and {blobs} unreferenced blobs ({size} bytes)" if blobs else ""


@main.command()
@click.argument("state_id", callback=state_id_arg)
@store_option
@click.option("--at", "at_seq", type=int, help="the last seq to copy (default: the whole history)")
@click.option("--new-id", callback=optional_id_arg, help="the new State's id (default: a new random one)")
@keys_option
def fork(
    state_id: str, store_url: str, at_seq: int | None, new_id: str | None, keys_file: str | None
) -> None:
    """Copy a State's history (up to --at) into a new State; the source is not changed
    (an encrypted one needs --keys: the copy is re-sealed for its new place)."""
    with reporting(), open_store_at(store_url, keys_file) as store:
        try:
            made = store.fork(state_id, at_seq=at_seq, new_id=new_id)
        except StateExistsError:
            if new_id is None:
                raise
            fail(
                f"State {new_id!r} already exists; nothing was written. Pick another --new-id "
                "(or leave it out for a new random one)",
                USAGE,
            )
    seq = (made.forked_from or {}).get("seq")
    say(f"forked {state_id} at seq {seq} to {made.id}")


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

    with reporting():
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
    from .._protect.rekey import rekey as rekey_store

    if keys_file is None and not os.environ.get(KEYS_ENV):
        fail(f"rekey needs the keys: pass --keys FILE or set ${KEYS_ENV} (see statekeep rekey --help)", USAGE)
    with (
        reporting(stopped="rekey stopped part way; run it again to finish (what is done is skipped)"),
        closing(ProgressBar.on_terminal("re-sealing", quiet=quiet)) as bar,
        open_store_at(store_url, keys_file, allow_plaintext=allow_plaintext) as store,
    ):
        report = rekey_store(store, progress=bar, memory_scopes=scopes)
    if report.unlisted:
        fail(f"rekey: {report}", DATA_ERROR)
    if not quiet:
        say(f"rekey: {report}")
