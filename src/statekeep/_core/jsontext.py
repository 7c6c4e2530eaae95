"""JSON text held in a string (a tool call's ``arguments``), read and written back for redaction.

Read so that writing it back loses nothing: an object is kept as its list of pairs
(duplicate keys and their order included), a number as the text it was written as.
"""

from __future__ import annotations

import json
import re
from typing import Any


class Pairs(list[tuple[str, Any]]):
    """A JSON object as its ``(key, value)`` pairs, in order, duplicates kept."""


class Number(str):
    """A JSON number as written (``1e400`` stays ``1e400``, never ``Infinity``)."""


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(
    object_pairs_hook=Pairs, parse_int=Number, parse_float=Number, parse_constant=_refuse
)


_START = re.compile(r"[ \t\r\n]*\{")


def looks_like_object(text: str) -> bool:
    """Cheap: does ``text`` start with ``{`` and end with ``}`` (white space around allowed)?
    Most strings fail at their first character, without a copy."""
    return _START.match(text) is not None and text.rstrip(" \t\r\n").endswith("}")


def read_object(text: str) -> Pairs | None:
    """The JSON object ``text`` holds, or None if it holds no JSON object."""
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, Pairs) else None


def write(value: Any) -> str:
    """JSON text of what :func:`read_object` gave (``", "`` and ``": "`` between items)."""
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {write(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(write(v) for v in value) + "]"
    if isinstance(value, Number):
        return str.__str__(value)
    return json.dumps(value, ensure_ascii=False)
