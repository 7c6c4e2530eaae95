"""``--rename-prefix``: States moved under ``prefix + id``, links among them renamed too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .._core.ids import MAX_ID_LENGTH, validate_id
from .._core.records import Record


class RenameError(ValueError):
    """A rename prefix would make some ids invalid (too long): nothing was written.
    ``prefix`` and ``ids`` (the source ids it cannot rename) say which."""

    def __init__(self, prefix: str, ids: list[str]) -> None:
        shown = ", ".join(f"{i[:40]}... ({len(i)} characters)" if len(i) > 40 else i for i in ids[:5])
        super().__init__(
            f"the prefix {prefix!r} would make {len(ids)} State ids invalid (longer than "
            f"{MAX_ID_LENGTH} characters): {shown}; nothing was written. Use a shorter prefix"
        )
        self.prefix = prefix
        self.ids = ids


def check_renames(ids: Iterable[str], prefix: str | None) -> None:
    """RenameError unless ``prefix + id`` is a valid id for each of ``ids``."""
    if prefix:
        bad = [i for i in ids if not _valid(prefix + i)]
        if bad:
            raise RenameError(prefix, bad)


def _valid(state_id: str) -> bool:
    try:
        validate_id(state_id)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Rename:
    """``--rename-prefix``: each State moved goes under ``prefix + id``; ``moved`` holds the
    ids moved together (links to them are renamed, links to others kept as they are)."""

    prefix: str
    moved: frozenset[str]

    def link(self, state_id: str) -> str:
        return self.prefix + state_id if state_id in self.moved else state_id


def renamed(state_id: str, record: Record, rename: Rename) -> tuple[str, Record]:
    """The State under ``rename.prefix + state_id``, with the ids it refers to (its
    ``parent``, in its snapshot and its task entry, and its ``forked_from`` source)
    prefixed too when those States are moved with it, so a tree moved together stays
    linked; a link to a State not moved is kept as it is (it names that State in the
    source's id space)."""
    new_id = validate_id(rename.prefix + state_id)
    entries = list(record.entries)
    if entries and isinstance(entries[0].get("parent"), str):
        entries[0] = {**entries[0], "parent": rename.link(entries[0]["parent"])}
    snapshot = record.snapshot
    if snapshot is not None:
        snapshot = dict(snapshot)
        if isinstance(snapshot.get("parent"), str):
            snapshot["parent"] = rename.link(snapshot["parent"])
        forked = snapshot.get("forked_from")
        if isinstance(forked, dict) and isinstance(forked.get("id"), str):
            snapshot["forked_from"] = {**forked, "id": rename.link(forked["id"])}
    return new_id, Record(entries, snapshot)
