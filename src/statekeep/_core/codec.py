"""The JSON codec (orjson) with the checks orjson does not make.

orjson writes NaN and infinities as ``null`` without a word, and its own errors do not
say where the bad value sits. :func:`encode` walks the value first and raises TypeError
naming the path of the first value JSON cannot hold faithfully, before anything is
written anywhere.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

# orjson's limits: integers must fit in 64 bits (signed or unsigned), nesting is capped.
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_isfinite = math.isfinite
MAX_DEPTH = 254


#: Where a value sits, for error messages: a name (``entries[2]``), or (where its parent
#: sits, its key or index), spelled only when an error needs it.
Where = str | tuple[Any, str | int]


def encode(value: dict[str, Any], path: Where) -> bytes:
    """Encode a JSON object to compact UTF-8 bytes (no trailing newline).

    ``path`` names the value in error messages, e.g. ``entries[2]``.
    Raises TypeError naming the path of a value JSON cannot round-trip: non-finite
    floats, ints beyond 64 bits, non-str keys, lone surrogates, sets, bytes and any
    object that is not a dict, list, tuple, str, int, float, bool or None.
    """
    if not isinstance(value, dict):
        raise TypeError(f"{_name(path)} must be a dict (a JSON object), got {type(value).__name__}")
    _check(value, path, 0)
    return orjson.dumps(value)


def check(value: object, path: str, depth: int = 0) -> None:
    """Raise TypeError naming the path of the first value in ``value`` that JSON cannot
    round-trip (as :func:`encode` does). ``depth`` is how deep ``value`` sits in the
    object that will be encoded, so the nesting limit counts from there."""
    _check(value, path, depth)


def decode(data: bytes | str) -> Any:
    """Decode JSON bytes; raises orjson.JSONDecodeError (a ValueError) when invalid."""
    return orjson.loads(data)


def _name(path: Where) -> str:
    if isinstance(path, str):
        return path
    parent, key = path
    return f"{_name(parent)}[{key!r}]"


def _check(value: object, path: Where, depth: int) -> None:
    # Walks containers iteratively per level; recursion depth is bounded by MAX_DEPTH.
    # The usual items (str, int, float, None, bool) are checked in the loop itself; the
    # path of a nested one is a tuple, spelled only for an error.
    if depth >= MAX_DEPTH and isinstance(value, (dict, list, tuple)):
        raise TypeError(f"{_name(path)} is nested more than {MAX_DEPTH} levels deep (or refers to itself)")
    if isinstance(value, dict):
        items: Any = value.items()
        keyed = True
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
        keyed = False
    else:
        _check_scalar(value, path)
        return
    for key, item in items:
        if keyed:
            if not isinstance(key, str):
                raise TypeError(
                    f"{_name(path)} has a key {key!r} of type {type(key).__name__}: JSON keys must be str"
                )
            if not key.isascii():
                _check_str(key, f"{_name(path)} key {key!r}")
        if item is None or item is True or item is False:
            continue
        t = type(item)
        if t is str:
            if not item.isascii():
                _check_str(item, (path, key))
        elif t is int:
            if not _INT_MIN <= item <= _INT_MAX:
                raise TypeError(f"{_name((path, key))} = {item} does not fit in 64 bits")
        elif t is float:
            if not _isfinite(item):
                raise TypeError(f"{_name((path, key))} is {item!r}: JSON has no NaN or infinity")
        else:
            _check(item, (path, key), depth + 1)


def _check_scalar(value: object, path: Where) -> None:
    if isinstance(value, str):
        if not value.isascii():
            _check_str(value, path)
    elif value is None or isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise TypeError(f"{_name(path)} = {value} does not fit in 64 bits")
    elif isinstance(value, float):
        if not _isfinite(value):
            raise TypeError(f"{_name(path)} is {value!r}: JSON has no NaN or infinity")
    else:
        raise TypeError(
            f"{_name(path)} is a {type(value).__name__}, which JSON cannot hold; "
            "convert it to a dict, list, str, int, float, bool or None"
        )


def _check_str(value: str, path: Where) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError(
            f"{_name(path)} holds a lone surrogate, which is not valid UTF-8; "
            "decode bytes with errors='replace' instead of 'surrogateescape'"
        ) from None
