"""The rule for State ids, shared by every store.

An id is 1 to 128 ASCII characters from ``A-Z a-z 0-9 _ -``. It is a path component
for the FileStore and a key for the server stores, so the rule is checked before any
storage is touched. ASCII only: two Unicode spellings of one name would otherwise be two
States on some file systems and one on others.
"""

from __future__ import annotations

import re

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
