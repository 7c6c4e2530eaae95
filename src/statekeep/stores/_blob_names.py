"""The blob names stored lines refer to, for a trim that recomputes a State's references
from the lines it keeps (SQLite; the PostgreSQL statement and the Redis trim script read
them the same way).

What a stored line refers to is its top-level list ``"sk.blobs"`` (see
:func:`statekeep._core.blobs.with_refs`): every name it depends on, the inner ones of a
nested value too (offload works innermost first, so a blob's own bytes may refer to another
blob, which the line's body does not show). A body's own ``"sk.blob":"NAME"`` references
are counted as well (a line written without the list, as older tests' lines are): a superset
is safe, it only keeps a blob longer. A sealed line (encrypted store) lists its names in
clear as any line does (every sealed line that refers to a blob has, since blobs exist), so
one that lists none refers to none: a trimmed State's base record written inline, a sealed
snapshot (snapshots are never offloaded).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .._core.blobs import names_in

#: What a line holding a reference contains (a quick test before the regular expression).
MARK = b'"sk.blob":"'
#: What a line listing the names it refers to contains.
LIST_MARK = b'"sk.blobs":'
_NAME = re.compile(rb'"sk\.blob":"([^"\\]+)"')


def referred(lines: Iterable[tuple[int, bytes]]) -> dict[str, int]:
    """Each blob name the ``(seq, line)`` pairs refer to, with the first seq that does (a
    sealed line's: the names it lists in clear)."""
    found: dict[str, int] = {}
    for seq, line in lines:
        if LIST_MARK in line:
            for name in sorted(names_in(line)):
                found.setdefault(name, seq)
        if MARK in line:
            for raw in _NAME.findall(line):
                found.setdefault(raw.decode(), seq)
    return found
