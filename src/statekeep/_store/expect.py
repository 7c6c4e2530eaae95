"""The preconditions a store checks in the atomic step of a write, beside the seq rules,
in this order (:func:`check_preconditions`; the server stores' scripts keep it too):

- An append bound to an incarnation (a sealed one, or one given ``incarnation=``) is
  refused if the State was deleted and created again since (:func:`check_incarnation`).
- ``expect_next=N``: the write goes through only if the State's next seq is exactly N, so
  a writer whose view is stale (the State was deleted and made again, shorter) is refused
  instead of appending to a history it never saw (:func:`check_next`).
- A clear write (from a store without a keyring) is refused on a sealed State, whose
  encrypted store would then refuse the plaintext (:func:`check_clear`). A State is sealed
  when its snapshot is (without a snapshot: when its last entry is); each store judges it
  from what it reads of the State's tail anyway (:func:`sealed_text`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.errors import DecryptionError, StateConflictError

if TYPE_CHECKING:
    from .._core.writes import PreparedWrite

F = TypeVar("F", bound=Callable[..., Any])

#: How a sealed record (entry or snapshot) ends: its last key, whose value is
#: ``"<key id>:<base64>"`` (no quote inside), then ``}``. A clear record never has it:
#: statekeep refuses a top-level key starting with ``sk.``, a nested one is followed by
#: more than one ``}``, and a quote inside a string is escaped.
SEALED_KEY = b'"sk.sealed":"'


def check_expect(expect_next: object, create: bool) -> int | None:
    """``expect_next`` checked: None, or an int >= 0 (0 only, with ``create=True``)."""
    if expect_next is None:
        return None
    if type(expect_next) is not int or expect_next < 0:
        raise TypeError(f"expect_next must be an int >= 0 or None, got {expect_next!r}")
    if create and expect_next != 0:
        raise ValueError(
            f"expect_next={expect_next} with create=True: a new State's next seq is 0; nothing was written"
        )
    return expect_next


def expecting_next(write: PreparedWrite, expect_next: object) -> PreparedWrite:
    """``write`` with the caller's ``expect_next`` (checked: :func:`check_expect`)."""
    expected = check_expect(expect_next, write.create)
    return write if expected is None else dataclasses.replace(write, expect_next=expected)


def check_incarnation(write: PreparedWrite, stored: str | None) -> None:
    """In a store's atomic step, for an append: StateConflictError unless the State is
    still the incarnation ``write`` is bound to (it was deleted and created again since)."""
    if write.bound and not write.create and stored != write.incarnation:
        raise reborn(write.state_id)


def reborn(state_id: str) -> StateConflictError:
    """The error of an append bound to an incarnation the State no longer has."""
    return StateConflictError(
        f"State {state_id!r} was deleted and created again since this write was made for it "
        "(another incarnation of the id); nothing was written. Read the State again and "
        "continue from what it holds"
    )


def check_preconditions(write: PreparedWrite, incarnation: str | None, next_seq: int, sealed: bool) -> None:
    """All of a write's preconditions, in their order, against a State whose incarnation is
    ``incarnation``, next seq ``next_seq``, and that is ``sealed`` or not (a store may skip
    judging that for a sealed write, which it never refuses for it)."""
    check_incarnation(write, incarnation)
    check_next(write, next_seq)
    check_clear(write, sealed)


def check_next(write: PreparedWrite, next_seq: int) -> None:
    """StateConflictError unless the State's next seq is the write's ``expect_next``."""
    expected = write.expect_next
    if expected is not None and expected != next_seq:
        raise StateConflictError(
            f"State {write.state_id!r} has next seq {next_seq}, but this write expected "
            f"{expected} (expect_next): the State changed since it was read (another writer, or "
            "deleted and made again). Nothing was written; read the State again and continue "
            "from what it holds"
        )


def check_clear(write: PreparedWrite, sealed: bool) -> None:
    """DecryptionError if ``write`` is clear (its store has no keyring) and the State is sealed."""
    if sealed and write.opener is None:
        raise DecryptionError(
            f"State {write.state_id!r} is sealed (written by a store opened with encrypt=), and "
            "this store has no keyring: its plaintext would make the State unreadable there. "
            "Nothing was written; open the store with encrypt=Keyring({...}) holding the State's key"
        )


def sealed_text(raw: bytes | None) -> bool:
    """Whether an encoded record (entry line or snapshot) is a sealed one."""
    if raw is None:
        return False
    end = len(raw.rstrip(b"\n"))
    if raw[end - 2 : end] != b'"}':
        return False
    at = raw.rfind(SEALED_KEY, 0, end)
    return at >= 0 and raw.find(b'"', at + len(SEALED_KEY), end - 2) < 0


def sealed_after(
    sealed: bool | None, snapshot: bytes | None, snapshot_at: int | None, lines: tuple[bytes, ...]
) -> bool | None:
    """Whether a State is sealed after a write of ``lines`` and ``snapshot`` (None: kept;
    ``snapshot_at`` None: the State has none) to a State that was ``sealed`` before."""
    if snapshot is not None:
        return sealed_text(snapshot)
    if snapshot_at is None and lines:
        return sealed_text(lines[-1])
    return sealed


def runs_the_other_side(method: F) -> F:
    """Mark a default method of :class:`~statekeep.Store` that runs the store's other side
    (its ``awrite`` runs ``write``): whether it takes a keyword is that side's answer."""
    _OTHER_SIDE.add(method)
    return method


_OTHER_SIDE: set[object] = set()


def takes_expect_next(store: object) -> bool:
    """Whether ``store``'s write takes ``expect_next`` (a store written before it does not):
    its ``awrite`` if it has its own, else its ``write``."""
    cls = type(store)
    takes = _TAKES.get(cls)
    if takes is None:
        own = getattr(cls, "awrite", None)
        method = own if own not in _OTHER_SIDE else getattr(cls, "write", None)
        try:
            takes = _TAKES[cls] = "expect_next" in inspect.signature(method).parameters  # type: ignore[arg-type]
        except (TypeError, ValueError):
            takes = False
    return takes


#: Each class's answer to :func:`takes_expect_next` (a signature costs microseconds).
_TAKES: dict[type, bool] = {}


def expecting(store: object, expect_next: int | None) -> dict[str, Any]:
    """``expect_next=`` for a write to ``store``: only when known and the store takes it."""
    if expect_next is None or not takes_expect_next(store):
        return {}
    return {"expect_next": expect_next}
