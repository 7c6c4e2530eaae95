"""Export States to a file and import them back (the file format: :mod:`._exportfile`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple

from .._core.records import Record
from .._store.contract import Store
from .copycheck import UNREADABLE
from .exportfile import LeftOut, header_line, state_lines, states, trailer_line, verify
from .transfer import (
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
    #: What the store could not read (a damaged State, say): not in the file, which says so.
    left_out: tuple[LeftOut, ...] = ()


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

    A State the store cannot read (damaged: see :data:`~._copycheck.UNREADABLE`) is left out
    and the export goes on; the file's trailer lists it with why, as ``left_out`` does.
    """
    scopes = chosen_scopes(memory_scopes)
    if isinstance(out, str | Path) and not Path(out).absolute().parent.is_dir():
        folder = Path(out).absolute().parent
        raise FileNotFoundError(f"{folder}: no such folder to write {Path(out).name} in; create it first")
    if isinstance(out, str | Path) and Path(out).is_dir():
        folder = Path(out).absolute()
        raise IsADirectoryError(
            f"{folder} is a folder; name a file to write, such as {folder / 'runs.jsonl'}"
        )
    wanted = await chosen_ids(store, ids, filters)
    missing: list[str] = []
    left: list[LeftOut] = []
    count = entries = gone = 0
    incarnations = False  # some State line carries its incarnation: format version 3
    # The header holds the counts, so the States go to a scratch file first.
    with tempfile.TemporaryFile() as body:
        for done, state_id in enumerate(wanted, 1):
            try:
                record = await store.aread(state_id)
            except UNREADABLE as exc:  # this State only: the others go on
                left.append(LeftOut(state_id, str(exc)))
            else:
                if record is None and ids is None:
                    gone += 1  # walked, then expired or deleted before this read
                elif record is None:
                    missing.append(state_id)
                else:
                    count += 1
                    incarnations |= record.incarnation is not None
                    entries += _write_state(body, state_id, record)
            if progress is not None:
                progress(done, len(wanted))
        kept: dict[str, int] = {}
        for scope in scopes:
            for key, record in await _memory(store, scope, left):
                kept[scope] = kept.get(scope, 0) + 1
                entries += _write_state(body, key, record, scope)
        count_all = count + sum(kept.values())
        head = header_line(
            type(store).__name__, count_all, entries, memory_scopes=list(kept), incarnations=incarnations
        )
        tail = (count_all, entries, left)
        if isinstance(out, str | Path):
            _write_file(Path(out), head, body, *tail)
        else:
            _write_stream(out, head, body, *tail)
    return Exported(count, entries, missing, gone, count_all - count, tuple(left))


def _write_state(body: IO[bytes], state_id: str, record: Record, scope: str | None = None) -> int:
    """Write one State's lines (with its incarnation; without the source store's retention
    stamp: its policy, not the State's); return its entry count. An agent memory key
    (``scope``) is written without an incarnation."""
    incarnation = record.incarnation if scope is None else None
    kept = Record(record.entries, unstamped(record.snapshot), incarnation)
    body.writelines(state_lines(state_id, kept, scope))
    return len(record.entries)


async def _memory(store: Store, scope: str, left: list[LeftOut]) -> list[tuple[str, Record]]:
    """The keys of ``store``'s agent memory of ``scope``, as States (none for a store of
    one's own); a key that cannot be read goes to ``left``."""
    view = memory_view(store, scope)
    if view is None:
        return []
    found = []
    for key in await source_ids(view, {}):
        try:
            record = await view.aread(key)
        except UNREADABLE as exc:
            left.append(LeftOut(key, str(exc), scope))
            continue
        if record is not None:  # else removed meanwhile
            found.append((key, record))
    return found


def _write_stream(
    out: IO[bytes], head: bytes, body: IO[bytes], count: int, entries: int, left: list[LeftOut]
) -> None:
    digest = hashlib.sha256(head)
    out.write(head)
    body.seek(0)
    while block := body.read(1 << 20):
        digest.update(block)
        out.write(block)
    out.write(trailer_line(count, entries, digest.hexdigest(), left))
    out.flush()


def _write_file(
    path: Path, head: bytes, body: IO[bytes], count: int, entries: int, left: list[LeftOut]
) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)  # replacing a file: keep who may read it
    except FileNotFoundError:
        mode = 0o600  # new: the States' data, in clear, for the owner only
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent or ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            _write_stream(out, head, body, count, entries, left)
            os.fsync(out.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


@contextmanager
def _opened(source: str | Path | IO[bytes]) -> Iterator[IO[bytes]]:
    """The export file to read twice (checked whole, then imported): a path opened, or a
    stream (standard input) copied to a scratch file first, as it can be read only once."""
    if not isinstance(source, str | Path):
        with tempfile.TemporaryFile() as spooled:
            shutil.copyfileobj(source, spooled, 1 << 20)
            spooled.seek(0)
            yield spooled
        return
    try:
        file = open(source, "rb")  # noqa: SIM115 (closed below, after the caller is done)
    except FileNotFoundError:
        raise FileNotFoundError(f"{Path(source).absolute()}: no such export file") from None
    with file:
        yield file


async def aimport(
    store: Store,
    source: str | Path | IO[bytes],
    *,
    rename_prefix: str | None = None,
    progress: Progress | None = None,
) -> CopyReport:
    """Put every State of the export file ``source`` (a path, or a binary stream such as
    standard input) into ``store``, as :func:`acopy` does
    (new ones created, prefixes extended, identical ones skipped, different ones left
    unchanged and named in ``report.failed``).

    The agent memory the file holds goes to ``store.memory(scope)`` (its keys never
    renamed), counted in ``report.memory``. The whole file is checked first (format, version, counts, checksum): a file that fails
    imports nothing (:class:`~statekeep._transfer.exportfile.ExportFileError`), and so does a
    ``rename_prefix`` that makes an id too long (:class:`~statekeep._transfer.transfer.RenameError`).
    Then it is read again,
    one State at a time. Each State is durable on return as ``store.awrite`` is. What the
    file's export left out (its trailer says) is in ``report.left_out``.
    """
    report = CopyReport()
    with _opened(source) as file:
        header = verify(file)
        report.left_out = {item.name: item.why for item in header.left_out}
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
