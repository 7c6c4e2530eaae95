"""Where a LangGraph store item lives in agent memory: the key of ``(namespace, key)``.

The rule (:func:`memory_key`):

- Each namespace label is followed by ``.`` (a label never holds one: LangGraph refuses it),
  then ``\\x00`` ends the namespace (a label never holds one either), then the item's key as
  it is: ``("users", "u1"), "prefs"`` is ``"users.u1.\\x00prefs"``. A namespace prefix is so a
  key prefix, and ``search(("users",))`` is the agent memory listing of the prefix ``"users."``.
  The first ``\\x00`` says where the namespace ends, so no two items share a key.
- Agent memory counts a key's length (:data:`~statekeep._store.agentmemory.KEY_RULE`: letters,
  digits and ``-`` one each, any other character three per UTF-8 byte, at most 128). A key
  over that is hashed: the longest run of whole leading labels that counts at most
  :data:`LABEL_ROOM` (93), then ``\\x01`` and 32 hex digits of the SHA-256 of the namespace and
  key. It never holds ``\\x00``, so it never equals a plain key, and it still starts with every
  prefix of its namespace that counts at most :data:`LABEL_ROOM`.
- A scan for a namespace prefix (:func:`scan_prefix`) is that prefix's labels, cut to the
  longest leading run that counts at most :data:`LABEL_ROOM` (the run a hashed key keeps): so
  every item below the prefix is found, plain or hashed, and the item's own full namespace,
  kept in its value, decides exactly whether it belongs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import orjson

#: The most a key may count (agent memory's rule).
KEY_ROOM = 128
#: What a hashed key's ``\x01`` and 32 hex digits count.
HASH_ROOM = 3 + 32
#: The most the leading labels kept in a hashed key (and a scan's prefix) count.
LABEL_ROOM = KEY_ROOM - HASH_ROOM
END = "\x00"
HASHED = "\x01"
_PLAIN = re.compile(r"[A-Za-z0-9-]")


def cost(text: str) -> int:
    """What ``text`` counts under agent memory's key rule."""
    return sum(1 if _PLAIN.fullmatch(c) else 3 * len(c.encode()) for c in text)


def labels_part(labels: Sequence[str]) -> str:
    """The escaped labels: each followed by ``.``."""
    return "".join(f"{label}." for label in labels)


def _kept(labels: Sequence[str]) -> str:
    """The longest run of whole leading labels that counts at most :data:`LABEL_ROOM`."""
    out, used = "", 0
    for label in labels:
        part = f"{label}."
        used += cost(part)
        if used > LABEL_ROOM:
            break
        out += part
    return out


def memory_key(namespace: Sequence[str], key: str) -> str:
    """The agent memory key of item ``key`` in ``namespace`` (see the module)."""
    full = labels_part(namespace) + END + key
    if cost(full) <= KEY_ROOM:
        return full
    digest = hashlib.sha256(orjson.dumps([list(namespace), key])).hexdigest()[:32]
    return _kept(namespace) + HASHED + digest


def scan_prefix(labels: Sequence[str]) -> str | None:
    """The key prefix to list for items whose namespace starts with ``labels`` (None: all)."""
    return _kept(labels) or None


def plain_namespace(mkey: str) -> tuple[str, ...] | None:
    """The namespace a plain key names (None for a hashed one: its value says)."""
    head, end, _ = mkey.partition(END)
    if not end:
        return None
    return tuple(head.split(".")[:-1])
