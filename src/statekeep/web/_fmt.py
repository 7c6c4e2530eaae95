"""Formatting helpers for the viewer's pages: relative times, gaps, token sums, pretty JSON.

Every function takes what a store holds, which may be anything a writer gave (a damaged or
hand-written entry), and returns plain text: the templates escape it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .._core.ids import validate_id
from .._run.readers import reader

# Usage keys of the common model APIs, summed as input / output / total.
_INPUT_KEYS = ("input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens")
_TOTAL_KEYS = ("total_tokens",)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime, or None if ``value`` is not one (nor one
    that UTC can hold: "0001-01-01T00:00:00+14:00" is in year 0 there)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def relative(when: datetime | None, now: datetime | None = None) -> str:
    """``when`` as "just now", "3 min ago", "2 h ago", "5 d ago" (or "in 2 min" ahead of ``now``)."""
    if when is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - when).total_seconds()
    ahead, seconds = seconds < 0, abs(seconds)
    if seconds < 10:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            return f"in {amount}" if ahead else f"{amount} ago"
    return "just now"  # pragma: no cover  (seconds >= 10 always meets a unit)


def exact(when: datetime | None) -> str:
    """``when`` to the second in UTC, as a relative time's hover text: "2026-12-02 04:47:48 UTC"."""
    return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def gap(previous: Any, current: Any) -> str:
    """The time between two entries' ``at``: "+350 ms", "+1.2 s", "+2 min 3 s", "+1 h 2 min";
    empty when either is not a time."""
    start, end = parse_time(previous), parse_time(current)
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    if seconds < 1:
        ms = round(seconds * 1000)
        return f"{sign}{ms} ms" if ms else f"{sign}<1 ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{sign}{whole // 60} min {whole % 60} s"
    return f"{sign}{whole // 3600} h {whole % 3600 // 60} min"


def _count(usage: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if type(value) is int:
            return value
    return None


class Tokens:
    """Token usage summed over model replies' ``usage`` (OpenAI or Anthropic key names), of
    the State whose snapshot is ``snapshot`` (an adapter's State: where its adapter keeps it)."""

    def __init__(self, snapshot: object = None) -> None:
        self.input = self.output = self.total = 0
        self._show = reader(snapshot)

    def add(self, entry: dict[str, Any]) -> None:
        entry = self._show(entry).entry
        usage = entry.get("usage") if entry.get("kind") == "model_reply" else None
        if not isinstance(usage, Mapping):
            return
        given_in, given_out = _count(usage, _INPUT_KEYS) or 0, _count(usage, _OUTPUT_KEYS) or 0
        given_total = _count(usage, _TOTAL_KEYS)
        self.input += given_in
        self.output += given_out
        self.total += given_in + given_out if given_total is None else given_total

    def text(self) -> str:
        """Like "1,234 in · 567 out · 1,801 total"."""
        return f"{self.input:,} in · {self.output:,} out · {self.total:,} total"


def token_sum(entries: Iterable[dict[str, Any]], snapshot: object = None) -> Tokens:
    tokens = Tokens(snapshot)
    for entry in entries:
        tokens.add(entry)
    return tokens


def pretty(value: Any) -> str:
    """A JSON value indented for reading; a string stays as it is (tool output is often text)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def text(value: Any) -> str:
    """A stored field shown as text: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def css_word(value: Any) -> str:
    """``value`` made safe as part of a CSS class name: lower case letters, digits, - and _."""
    word = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in str(value).lower())
    return word[:40] or "none"


def is_id(value: Any) -> bool:
    """Whether ``value`` is a valid State id: only those become links (a damaged or
    hand-written snapshot could hold ``javascript:`` or ``//host`` as a parent)."""
    try:
        validate_id(value)
    except (TypeError, ValueError):
        return False
    return True
