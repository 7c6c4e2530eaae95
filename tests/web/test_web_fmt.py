"""The viewer's formatting: relative times, gaps between entries, token sums, CSS words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from statekeep.web import _fmt as fmt

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "just now"),
        (9, "just now"),
        (42, "42 s ago"),
        (190, "3 min ago"),
        (7300, "2 h ago"),
        (3 * 86400, "3 d ago"),
        (-120, "in 2 min"),
    ],
)
def test_relative(seconds: float, shown: str) -> None:
    assert fmt.relative(T0 - timedelta(seconds=seconds), T0) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "+<1 ms"),
        (0.35, "+350 ms"),
        (1.24, "+1.2 s"),
        (123, "+2 min 3 s"),
        (3720, "+1 h 2 min"),
        (-2, "-2.0 s"),
    ],
)
def test_gap(seconds: float, shown: str) -> None:
    assert fmt.gap(T0.isoformat(), (T0 + timedelta(seconds=seconds)).isoformat()) == shown


def test_gap_of_what_is_not_a_time_is_empty() -> None:
    assert fmt.gap(None, T0.isoformat()) == fmt.gap(T0.isoformat(), 5) == fmt.gap("x", "y") == ""


def test_token_sum_reads_either_naming_and_skips_the_rest() -> None:
    entries = [
        {"kind": "model_reply", "usage": {"input_tokens": 1000, "output_tokens": 200}},
        {"kind": "model_reply", "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 40}},
        {"kind": "model_reply", "usage": {"tokens": 9}},  # a name it does not know: nothing
        {"kind": "model_reply", "usage": "lots"},
        {"kind": "model_reply"},
        {"kind": "user", "usage": {"input_tokens": 5}},  # only replies count
    ]
    assert fmt.token_sum(entries).text() == "1,030 in · 204 out · 1,240 total"


def test_pretty_and_css_word() -> None:
    assert fmt.pretty("text <b>") == "text <b>"
    assert fmt.pretty({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'
    assert fmt.css_word('limit" onclick="x') == "limit--onclick--x"
    assert fmt.css_word("") == "none"


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_time_utc_cannot_hold_is_not_a_time(value: str) -> None:
    assert fmt.parse_time(value) is None
    assert fmt.gap(value, T0.isoformat()) == fmt.gap(T0.isoformat(), value) == ""
