"""The blob names stored lines refer to, for a trim that recomputes a State's references
from the lines it keeps (SQLite and PostgreSQL; the Redis trim script scans the same way).

A reference inside a stored line is the JSON object ``{"sk.blob": NAME, ...}``, encoded
without spaces: ``"sk.blob":"NAME"``. The same text inside a string value is escaped
(``\\"sk.blob\\":\\"``), so it is never taken for a reference. A sealed line (encrypted
store) shows no references: a State with one is left with the references it has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .._store.expect import sealed_text

#: What a line holding a reference contains (a quick test before the regular expression).
MARK = b'"sk.blob":"'
_NAME = re.compile(rb'"sk\.blob":"([^"\\]+)"')


def referred(lines: Iterable[tuple[int, bytes]]) -> dict[str, int] | None:
    """Each blob name the ``(seq, line)`` pairs refer to, with the first seq that does; None
    if a line is sealed (its references cannot be read: keep the State's as they are)."""
    found: dict[str, int] = {}
    for seq, line in lines:
        if sealed_text(line):
            return None
        if MARK in line:
            for name in _NAME.findall(line):
                found.setdefault(name.decode(), seq)
    return found
