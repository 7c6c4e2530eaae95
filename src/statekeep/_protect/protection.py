"""What a store does to records on their way out and back in: redaction and sealing.

The built-in stores run every write through :meth:`Protection.write` in the caller's
thread (redacted, validated, sealed) and every read through :meth:`Protection.record`, so a
backend stores and returns what it is given and never sees a key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from .._core.errors import DecryptionError
from .._core.labels import is_memory_namespace
from .._core.query import Page
from .._core.records import Entries, Record, SavedState, Snapshot
from .._core.redactor import Redactor
from .._core.writes import PreparedWrite, prepare_write
from .sealing import (
    SEALED,
    TASK_MARK,
    Keyring,
    is_sealed,
    open_entry,
    open_snapshot,
    open_task,
    seal_entry,
    seal_snapshot,
)


class Protection:
    """A store's ``redact=``, ``encrypt=`` and ``allow_plaintext=`` (checked)."""

    __slots__ = ("allow_plaintext", "keyring", "redactor")

    def __init__(
        self, redact: object = None, encrypt: object = None, allow_plaintext: object = False
    ) -> None:
        if redact is not None and not isinstance(redact, Redactor):
            raise TypeError(f"redact= takes a statekeep.Redactor, got {type(redact).__name__}")
        if encrypt is not None and not isinstance(encrypt, Keyring):
            raise TypeError(f"encrypt= takes a statekeep.Keyring, got {type(encrypt).__name__}")
        if type(allow_plaintext) is not bool:
            raise TypeError(f"allow_plaintext must be a bool, got {allow_plaintext!r}")
        if allow_plaintext and encrypt is None:
            raise ValueError("allow_plaintext=True only means something with encrypt=: give a Keyring too")
        self.redactor: Redactor | None = redact
        self.keyring: Keyring | None = encrypt
        self.allow_plaintext: bool = allow_plaintext

    @property
    def active(self) -> bool:
        return self.redactor is not None or self.keyring is not None

    def write(
        self,
        namespace: str,
        state_id: str,
        entries: Entries,
        snapshot: Snapshot,
        create: bool,
        incarnation: str | None = None,
        bound: bool = False,
    ) -> PreparedWrite:
        """A write redacted, validated (:func:`prepare_write`) and sealed for the State's
        ``incarnation`` (a create stores it; ``bound``: an append refused unless the State
        is still that incarnation)."""
        if snapshot is not None and isinstance(snapshot, dict):
            _check_own_keys(snapshot)
        write = prepare_write(state_id, entries, snapshot, create, incarnation, bound)
        redactor, ring = self.redactor, self.keyring
        if redactor is None and ring is None:
            return write
        # From here on the write's own encoding: plain dicts, lists and strs, checked.
        plain = [orjson.loads(line) for line in write.lines]
        snap = None if write.snapshot is None else orjson.loads(write.snapshot)
        if redactor is not None:
            plain = [redactor.entry(entry) for entry in plain]
            memory = is_memory_namespace(namespace)  # a memory key's value is judged by its name
            snap = None if snap is None else redactor.snapshot(snap, memory=memory)
            write = prepare_write(state_id, plain, snap, create, incarnation, bound)
        if ring is None:
            return write
        entries = plain
        snapshot = snap
        lines = tuple(
            seal_entry(ring, line, entry, namespace, state_id, incarnation)
            for line, entry in zip(write.lines, entries, strict=True)
        )
        sealed = None if snapshot is None else seal_snapshot(ring, snapshot, namespace, state_id, incarnation)
        opener = self.opener(namespace, state_id, incarnation)
        return dataclasses.replace(write, lines=lines, snapshot=sealed, plain=write.lines, opener=opener)

    def opener(
        self, namespace: str, state_id: str, incarnation: str | None
    ) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
        """Opens a stored entry of ``state_id`` for comparing with a write's plaintext."""

        def open_stored(seq: int, stored: dict[str, Any]) -> dict[str, Any]:
            return self.entry(namespace, state_id, seq, stored, incarnation)

        return open_stored

    def entry(
        self, namespace: str, state_id: str, seq: int, stored: dict[str, Any], incarnation: str | None
    ) -> dict[str, Any]:
        ring = self.keyring
        if ring is not None and is_sealed(stored):
            return open_entry(ring, stored, namespace, state_id, seq, incarnation)
        if ring is not None and not self.allow_plaintext:
            raise _plaintext(state_id, f"entry seq {seq}")
        if ring is None and is_sealed(stored):
            raise _no_ring(state_id, f"entry seq {seq}", stored[SEALED])
        return stored

    def record(self, namespace: str, state_id: str, record: Record | None, since: int) -> Record | None:
        """A stored Record opened; :class:`DecryptionError` for what cannot be."""
        if record is None:
            return None
        incarnation = record.incarnation
        snapshot = self.snapshot(namespace, state_id, record.snapshot, incarnation)
        entries = record.entries
        first = entries[0].get("seq") if entries else None
        if type(first) is int and first > since:
            since = first  # a trimmed history read from below its base starts at the base
        if self.keyring is None:
            for i, stored in enumerate(entries):  # a dict lookup each: sealed ones are refused
                if SEALED in stored:
                    raise _no_ring(state_id, f"entry seq {since + i}", stored[SEALED])
            return record
        opened = [self.entry(namespace, state_id, since + i, e, incarnation) for i, e in enumerate(entries)]
        return Record(opened, snapshot, incarnation)

    def snapshot(
        self, namespace: str, state_id: str, snapshot: dict[str, Any] | None, incarnation: str | None
    ) -> dict[str, Any] | None:
        if snapshot is None:
            return None
        ring = self.keyring
        if ring is None:
            if is_sealed(snapshot):
                raise _no_ring(state_id, "snapshot", snapshot[SEALED])
            return snapshot
        if is_sealed(snapshot):
            return open_snapshot(ring, snapshot, namespace, state_id, incarnation)
        if not self.allow_plaintext:
            raise _plaintext(state_id, "snapshot")
        return snapshot

    def rows(self, namespace: str, page: Page) -> Page:
        """A listing page with sealed tasks opened (with no keyring, shown as ``[sealed]``)."""
        if not any(row.task.startswith(TASK_MARK) for row in page):
            return page
        rows = [
            row
            if not row.task.startswith(TASK_MARK)
            else dataclasses.replace(row, task=self._task(namespace, row))
            for row in page
        ]
        return Page(rows, page.next)

    def _task(self, namespace: str, row: SavedState) -> str:
        """A listing row's sealed task, opened; ``[sealed]`` when this ring cannot open it
        (a key it lacks during a rotation, or a damaged record, which reads report)."""
        ring = self.keyring
        if ring is None:
            return "[sealed]"
        try:
            return open_task(ring, row.task, namespace, row.id)
        except DecryptionError:
            return "[sealed]"


def _check_own_keys(snapshot: dict[str, Any]) -> None:
    """Refuse a snapshot that would read back as a sealed one."""
    task = snapshot.get("task")
    if SEALED in snapshot or (isinstance(task, str) and task.startswith(TASK_MARK)):
        raise ValueError(
            f"the snapshot holds {SEALED!r} or a task starting with {TASK_MARK!r}, which are "
            "statekeep's marks of a sealed record; nothing was written. Rename the key or the task"
        )


class RefusedRecord(DecryptionError):
    """A record the store may not read as it was opened. The message says what to do in this
    API's words; ``fact`` says only what was found, for a caller that speaks in others (the
    command line, in its options)."""

    def __init__(self, message: str, fact: str) -> None:
        super().__init__(message)
        self.fact = fact


class InClearError(RefusedRecord):
    """A record stored in clear, read by a store opened with keys (and no allow_plaintext)."""


class NoKeysError(RefusedRecord):
    """A sealed record, read by a store opened without keys."""


def _plaintext(state_id: str, what: str) -> DecryptionError:
    return InClearError(
        f"State {state_id!r} {what} is plaintext, and this store was opened with encrypt=, which "
        "reads sealed records only: pass allow_plaintext=True to read it, or run "
        "`statekeep rekey` to seal it",
        f"State {state_id!r} {what} is stored in clear, not sealed",
    )


def _no_ring(state_id: str, what: str, sealed: object) -> DecryptionError:
    kid = sealed.partition(":")[0] if isinstance(sealed, str) else "?"
    return NoKeysError(
        f"State {state_id!r} {what} is sealed with key {kid!r}, and this store has no keyring: "
        "open it with encrypt=Keyring({...}) holding that key",
        f"State {state_id!r} {what} is sealed with key {kid!r}, and no keys were given",
    )
