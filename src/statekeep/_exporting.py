"""Export States to a file and import them back (the file format: :mod:`._exportfile`)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

from ._exportfile import header_line, state_lines, states, trailer_line, verify
from ._records import Record
from ._store import Store
from ._transfer import (
    CopyReport,
    Progress,
    Rename,
    aput_one,
    check_renames,
    chosen_ids,
    chosen_scopes,
    memory_view,
    source_ids,
    unstamped,
)


class Exported(NamedTuple):
    """What an export wrote: ``states`` and ``entries``, the ids asked for that the store
    does not hold (``missing``), and how many States of a walk of the whole store were
    expired or deleted by the time they were read (``gone``: skipped)."""

    states: int
    entries: int
    missing: list[str]
    gone: int = 0
    #: Agent memory keys written (of the scopes asked for), not counted in ``states``.
    memory: int = 0


async def aexport(
    store: Store,
    out: str | Path | IO[bytes],
    *,
    ids: Iterable[str] | None = None,
    filters: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    memory_scopes: Iterable[str] = (),
) -> Exported:
    """Write the States of ``ids`` (else every State ``store`` lists with ``filters``, else
    every State it holds, those without a snapshot too) to ``out`` (a path, or a binary
    stream such as stdout) as an export file; return what it wrote (:class:`Exported`).

    Snapshots go without the store's retention stamp (an explicit expiry is kept). A path
    in a folder that does not exist is FileNotFoundError before anything is read. A new
    file is readable by its owner only (0600: it holds the States in clear); one that
    exists keeps its mode. A path is written whole or not at all: the file appears (atomically replacing one of
    that name) once complete and flushed to disk. Holds one State in memory at a time.

    ``memory_scopes``: the agent memory scopes written too, after the States (the file is
    then format version 2, which statekeep before it refuses).
    """
    scopes = chosen_scopes(memory_scopes)
    if isinstance(out, str | Path) and not Path(out).absolute().parent.is_dir():
        folder = Path(out).absolute().parent
        raise FileNotFoundError(f"{folder}: no such folder to write {Path(out).name} in; create it first")
    wanted = await chosen_ids(store, ids, filters)
    missing: list[str] = []
    count = entries = gone = 0
    incarnations = False  # some State line carries its incarnation: format version 3
    # The header holds the counts, so the States go to a scratch file first.
    with tempfile.TemporaryFile() as body:
        for done, state_id in enumerate(wanted, 1):
            record = await store.aread(state_id)
            if record is None and ids is None:
                gone += 1  # walked, then expired or deleted before this read
            elif record is None:
                missing.append(state_id)
            else:
                count += 1
                entries += len(record.entries)
                # The source store's retention stamp is its policy, not the State's.
                incarnations |= record.incarnation is not None
                kept_record = Record(record.entries, unstamped(record.snapshot), record.incarnation)
                body.writelines(state_lines(state_id, kept_record))
            if progress is not None:
                progress(done, len(wanted))
        kept: dict[str, int] = {}
        for scope in scopes:
            for key, record in await _memory(store, scope):
                kept[scope] = kept.get(scope, 0) + 1
                entries += len(record.entries)
                body.writelines(state_lines(key, Record(record.entries, unstamped(record.snapshot)), scope))
        count_all = count + sum(kept.values())
        head = header_line(
            type(store).__name__, count_all, entries, memory_scopes=list(kept), incarnations=incarnations
        )
        if isinstance(out, str | Path):
            _write_file(Path(out), head, body, count_all, entries)
        else:
            _write_stream(out, head, body, count_all, entries)
    return Exported(count, entries, missing, gone, count_all - count)


async def _memory(store: Store, scope: str) -> list[tuple[str, Record]]:
    """The keys of ``store``'s agent memory of ``scope``, as States (none for a store of
    one's own)."""
    view = memory_view(store, scope)
    if view is None:
        return []
    found = []
    for key in await source_ids(view, {}):
        record = await view.aread(key)
        if record is not None:  # else removed meanwhile
            found.append((key, record))
    return found


def _write_stream(out: IO[bytes], head: bytes, body: IO[bytes], count: int, entries: int) -> None:
    digest = hashlib.sha256(head)
    out.write(head)
    body.seek(0)
    while block := body.read(1 << 20):
        digest.update(block)
        out.write(block)
    out.write(trailer_line(count, entries, digest.hexdigest()))
    out.flush()


def _write_file(path: Path, head: bytes, body: IO[bytes], count: int, entries: int) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)  # replacing a file: keep who may read it
    except FileNotFoundError:
        mode = 0o600  # new: the States' data, in clear, for the owner only
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent or ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            _write_stream(out, head, body, count, entries)
            os.fsync(out.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


async def aimport(
    store: Store,
    path: str | Path,
    *,
    rename_prefix: str | None = None,
    progress: Progress | None = None,
) -> CopyReport:
    """Put every State of the export file at ``path`` into ``store``, as :func:`acopy` does
    (new ones created, prefixes extended, identical ones skipped, different ones left
    unchanged and named in ``report.failed``).

    The agent memory the file holds goes to ``store.memory(scope)`` (its keys never
    renamed), counted in ``report.memory``. The whole file is checked first (format, version, counts, checksum): a file that fails
    imports nothing (:class:`~statekeep._exportfile.ExportFileError`), and so does a
    ``rename_prefix`` that makes an id too long (:class:`~statekeep._transfer.RenameError`).
    Then it is read again,
    one State at a time. Each State is durable on return as ``store.awrite`` is.
    """
    report = CopyReport()
    with open(path, "rb") as file:
        header = verify(file)
        check_renames(header.ids, rename_prefix)
        rename = Rename(rename_prefix, frozenset(header.ids)) if rename_prefix else None
        file.seek(0)
        for done, (state_id, record, scope) in enumerate(states(file), 1):
            if scope is None:
                await aput_one(store, state_id, record, report, rename)
            else:
                await _put_memory(store, scope, state_id, record, report)
            if progress is not None:
                progress(done, header.states)
    return report


async def _put_memory(store: Store, scope: str, key: str, record: Record, report: CopyReport) -> None:
    """Put one agent memory key (never renamed), counted in ``report.memory[scope]``."""
    view = memory_view(store, scope)
    kept = report.memory.setdefault(scope, CopyReport())
    if view is None:
        kept.failed[key] = f"{type(store).__name__} has no agent memory"
    else:
        await aput_one(view, key, record, kept, None)
    if key in kept.failed:
        report.failed[f"memory {scope}: {key}"] = kept.failed[key]
