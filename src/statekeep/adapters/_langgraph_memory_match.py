"""What a LangGraph store search matches: filters with LangGraph's operators, namespace
conditions, and the vectors of semantic search (kept as float32, scored by cosine)."""

from __future__ import annotations

import base64
import math
import operator
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import MatchCondition, get_text_at_path, tokenize_path

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """ValueError naming an operator LangGraph does not have, or a plain key beside an
    operator (``{"$gt": 0, "x": 1}``: LangGraph's ``InMemoryStore`` refuses it too), with
    nothing read or written."""
    for field, value in (filter or {}).items():
        if isinstance(value, Mapping):
            named = [k for k in value if isinstance(k, str) and k.startswith("$")]
            plain = [k for k in value if not (isinstance(k, str) and k.startswith("$"))]
            if named and plain:
                raise ValueError(
                    f"unsupported operator {plain[0]!r} in the filter of {field!r}: a dict with an "
                    f"operator ({named[0]!r}) holds only operators; to match a nested field, give "
                    "it a dict of its own"
                )
            for key, inner in value.items():
                if isinstance(key, str) and key.startswith("$") and key not in _OPERATORS:
                    raise ValueError(
                        f"unsupported filter operator {key!r}: use one of {', '.join(_OPERATORS)} "
                        "or a plain value (equality)"
                    )
                if not (isinstance(key, str) and key.startswith("$")):
                    check_filter({key: inner})


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes ``filter`` as LangGraph's ``InMemoryStore`` judges it,
    except that a range operator on a missing or non-numeric field is no match (not a
    TypeError)."""
    return all(_compare(value.get(key), wanted) for key, wanted in (filter or {}).items())


def _compare(have: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_apply(have, op, operand) for op, operand in wanted.items())
        if not isinstance(have, Mapping):
            return False
        return all(_compare(have.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(wanted)
            and all(_compare(h, w) for h, w in zip(have, wanted, strict=False))
        )
    return bool(have == wanted)


_RANGES = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _apply(have: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(have == operand)
    if op == "$ne":
        return bool(have != operand)
    try:
        return bool(_RANGES[op](float(have), float(operand)))
    except (TypeError, ValueError):
        return False


def namespace_matches(conditions: Iterable[MatchCondition], namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` meets every prefix/suffix condition (``"*"`` matches any label)."""
    for condition in conditions:
        path = tuple(condition.path)
        if len(namespace) < len(path):
            return False
        if condition.match_type == "prefix":
            pairs = zip(namespace, path, strict=False)
        elif condition.match_type == "suffix":
            pairs = zip(reversed(namespace), reversed(path), strict=False)
        else:
            raise ValueError(
                f"unsupported namespace match type {condition.match_type!r}: use prefix or suffix"
            )
        if any(want != "*" and have != want for have, want in pairs):
            return False
    return True


def fixed_prefix(conditions: Iterable[MatchCondition]) -> tuple[str, ...]:
    """The labels every matching namespace starts with: a prefix condition's up to its first ``*``."""
    for condition in conditions:
        if condition.match_type == "prefix":
            path = tuple(condition.path)
            return path[: path.index("*")] if "*" in path else path
    return ()


def texts_of(value: Mapping[str, Any], fields: Sequence[str]) -> list[tuple[str, str]]:
    """``(path, text)`` to embed for ``value``, named as LangGraph's ``InMemoryStore`` names
    them (a field with several texts: ``"field.0"``, ``"field.1"``...)."""
    out: list[tuple[str, str]] = []
    for path in fields:
        texts = get_text_at_path(value, path if path == "$" else tokenize_path(path))
        if len(texts) == 1:
            out.append((path, texts[0]))
        else:
            out.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
    return out


def pack(vector: Sequence[float]) -> str:
    """A vector as stored: float32, little-endian, base64 (about 5.3 bytes a dimension)."""
    packed = array("f", vector)
    if packed.itemsize != 4:  # pragma: no cover - every platform Python runs on
        raise RuntimeError("this platform's float is not 32 bits")
    return base64.b64encode(packed.tobytes()).decode()


def unpack(text: str) -> array[float]:
    vector = array("f")
    vector.frombytes(base64.b64decode(text))
    return vector


def norm(vector: Sequence[float]) -> float:
    return math.sqrt(sum(map(operator.mul, vector, vector)))


def cosine(
    query: Sequence[float], query_norm: float, vector: Sequence[float], vector_norm: float | None
) -> float:
    """The cosine similarity of ``query`` and ``vector``, their norms given (the vector's is
    stored with it; None: computed), 0.0 if either is zero."""
    if vector_norm is None:
        vector_norm = norm(vector)
    if vector_norm == 0 or query_norm == 0:
        return 0.0
    return float(sum(map(operator.mul, query, vector))) / (vector_norm * query_norm)
