"""A model reply's token usage, and its bar in the run page's token chart (see
:mod:`statekeep.web._timeline`, which lays the bars out).

A reply's ``usage`` is whatever its writer gave: a count that is not an int is not read, and
one below zero draws nothing (its text still says it). A bar's length is its reply's size:
its total, or its input plus output when those say more (a writer's total that leaves some
out); the longest bar of a chart fills the plot, so no bar goes past it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """A model reply's token counts (None: the reply did not say)."""

    input: int | None
    output: int | None
    total: int | None

    def text(self) -> str:
        """Like "1,000 in · 500 out · 1,500 total" (the counts the reply gave)."""
        counts = ((self.input, "in"), (self.output, "out"), (self.total, "total"))
        return " · ".join(f"{n:,} {word}" for n, word in counts if n is not None)

    @property
    def size(self) -> int:
        """How long its bar is, in tokens: the total, or input plus output if more."""
        return max(_drawn(self.total), _drawn(self.input) + _drawn(self.output))


@dataclass
class Segment:
    """One part of a token bar: ``part`` "in", "out" or "total" (a reply that gave only a total)."""

    part: str
    x: float
    width: float


def _drawn(count: object) -> int:
    """A count as its bar draws it: one that is not an int, or below zero, draws nothing."""
    return count if type(count) is int and count > 0 else 0


def usage_of(value: object) -> Usage | None:
    """A reply's ``usage`` (OpenAI or Anthropic key names); None when it holds no count."""
    if not isinstance(value, Mapping):
        return None

    def count(*keys: str) -> int | None:
        for key in keys:
            if type(value.get(key)) is int:
                return int(value[key])
        return None

    got = Usage(
        count("input_tokens", "prompt_tokens"),
        count("output_tokens", "completion_tokens"),
        count("total_tokens"),
    )
    if got.input is None and got.output is None and got.total is None:
        return None
    if got.total is None:
        got = Usage(got.input, got.output, (got.input or 0) + (got.output or 0))
    return got


def longest(usages: Iterable[Usage]) -> int:
    """The size of the longest bar (0: none draws anything)."""
    return max((u.size for u in usages), default=0)


def segments(usage: Usage, left: float, scale: float) -> list[Segment]:
    """The parts of ``usage``'s bar from ``left``, ``scale`` user units a token: input then
    output (a reply that gave only a total draws that); none narrower than nothing."""
    parts = [("in", _drawn(usage.input)), ("out", _drawn(usage.output))]
    if usage.input is None and usage.output is None:
        parts = [("total", _drawn(usage.total))]
    x, out = left, []
    for part, count in parts:
        if count:
            out.append(Segment(part, x, count * scale))
            x += count * scale
    return out
