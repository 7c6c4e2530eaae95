"""The blob capability group (large values stored once), ``gc``'s result, and a read with
its blobs fetched in the same owner-loop call (see :mod:`statekeep._core.blobs`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol, runtime_checkable

from .._core.blobs import names_in, wanted
from .._core.records import Record


@runtime_checkable
class Blobs(Protocol):
    """Blob storage: values above a store's ``offload=`` bound stored once (see
    :mod:`statekeep._store.engine` for what each method promises)."""

    async def _get_blobs(self, names: Collection[str]) -> dict[str, bytes]: ...

    async def _gc_blobs(self, dry_run: bool) -> tuple[int, int]: ...

    async def _blob_usage(self) -> tuple[int, int]: ...


class Collected(int):
    """What ``gc`` returns: the number of States removed (it is that int), with ``states``,
    ``blobs`` (blobs removed: no State referred to them) and ``blob_bytes`` (their bytes).
    With ``dry_run=True``: what would be removed."""

    states: int
    blobs: int
    blob_bytes: int

    def __new__(cls, states: int, blobs: int = 0, blob_bytes: int = 0) -> Collected:
        made = super().__new__(cls, states)
        made.states, made.blobs, made.blob_bytes = states, blobs, blob_bytes
        return made

    def __repr__(self) -> str:
        return f"Collected(states={self.states}, blobs={self.blobs}, blob_bytes={self.blob_bytes})"

    def __str__(self) -> str:
        return str(self.states)  # printed as the count of States it is, as before


class RawRecord:
    """A record a store's ``_read`` defers building (to the caller's thread), with the raw
    bytes it will build it from, so the blobs it lists are found without parsing it."""

    __slots__ = ("build", "raw")

    def __init__(self, build: Callable[[], Record], raw: bytes) -> None:
        self.build, self.raw = build, raw

    def __call__(self) -> Record:
        return self.build()


ReadResult = Record | Callable[[], Record] | None


async def with_blobs(store: Blobs, read: ReadResult) -> tuple[ReadResult, dict[str, bytes] | None]:
    """A ``_read``'s result and the stored bytes of the blobs it lists (on the owner loop)."""
    if read is None:
        return None, None
    if isinstance(read, RawRecord):
        names = names_in(read.raw)
    else:
        if callable(read):
            read = read()  # a store of one's own deferring without its bytes: built here
        names = wanted(read.entries)
    if not names:
        return read, {}
    found = await store._get_blobs(names)
    if len(found) < len(names):
        return read, _Missing(found)
    return read, found


class _Missing(dict[str, bytes]):
    """The blobs found when some a record lists were not (see :func:`missing_blobs`)."""


def missing_blobs(found: tuple[ReadResult, dict[str, bytes] | None]) -> bool:
    """Whether :func:`with_blobs` found fewer blobs than the record lists."""
    return isinstance(found[1], _Missing)
