"""Framework ids (LangGraph thread ids, OpenAI session ids, ...) as statekeep State ids.

A framework id is any string; a State id is 1 to 128 characters from ``A-Z a-z 0-9 _ -``.
:func:`state_id_for` maps one to the other without collisions (pure, no I/O):

- reversibly when it fits: ``a-z 0-9 -`` stay as they are, ``_`` becomes ``__`` and every
  other character becomes ``_`` and the two lowercase hex digits of each of its UTF-8 bytes
  (``"user:42"`` is ``"user_3a42"``, ``"Ann"`` is ``"_41nn"``); :func:`framework_id_for` undoes
  it. Capitals are escaped too: on a case-insensitive file system (macOS) a FileStore could
  not hold both ``"Ann"`` and ``"ann"`` otherwise;
- else (longer than 128 once escaped) by hash: ``"_h"`` and the SHA-256 of the id in hex. An
  escaped id never holds ``_h`` where an escape starts (after ``_`` comes ``_`` or a hex
  digit), so the two forms never meet. The adapters keep the original id in the snapshot
  (its ``task``), which is also what ``statekeep list`` shows.
"""

from __future__ import annotations

import hashlib
import re

from .._core.ids import MAX_ID_LENGTH

_PLAIN = re.compile(r"[a-z0-9-]")
_ALL_PLAIN = re.compile(r"[a-z0-9-]+")
_ESCAPE = re.compile(r"_(_|[0-9a-f]{2})")
HASHED = "_h"


def state_id_for(framework_id: str) -> str:
    """The State id that stands for ``framework_id`` (any non-empty string)."""
    if type(framework_id) is not str:
        raise TypeError(f"a framework id must be a str, got {type(framework_id).__name__}")
    if not framework_id:
        raise ValueError("a framework id must not be empty")
    if len(framework_id) <= MAX_ID_LENGTH and _ALL_PLAIN.fullmatch(framework_id):
        return framework_id  # nothing to escape: one match, not one per character (every write)
    out: list[str] = []
    size = 0
    for char in framework_id:
        if _PLAIN.fullmatch(char):
            piece = char
        elif char == "_":
            piece = "__"
        else:
            try:
                raw = char.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 form, so no reversible one
                return _hashed(framework_id)
            piece = "".join(f"_{byte:02x}" for byte in raw)
        size += len(piece)
        if size > MAX_ID_LENGTH:
            return _hashed(framework_id)
        out.append(piece)
    return "".join(out)


def framework_id_for(state_id: str) -> str | None:
    """The framework id :func:`state_id_for` mapped to ``state_id``, or None for a hashed
    one (whose original the adapter keeps in the snapshot) or an id it never makes."""
    if state_id.startswith(HASHED):
        return None
    raw = bytearray()
    pos = 0
    while pos < len(state_id):
        char = state_id[pos]
        if char != "_":
            if not _PLAIN.fullmatch(char):
                return None
            raw += char.encode()
            pos += 1
            continue
        match = _ESCAPE.match(state_id, pos)
        if match is None:
            return None
        code = match.group(1)
        raw += b"_" if code == "_" else bytes([int(code, 16)])
        pos = match.end()
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return decoded if state_id_for(decoded) == state_id else None  # only ids it makes ("_41" is not)


def _hashed(framework_id: str) -> str:
    data = framework_id.encode("utf-8", "surrogatepass")
    return HASHED + hashlib.sha256(data).hexdigest()
