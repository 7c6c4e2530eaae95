"""``statekeep list`` and ``show``: look at saved States."""

from __future__ import annotations

import click

from .._core.query import MAX_LIMIT
from .._core.writes import missing_error
from . import _follow
from ._common import (
    after_arg,
    emit,
    fail,
    labels_arg,
    open_store_at,
    optional_id_arg,
    reporting,
    say,
    state_id_arg,
    store_option,
    text_arg,
)
from ._group import main
from ._keys import keys_option
from ._moveopts import prefix_arg
from ._render import listing, record_json, row_json, timeline


@main.command("list")
@store_option
@click.option("--agent", callback=text_arg, help="only States whose last run was by this agent")
@click.option(
    "--parent", callback=optional_id_arg, help="only the States spawned by this State (its subagents)"
)
@click.option(
    "--label", "labels", multiple=True, callback=labels_arg, help="KEY=VALUE; repeat: all must match"
)
@click.option("--status", callback=text_arg, help="finished, running, or why a run stopped (limit, ...)")
@click.option("--prefix", "id_prefix", callback=prefix_arg, help="only States whose id starts with this")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    help="at most this many rows (one page; the next page's --after is printed)",
)
@click.option("--after", callback=after_arg, help="the --after a previous page printed: the page after it")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@keys_option
def list_states(
    store_url: str,
    agent: str | None,
    parent: str | None,
    labels: dict[str, str],
    status: str | None,
    id_prefix: str | None,
    limit: int | None,
    after: str | None,
    as_json: bool,
    keys_file: str | None,
) -> None:
    """List saved States, most recently updated first, filtered (filters combine with AND).
    The task of an encrypted State shows as [sealed] without --keys."""
    with reporting(), open_store_at(store_url, keys_file) as store:
        rows = store.list(
            agent=agent,
            parent=parent,
            labels=labels or None,
            status=status,
            id_prefix=id_prefix,
            limit=limit,
            after=after,
        )
        following = getattr(rows, "next", None)
        if as_json:
            emit(row_json(row) for row in rows)
        elif not rows:
            say(
                "no saved States"
                if not any((agent, parent, labels, status, id_prefix, after))
                else "no States match"
            )
        else:
            emit(listing(rows))
        if following is not None:
            say(f"more: pass --after {following} for the next page", err=True)


@main.command()
@click.argument("state_id", callback=state_id_arg)
@store_option
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="then print each new entry as it is saved, until the run stops (or Ctrl-C)",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='one JSON document {"id", "snapshot", "entries"}; with --follow, one JSON object per entry',
)
@click.option(
    "--wait",
    is_flag=True,
    help="wait for a State not saved yet; with --follow also for one deleted meanwhile, "
    "then follow the new one from seq 0 (as tail -F)",
)
@keys_option
def show(
    state_id: str, store_url: str, follow: bool, as_json: bool, wait: bool, keys_file: str | None
) -> None:
    """Show one State's history as a timeline (an encrypted one needs --keys).

    --follow works like tail -f, across processes on every store: it ends when the run
    stops (a stop or error entry, already there or saved meanwhile), with Ctrl-C (exit
    status 130), or when the State is deleted, or deleted and re-created (exit status 1).
    --wait makes it tail -F: it waits for a State that does not exist yet, and for one
    deleted meanwhile, and follows a re-created one from seq 0 (a line on stderr says so)."""
    # Ctrl-C is how a follow is meant to end: status 130 without a message.
    with (
        reporting(stopped=None) if follow else reporting(),
        open_store_at(store_url, keys_file) as store,
    ):
        record = store.read(state_id)
        if record is None:
            if not wait:
                fail(missing_error(state_id, store_url).found)
            say(
                f"statekeep: no State {state_id!r} yet; waiting for it to be saved (Ctrl-C to stop)", err=True
            )
            record = _follow.wait_for(store, state_id)
        if follow:
            _follow.follow(store, state_id, record, as_json=as_json, wait=wait)
        elif as_json:
            emit([record_json(state_id, record)])
        else:
            emit(timeline(state_id, record))
