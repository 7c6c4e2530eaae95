"""The rules for labels, namespaces and expiry times, shared by the State and every store (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from .records import utc_time

LABEL_RULE = (
    "a label key is 1 to 63 characters from A-Z, a-z, 0-9, '_', '-', '.' and '/', starting with a "
    "letter or digit; a value is at most 256 characters, without NUL"
)
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,62}")
MAX_LABELS = 64

NAMESPACE_RULE = "1 to 63 characters from a-z, 0-9, '_' and '-', starting with a letter or digit"
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT_NAMESPACE = "default"


def check_labels(labels: object, what: str = "labels") -> dict[str, str]:
    """``labels`` as a plain ``dict[str, str]``; ValueError (TypeError for a non-dict) naming
    the first bad key or value."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise TypeError(f"{what} must be a dict of str to str, got {type(labels).__name__}")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{what} has {len(labels)} labels; at most {MAX_LABELS} are allowed")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if type(key) is not str or _KEY.fullmatch(key) is None:
            raise ValueError(f"{what} has an invalid key {key!r}: {LABEL_RULE}")
        if type(value) is not str or len(value) > 256 or "\x00" in value:
            raise ValueError(f"{what}[{key!r}] is an invalid value {value!r}: {LABEL_RULE}")
        out[key] = value
    return out


def validate_namespace(name: object, *, internal: bool = False) -> str:
    """Return ``name`` if it is a namespace name, else raise ValueError (TypeError for a non-str).

    ``internal`` also admits the names statekeep derives for agent memory (see
    :func:`memory_namespace`), which a user's name can never equal.
    """
    if type(name) is not str:
        raise TypeError(f"a namespace must be a str, got {type(name).__name__}")
    parts = name.split(".") if internal else [name]
    if not 1 <= len(parts) <= 3 or any(_NAMESPACE.fullmatch(p) is None for p in parts):
        raise ValueError(f"invalid namespace {name!r}: a namespace is {NAMESPACE_RULE}")
    return name


def memory_namespace(namespace: str, scope: str) -> str:
    """The internal namespace holding agent memory ``scope`` of ``namespace``."""
    validate_namespace(scope)
    return f"{namespace}.memory.{scope}"


def is_memory_namespace(namespace: str) -> bool:
    """Is ``namespace`` one that :func:`memory_namespace` makes (a user's name never is)?"""
    parts = namespace.split(".")
    return len(parts) == 3 and parts[1] == "memory"


def aware_time(when: object, what: str) -> datetime:
    """``when`` (an aware datetime or an ISO 8601 str with an offset) as a UTC datetime."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            raise ValueError(f"{what} must be an aware datetime or ISO 8601 time, got {when!r}") from None
    if not isinstance(when, datetime):
        raise TypeError(f"{what} must be an aware datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"{what} must be an aware datetime (with a time zone), got {when!r}; use e.g. datetime.now(UTC)"
        )
    return when.astimezone(UTC)


def check_period(period: object, what: str) -> timedelta:
    """A positive :class:`timedelta` (seconds as a number are accepted too)."""
    if isinstance(period, bool) or not isinstance(period, timedelta | int | float):
        raise TypeError(f"{what} must be a timedelta, got {type(period).__name__}")
    delta = period if isinstance(period, timedelta) else timedelta(seconds=period)
    if delta <= timedelta(0):
        raise ValueError(f"{what} must be positive, got {period!r}")
    return delta


def iso(when: datetime) -> str:
    """A UTC time as fixed-width ISO 8601 text, which sorts as time."""
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def expired_at(snapshot: Mapping[str, Any] | None, now: datetime) -> bool:
    """Whether a snapshot's ``expires_at`` is at or before ``now``; a missing or unreadable
    one never expires."""
    if not snapshot:
        return False
    raw = snapshot.get("expires_at")
    if type(raw) is not str:
        return False
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return False
    if when.tzinfo is None:
        return False
    return when <= now


_EXPIRES_KEY = b'"expires_at"'


def expiry_of(snapshot: Any) -> datetime | None:
    """A decoded snapshot's ``expires_at``; None if it has none (or one no reader takes:
    such a State never expires, as listings and reads judge it)."""
    raw = snapshot.get("expires_at") if isinstance(snapshot, dict) else None
    if type(raw) is not str:
        return None
    try:
        return utc_time(raw)
    except ValueError:
        return None


def encoded_expiry(encoded: bytes | None) -> datetime | None:
    """:func:`expiry_of` an encoded snapshot, decoded only if it may hold an expiry."""
    if encoded is None or _EXPIRES_KEY not in encoded:
        return None
    return expiry_of(orjson.loads(encoded))
