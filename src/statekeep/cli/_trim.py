"""``statekeep trim``: remove a compacted State's entries before a seq, keeping its base record."""

from __future__ import annotations

import click

from .._core.writes import missing_error
from ._common import fail, open_store_at, reporting, say, state_id_arg, store_option
from ._group import main
from ._keys import keys_option
from ._manage import _confirm, _need_terminal, yes_option


@main.command()
@click.argument("state_id", callback=state_id_arg)
@click.option(
    "--before", "before", type=int, required=True, help="remove the entries before this seq (at most the "
    "latest compaction's through + 1)",
)  # fmt: skip
@store_option
@yes_option
@keys_option
def trim(state_id: str, before: int, store_url: str, yes: bool, keys_file: str | None) -> None:
    """Remove a State's entries before --before, which its latest compaction's summary stands
    for, after asking (unless --yes). A base record at seq BEFORE - 1 keeps what loading the
    State needs of them (task, data, turn count, last agent, tool calls); every kept entry
    keeps its seq."""
    _need_terminal("trim", yes)
    with reporting(), open_store_at(store_url, keys_file) as store:
        record = store.read(state_id)
        if record is None:
            fail(missing_error(state_id, store_url).found)
        first = record.entries[0]["seq"] if record.entries and record.entries[0].get("kind") == "base" else 0
        _confirm(
            f"Replace the entries of State {state_id} from seq {first} to {before - 1} with one base record?",
            yes,
        )
        store.trim(state_id, before=before)
    say(f"trimmed {state_id}: its history starts at its base record, seq {before - 1}")
