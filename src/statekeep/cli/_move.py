"""``statekeep export``, ``import`` and ``copy``: move States between stores and files.

Each shows a progress bar on stderr when it is a terminal (none with ``--quiet`` or when
piped) and ends with a summary line (none with ``--quiet``). A State that differs in the
destination, fails its check after writing, or cannot be read (damaged), is left as it is
and named on stderr with why, one line each, while the others move: exit 3 at the end. A
State named on the command line that the source does not hold: exit 1.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from .._core.errors import DecryptionError
from .._core.ids import MAX_ID_LENGTH
from .._core.passwords import redact_text
from .._transfer.transfer import CopyReport, RenameError
from ._common import (
    DATA_ERROR,
    INTERRUPTED,
    NOT_FOUND,
    USAGE,
    fail,
    labels_arg,
    open_store_at,
    reporting,
    say,
    store_option,
)
from ._destination import open_destination
from ._group import main
from ._keyadvice import keys_trouble
from ._keys import KEYS_ENV, KEYS_HELP, ProgressBar, keys_option
from ._moveopts import (
    filter_options,
    ids_arg,
    listing_filters,
    memory_scope_option,
    memory_scopes,
    prefix_arg,
)

T = TypeVar("T")
_FILTER_KEYS = ("status", "agent", "parent", "prefix")


def _states(count: int) -> str:
    return f"{count} State" if count == 1 else f"{count} States"


_AGAIN = "stopped part way; run it again to finish (what is done is skipped)"


def _run(
    work: Coroutine[Any, Any, T], bar: ProgressBar, what: str, stores: dict[str, str], again: str = _AGAIN
) -> T:
    """Run a move on an event loop of its own; Ctrl-C is exit 130 (saying ``again``);
    a rename prefix that makes ids too long is bad usage (exit 2), before anything is written;
    so is a record that needs other keys (or none), said in the command's options
    (``stores``: the source's and the destination's, as messages name them)."""
    try:
        return asyncio.run(work)
    except DecryptionError as exc:
        bar.close()
        fail(keys_trouble(what, exc, stores), USAGE)
    except RenameError as exc:
        bar.close()
        shown = ", ".join(f"{i[:40]}... ({len(i)} characters)" if len(i) > 40 else i for i in exc.ids[:5])
        fail(
            f"{what}: --rename-prefix {exc.prefix!r} makes {len(exc.ids)} State ids longer than "
            f"{MAX_ID_LENGTH} characters ({shown}); nothing was written: use a shorter prefix",
            USAGE,
        )
    except KeyboardInterrupt:
        bar.close()
        fail(f"{what} {again}", INTERRUPTED)
    finally:
        bar.close()


def _named(name: str) -> str:
    """A State's id, or an agent memory key's ``memory SCOPE: key``, as a message names it."""
    return f"agent {name}" if name.startswith("memory ") else f"State {name!r}"


def _end(left_behind: list[str], missing: str | None) -> None:
    """The last lines on stderr, one each: every State left behind and why, and the States
    asked for that the source does not hold (``missing``); then exit 3 if any was left
    behind, else 1 if any is missing."""
    lines = [*([missing] if missing else []), *left_behind]
    for line in lines[:-1]:
        say(f"statekeep: {redact_text(line)}", err=True)
    if lines:
        fail(lines[-1], DATA_ERROR if left_behind else NOT_FOUND)


def _full(url: str) -> str:
    """A store as a message names it: a plain path made absolute, a URL as given."""
    return url if "://" in url else str(Path(url).absolute())


def _finish(command: str, report: CopyReport, source: str, destination: str, quiet: bool) -> None:
    """The summary; what the export file left out (an import: notes); then the exit status:
    3 naming each State left behind and why (with how to resolve a State that differs in
    ``destination``), 1 the States ``source`` does not hold."""
    if not quiet:
        say(f"{command}: {report}")
    for name, why in report.left_out.items():
        say(f"statekeep: note: the file lacks {_named(name)}: the export left it out ({why})", err=True)
    lines = []
    for name, why in sorted(report.failed.items()):
        if name in report.differ:
            why += (
                f". Delete it there to replace it (statekeep delete {name} --store {destination}), "
                f"or {command} it under another id with --rename-prefix PREFIX"
            )
        lines.append(why if name in why else f"{name}: {why}")
    missing = f"not in {source}: {', '.join(report.missing[:10])} (check the ids with statekeep list --store {source})"
    _end(lines, missing if report.missing else None)


def _choose(
    ids: tuple[str, ...], everything: bool, filters: dict[str, Any], command: str
) -> list[str] | None:
    """The ids to move (None: those the filters list); bad usage is exit 2."""
    if ids and (everything or filters):
        fail(f"{command}: give State ids, or --all / filters to choose them, not both", USAGE)
    if not ids and not everything and not filters:
        fail(f"{command}: name the States to move (IDs), or pass --all or a filter (see --help)", USAGE)
    return list(ids) if ids else None


_STARTS_OVER = "stopped: run it again (it starts over)"


@main.command("export")
@click.argument("ids", nargs=-1, callback=ids_arg)
@click.option("--all", "everything", is_flag=True, help="every State the store lists")
@filter_options
@click.option("-o", "--output", required=True, help="the file to write (- for stdout)")
@store_option
@keys_option
@memory_scope_option("export")
@click.option("--quiet", "-q", is_flag=True, help="no progress bar and no summary")
def export_states(
    ids: tuple[str, ...],
    everything: bool,
    status: str | None,
    agent: str | None,
    labels: dict[str, str],
    id_prefix: str | None,
    output: str,
    store_url: str,
    keys_file: str | None,
    scopes: tuple[str, ...],
    quiet: bool,
) -> None:
    """Write States to a portable JSON Lines file: a header (format version, source, counts),
    each State's snapshot and entries, and a trailer with a checksum. It holds what reading
    gives: decrypted with --keys, labels and expiry included. A State the store cannot read
    is left out, named (exit 3) and listed in the trailer. The file appears once whole;
    a new one is readable by its owner only (0600), one replaced keeps its mode."""
    from .._transfer.exporting import aexport

    chosen = _choose(ids, everything, listing_filters(status, agent, labels, id_prefix), "export")
    bar = ProgressBar.on_terminal("exporting", quiet=quiet)
    with reporting(), open_store_at(store_url, keys_file) as store:
        out: Any = sys.stdout.buffer if output == "-" else output
        filters = listing_filters(status, agent, labels, id_prefix)
        scoped = memory_scopes(scopes, chosen is None and not filters)
        work = aexport(store, out, ids=chosen, filters=filters, progress=bar, memory_scopes=scoped)
        try:
            done = _run(work, bar, "export", {"source": _full(store_url)}, _STARTS_OVER)
            count, entries, missing, gone, kept, left = done
        except BrokenPipeError:  # the reader went away (| head): done, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
    if not quiet:
        where = "stdout" if output == "-" else str(Path(output).absolute())
        skipped = f"; {gone} expired or deleted meanwhile (skipped)" if gone else ""
        memory = f" and {kept} agent memory keys" if kept else ""
        lacks = f"; {_states(len(left))} left out (named below)" if left else ""
        say(
            f"export: {_states(count)}{memory} ({entries} entries) written to {where}{skipped}{lacks}",
            err=output == "-",
        )
    _end(
        [f"{_named(item.name)} cannot be read in the source: {item.why}" for item in left],
        f"not in {_full(store_url)}: {', '.join(missing[:10])} (the file holds the others)"
        if missing
        else None,
    )


@main.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@store_option
@click.option(
    "--rename-prefix", callback=prefix_arg, help="put each State under PREFIX+id (to avoid clashes)"
)
@click.option("--keys", "keys_file", metavar="FILE", help="seal what is imported: " + KEYS_HELP)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar and no summary")
def import_states(
    file: str, store_url: str, rename_prefix: str | None, keys_file: str | None, quiet: bool
) -> None:
    """Put the States of an export file (- reads standard input) into a store (created if
    missing). The whole file is checked first (format, version, counts, checksum);
    identical States are skipped, and a State that differs in the store is left as it is
    and named (exit 3). States the export left out (its trailer says) are named too."""
    from .._transfer.exporting import aimport

    if file == "-" and sys.stdin.isatty():
        fail(
            "import -: standard input is a terminal; pipe an export file into it "
            "(statekeep export ... -o - | statekeep import - ...), or give its path",
            USAGE,
        )
    source: Any = sys.stdin.buffer if file == "-" else file
    bar = ProgressBar.on_terminal("importing", quiet=quiet)
    with reporting(), open_destination(store_url, keys_file) as store:
        work = aimport(store, source, rename_prefix=rename_prefix, progress=bar)
        report = _run(work, bar, "import", {"destination": _full(store_url)})
    _finish("import", report, "standard input" if file == "-" else file, _full(store_url), quiet)


def _filter_arg(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    return labels_arg(ctx, param, values)


@main.command("copy")
@click.argument("src_url")
@click.argument("dst_url")
@click.option(
    "--ids", multiple=True, metavar="ID", callback=ids_arg, help="a State to copy; repeat for several"
)
@click.option(
    "--filter",
    "pairs",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_filter_arg,
    help="status, agent, parent or prefix=VALUE; any other KEY is a label; repeat: all must match",
)
@filter_options
@click.option(
    "--rename-prefix", callback=prefix_arg, help="put each State under PREFIX+id (to avoid clashes)"
)
@click.option("--src-keys", metavar="FILE", help="the keys of an encrypted source: " + KEYS_HELP)
@click.option("--dst-keys", metavar="FILE", help="seal the copies with these keys (the same JSON document)")
@memory_scope_option("copy")
@click.option(
    "--plaintext",
    is_flag=True,
    help=f"with --src-keys or ${KEYS_ENV} and no --dst-keys: write the copies in clear (else refused)",
)
@click.option("--quiet", "-q", is_flag=True, help="no progress bar and no summary")
def copy_states(
    src_url: str,
    dst_url: str,
    ids: tuple[str, ...],
    pairs: dict[str, str],
    status: str | None,
    agent: str | None,
    labels: dict[str, str],
    id_prefix: str | None,
    rename_prefix: str | None,
    src_keys: str | None,
    dst_keys: str | None,
    scopes: tuple[str, ...],
    plaintext: bool,
    quiet: bool,
) -> None:
    """Copy States from one store to another (created if missing): the --ids given, else
    those the filters select, else all. Resumable and idempotent: run it again after a
    crash or Ctrl-C and it finishes; identical States are skipped, the source's snapshot
    replaces a destination's that differs, and a State whose history differs in the
    destination, or that the source cannot read, is left as it is and named (exit 3).
    Each copy is read back and checked.
    With --src-keys or $STATEKEEP_KEYS opening the source, give --dst-keys (or --plaintext
    to write the copies in clear)."""
    from .._transfer.transfer import acopy

    filters = listing_filters(status, agent, labels, id_prefix)
    for key, value in pairs.items():
        if key in _FILTER_KEYS:
            filters["id_prefix" if key == "prefix" else key] = value
        else:
            filters.setdefault("labels", {})[key] = value
    if ids and filters:
        fail("copy: give --ids, or filters, not both", USAGE)
    opener = "--src-keys" if src_keys is not None else f"${KEYS_ENV}" if os.environ.get(KEYS_ENV) else None
    if opener is not None and dst_keys is None and not plaintext:
        fail(
            f"copy: {opener} opens the source but the destination gets no keys, so the copies "
            "would be written in clear: give --dst-keys FILE to seal them, or --plaintext to "
            "write them in clear",
            USAGE,
        )
    bar = ProgressBar.on_terminal("copying", quiet=quiet)
    with (
        reporting(),
        open_store_at(src_url, src_keys, missing="check SRC_URL, the store to copy from") as src,
        open_destination(dst_url, dst_keys, env=False) as dst,
    ):
        if src == dst:
            fail("copy: the source and the destination are the same store", USAGE)
        whole = not ids and not filters
        work = acopy(
            src,
            dst,
            ids=list(ids) or None,
            filters=filters,
            rename_prefix=rename_prefix,
            progress=bar,
            memory_scopes=memory_scopes(scopes, whole),
        )
        stores = {"source": _full(src_url), "destination": _full(dst_url)}
        report = _run(work, bar, "copy", stores)
    _finish("copy", report, stores["source"], stores["destination"], quiet)
