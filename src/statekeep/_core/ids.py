"""The rule for State ids, shared by every store.

An id is 1 to 128 ASCII characters from ``A-Z a-z 0-9 _ -``. It is a path component
for the FileStore and a key for the server stores, so the rule is checked before any
storage is touched. ASCII only: two Unicode spellings of one name would otherwise be two
States on some file systems and one on others.
"""

from __future__ import annotations

import re
import uuid

ID_RULE = "1 to 128 characters from A-Z, a-z, 0-9, '_' and '-'"
MAX_ID_LENGTH = 128
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def validate_id(state_id: object) -> str:
    """Return ``state_id`` if it follows the id rule, else raise ValueError or TypeError."""
    if type(state_id) is not str:
        raise TypeError(f"a State id must be a str, got {type(state_id).__name__}")
    if _ID.fullmatch(state_id) is None:
        shown = state_id if len(state_id) <= 40 else state_id[:40] + "..."
        raise ValueError(f"invalid State id {shown!r} (length {len(state_id)}): an id is {ID_RULE}")
    return state_id


_INCARNATION = re.compile(r"[0-9a-f]{32}")


def new_incarnation() -> str:
    """A new random incarnation id (what a State gets when it is created): 32 hex digits."""
    return uuid.uuid4().hex


def validate_incarnation(value: object) -> str | None:
    """Return ``value`` if it is an incarnation id (32 lowercase hex digits) or None, else
    raise ValueError or TypeError."""
    if value is None:
        return None
    if type(value) is not str:
        raise TypeError(f"an incarnation id must be a str, got {type(value).__name__}")
    if _INCARNATION.fullmatch(value) is None:
        raise ValueError(
            f"invalid incarnation id {value[:40]!r}: it is 32 lowercase hex digits, as "
            "Record.incarnation and State.incarnation give it"
        )
    return value
