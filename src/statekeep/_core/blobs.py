"""Large values stored once: offloading them from entries to blobs, and putting them back (pure).

After redaction, :func:`offload` replaces each large value of an entry (a string, or a whole
JSON object or array, whose encoding exceeds the store's ``offload=`` bound) by a reference
``{"sk.blob": NAME, "size": BYTES}`` and returns the value's encoding to be stored once as a
blob named NAME. The rule is **innermost first**: a value's own large parts are offloaded
first, then the value itself if what is left of its encoding still exceeds the bound. So a
200 KB tool output that recurs inside a list of messages that differs every turn is one blob,
stored once, and no stored entry keeps more than about the bound inline (besides its small
values and references).

A stored line that refers to blobs carries their names at its top level, in clear, as
``"sk.blobs": [NAME, ...]``: reads find what to fetch with one lookup per entry, and ``gc``
finds what is referred to by scanning stored bytes (:func:`names_in`), sealed ones too,
without a key. :func:`resolve` puts the values back.

A user's own object holding the key ``"sk.blob"`` (at any depth) is refused with a clear
error (:func:`check_own_refs`): it would read back as a reference.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

#: The key of a reference to a blob: ``{"sk.blob": NAME, "size": BYTES}``.
REF = "sk.blob"
#: The top-level key of a stored line listing the blobs it refers to.
REFS = "sk.blobs"
#: The default ``offload=`` bound, in bytes of a value's JSON encoding.
DEFAULT_OFFLOAD = 32 * 1024
#: The smallest bound a store takes: a reference itself is about 90 bytes.
MIN_OFFLOAD = 256
_NAME = re.compile(rb'"sk\.blobs":\[([^\]]*)\]')
_HEX = re.compile(rb"[0-9a-f]{64}")
NAME_RULE = re.compile(r"[0-9a-f]{64}")


def check_offload(value: object, store: str) -> int | None:
    """A store's ``offload=`` argument, checked: None (values stay inline) or an int bound."""
    if value is None:
        return None
    if type(value) is not int or value < MIN_OFFLOAD:
        raise ValueError(
            f"{store}(offload=...) takes the size in bytes above which a value is stored once as a "
            f"blob (an int >= {MIN_OFFLOAD}, default {DEFAULT_OFFLOAD}), or None to keep every value "
            f"inline; got {value!r}"
        )
    return value


def content_name(data: bytes) -> str:
    """A clear store's name for a blob: the hex SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def check_own_refs(line: bytes, where: str) -> None:
    """Refuse an encoded entry holding an object with the key ``"sk.blob"`` (statekeep's
    mark of a reference), at any depth: it would read back as the value it names."""
    if b'"sk.blob' not in line:
        return
    if _has_ref_key(orjson.loads(line)):
        raise ValueError(
            f"{where} holds an object with the key {REF!r}, which is statekeep's mark of a value "
            "stored once as a blob (it would read back as another value); nothing was written. "
            "Rename the key"
        )


def _has_ref_key(value: Any) -> bool:
    if type(value) is dict:
        return REF in value or any(_has_ref_key(v) for v in value.values())
    if type(value) is list:
        return any(_has_ref_key(v) for v in value)
    return False


def offload(
    entry: dict[str, Any], bound: int, name_of: Callable[[bytes], str], blobs: dict[str, bytes]
) -> tuple[dict[str, Any], list[str]]:
    """``entry`` with each large value replaced by a reference (innermost first, see the
    module), and the names it refers to, in order; each new blob's encoding is put in
    ``blobs`` (NAME -> bytes; ``name_of`` names it). The entry's own keys stay."""
    names: list[str] = []
    out = {key: _offloaded(value, bound, name_of, blobs, names) for key, value in entry.items()}
    return out, names


def _offloaded(
    value: Any, bound: int, name_of: Callable[[bytes], str], blobs: dict[str, bytes], names: list[str]
) -> Any:
    kind = type(value)
    if kind is str:
        if len(value) * 3 + 2 <= bound:  # cannot exceed: skip encoding it
            return value
    elif kind is dict:
        data = orjson.dumps(value)
        if len(data) <= bound:
            return value
        value = {k: _offloaded(v, bound, name_of, blobs, names) for k, v in value.items()}
    elif kind is list:
        data = orjson.dumps(value)
        if len(data) <= bound:
            return value
        value = [_offloaded(v, bound, name_of, blobs, names) for v in value]
    else:
        return value
    data = orjson.dumps(value)
    if len(data) <= bound:
        return value
    name = name_of(data)
    blobs.setdefault(name, data)
    names.append(name)
    return {REF: name, "size": len(data)}


def refs_of(stored: Mapping[str, Any]) -> list[str]:
    """The blob names a stored entry lists (none for most)."""
    names = stored.get(REFS)
    return names if type(names) is list else []


def names_in(data: bytes) -> set[str]:
    """Every blob name listed in stored bytes (lines of entries, whole logs): what ``gc``
    keeps. Sealed lines list theirs in clear too."""
    found: set[str] = set()
    if b'"sk.blobs"' not in data:
        return found
    for match in _NAME.finditer(data):
        found.update(name.decode() for name in _HEX.findall(match.group(1)))
    return found


def wanted(entries: Iterable[Mapping[str, Any]]) -> set[str]:
    """The blob names stored entries list (to fetch them with the read)."""
    return {name for entry in entries if REFS in entry for name in refs_of(entry)}


def resolve(value: Any, load: Callable[[str], Any]) -> Any:
    """``value`` with every reference replaced by the value it names (``load`` gives a
    blob's value by name, itself resolved by this function's caller as needed)."""
    kind = type(value)
    if kind is dict:
        name = value.get(REF)
        if name is not None and len(value) <= 2:
            return resolve(load(name), load)
        return {k: resolve(v, load) for k, v in value.items()}
    if kind is list:
        return [resolve(v, load) for v in value]
    return value


def with_refs(line: bytes, names: list[str]) -> bytes:
    """An encoded (``\\n``-ended) stored line given its top-level list of blob names, put
    first: a sealed line still ends in its sealed field (what the stores' checks of whether
    a State is sealed look for, in Python, SQL and Lua)."""
    if not names:
        return line
    body = line.rstrip(b"\n")
    listed = b'{"' + REFS.encode() + b'":' + orjson.dumps(list(dict.fromkeys(names)))
    return listed + (b"}\n" if body == b"{}" else b"," + body[1:] + b"\n")
