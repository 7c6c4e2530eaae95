"""The run page's waterfall and token chart as pure functions (statekeep.web._timeline): a
history's entries in, rows and their geometry out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from statekeep.web import _timeline as tl

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def history(*steps: tuple[float, str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries at T0 + seconds, with dense seqs, after a task and a run start at T0."""
    out: list[dict[str, Any]] = [
        {"seq": 0, "kind": "task", "at": T0.isoformat(), "text": "t"},
        {"seq": 1, "kind": "run_start", "at": T0.isoformat(), "agent": {"name": "a"}},
    ]
    for seconds, kind, keys in steps:
        at = (T0 + timedelta(seconds=seconds)).isoformat()
        out.append({"seq": len(out), "kind": kind, "at": at, **keys})
    return out


def call(call_id: str, name: str = "search") -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": {}}


def result(call_id: str, name: str = "search", **keys: Any) -> dict[str, Any]:
    return {"call_id": call_id, "name": name, "output": "ok", "is_error": False, "outcome": "done", **keys}


TURN = history(
    (1, "model_request", {"model": "m1"}),
    (
        3,
        "model_reply",
        {"tool_calls": [call("a"), call("b", "fetch")], "usage": {"input_tokens": 300, "output_tokens": 100}},
    ),
    (4, "tool_result", result("a")),
    (7, "tool_result", result("b", "fetch")),
    (7, "model_request", {"model": "m1"}),
    (8, "model_reply", {"text": "done", "usage": {"prompt_tokens": 100, "completion_tokens": 100}}),
    (8, "stop", {"by": "finish"}),
)


def test_a_row_per_call_in_order_of_start_with_widths_proportional_to_durations() -> None:
    chart = tl.timeline(TURN)
    assert chart is not None
    rows = chart.rows
    assert [(r.kind, r.name, r.call_id) for r in rows] == [
        ("model", "m1", ""),
        ("tool", "search", "a"),
        ("tool", "fetch", "b"),
        ("model", "m1", ""),
    ]
    assert [(r.start, r.end) for r in rows] == [(1, 3), (3, 4), (4, 7), (7, 8)]  # calls run one after another
    assert [r.state for r in rows] == ["done"] * 4 and not any(r.open for r in rows)
    scale = tl.AXIS / 7  # the axis: from the first call's start (+1 s) to the last entry (+8 s)
    assert [r.width for r in rows] == pytest.approx([2 * scale, 1 * scale, 3 * scale, 1 * scale])
    assert [r.x for r in rows] == pytest.approx([tl.LABEL + s * scale for s in (0, 2, 3, 6)])
    assert rows[-1].x + rows[-1].width == pytest.approx(tl.LABEL + tl.AXIS)  # the axis ends at the last bar
    assert [r.y for r in rows] == sorted(r.y for r in rows) and len({r.y for r in rows}) == 4  # a row each
    assert [t.label for t in chart.ticks] == ["+1.0 s", "+2.8 s", "+4.5 s", "+6.2 s", "+8.0 s"]
    assert rows[2].duration == "3.0 s"
    assert rows[2].title == "tool fetch (call b); from +4.0 s, took 3.0 s; done"
    assert chart.summary == "2 model requests and 2 tool calls."


def test_each_model_call_with_a_usage_gets_a_token_bar_proportional_to_its_total() -> None:
    chart = tl.timeline(TURN)
    assert chart is not None
    first, second = chart.tokens
    assert (first.number, second.number) == (1, 2)
    assert first.row.usage == tl.Usage(300, 100, 400) and second.row.usage == tl.Usage(100, 100, 200)
    assert [s.part for s in first.segments] == ["in", "out"]
    assert [s.width for s in first.segments] == pytest.approx([tl.PLOT * 3 / 4, tl.PLOT / 4])
    assert sum(s.width for s in second.segments) == pytest.approx(tl.PLOT / 2)  # half the total: half as long
    assert second.segments[1].x == pytest.approx(second.segments[0].x + second.segments[0].width)
    assert first.title == "model call 1 (m1, seq 2): 300 in · 100 out · 400 total"
    assert "tokens: 300 in · 100 out · 400 total" in chart.rows[0].title


def test_no_usage_draws_no_token_bars_and_a_total_alone_draws_one_segment() -> None:
    plain = history((0, "model_request", {"model": "m"}), (1, "model_reply", {"text": "hi"}))
    chart = tl.timeline(plain)
    assert chart is not None and chart.tokens == [] and chart.rows[0].usage is None
    totals = history(
        (0, "model_request", {"model": "m"}), (1, "model_reply", {"usage": {"total_tokens": 50}})
    )
    chart = tl.timeline(totals)
    assert chart is not None
    assert [s.part for s in chart.tokens[0].segments] == ["total"]
    assert tl.usage_of({"cache": 3}) is None and tl.usage_of("12 tokens") is None


def test_a_call_in_doubt_is_open_ended_and_marked() -> None:
    entries = history(
        (0, "model_request", {"model": "m"}),
        (1, "model_reply", {"tool_calls": [call("r", "refund")]}),
        (31, "tool_result", result("r", "refund", output=None, outcome="unknown")),
    )
    chart = tl.timeline(entries)
    assert chart is not None
    refund = chart.rows[1]
    assert (refund.start, refund.end, refund.state, refund.open) == (1, 31, "unknown", True)
    assert refund.duration == "in doubt"
    assert "in doubt: it may or may not have run" in refund.title
    assert chart.summary.endswith("1 open-ended (no end known).")


def test_a_call_with_no_result_goes_past_the_end_of_the_axis() -> None:
    entries = history(
        (0, "model_request", {"model": "m"}),
        (2, "model_reply", {"tool_calls": [call("x"), call("y")]}),
        (5, "tool_result", result("x")),
        (10, "data", {"key": "k", "value": 1}),
    )
    chart = tl.timeline(entries, running=True)
    assert chart is not None
    assert [(r.call_id, r.start, r.end, r.state) for r in chart.rows] == [
        ("", 0, 2, "done"),
        ("x", 2, 5, "done"),
        ("y", 5, None, "waiting"),  # the next call runs: open (the one after it has not started)
    ]
    waiting = chart.rows[2]
    assert waiting.open and waiting.x == pytest.approx(tl.LABEL + tl.AXIS / 2)  # from +5 s of 10
    assert waiting.x + waiting.width == pytest.approx(tl.LABEL + tl.AXIS + tl.STUB)  # past the last entry
    assert waiting.duration == "no end yet"
    assert "still running, or in doubt if its worker stopped" in waiting.title
    stopped = tl.timeline(entries)  # a run that is not running: the call is in doubt
    assert stopped is not None
    assert (stopped.rows[2].state, stopped.rows[2].end, stopped.rows[2].duration) == (
        "unknown",
        None,
        "in doubt",
    )
    assert stopped.rows[2].width == pytest.approx(waiting.width)


def test_a_request_with_no_reply_is_open() -> None:
    entries = history((0, "model_request", {"model": "m"}), (4, "data", {"key": "k", "value": 1}))
    running = tl.timeline(entries, running=True)
    assert running is not None and (running.rows[0].state, running.rows[0].end) == ("waiting", None)
    assert running.rows[0].width == pytest.approx(tl.AXIS + tl.STUB)
    stopped = tl.timeline(entries)
    assert (
        stopped is not None and stopped.rows[0].state == "noreply" and stopped.rows[0].duration == "in doubt"
    )


def test_approvals_waiting_approved_and_rejected() -> None:
    asked = [
        (0, "model_request", {"model": "m"}),
        (1, "model_reply", {"tool_calls": [call("p", "pay"), call("q", "wire")]}),
        (2, "approval_wait", {"call_ids": ["p", "q"]}),
        (2, "stop", {"by": "approval"}),
    ]
    chart = tl.timeline(history(*asked))
    assert chart is not None
    assert [(r.call_id, r.start, r.state, r.duration) for r in chart.rows[1:]] == [
        ("p", 2, "approval", "awaiting approval"),
        ("q", 2, "approval", "awaiting approval"),
    ]
    decided = [
        *asked,
        (60, "approval", {"call_id": "p", "approved": True}),
        (61, "approval", {"call_id": "q", "approved": False}),
        (70, "run_start", {"agent": {"name": "a"}}),
        (70, "tool_result", result("q", "wire", is_error=True, outcome="error")),
        (71, "tool_resume", {"call_id": "p", "name": "pay", "by": "approved"}),
        (75, "tool_result", result("p", "pay")),
    ]
    chart = tl.timeline(history(*decided))
    assert chart is not None
    pay, wire = (next(r for r in chart.rows if r.call_id == c) for c in ("p", "q"))
    assert (pay.start, pay.end, pay.state) == (71, 75, "done")  # from its resume: it ran after the approval
    assert "run again (approved)" in pay.title
    assert (wire.start, wire.end, wire.state) == (61, 70, "rejected")
    assert [r.call_id for r in chart.rows] == ["", "q", "p"]  # by start


def test_a_long_run_draws_its_last_rows_and_says_so() -> None:
    turns = []
    for i in range(70):
        turns += [(2 * i, "model_request", {"model": f"m{i}"}), (2 * i + 1, "model_reply", {"text": "x"})]
    chart = tl.timeline(history(*turns))
    assert chart is not None
    assert len(chart.rows) == tl.MAX_ROWS and chart.hidden == 70 - tl.MAX_ROWS
    assert chart.rows[0].name == "m10" and chart.rows[-1].name == "m69"
    assert chart.rows[0].x == pytest.approx(tl.LABEL)  # the axis starts at the first row drawn
    assert chart.ticks[0].label == "+20.0 s"  # ... and still counts from the run's start
    assert "(the last 60 calls; 10 earlier not drawn)" in chart.summary
    assert chart.height == tl.TOP + tl.MAX_ROWS * tl.ROW + 4


def test_entries_without_a_time_and_histories_without_calls() -> None:
    assert tl.timeline(history((1, "user", {"text": "hi"}))) is None
    entries = history((0, "model_request", {"model": "m"}), (1, "model_reply", {}))
    entries[2]["at"] = "yesterday"
    assert tl.timeline(entries) is None  # the request has no time: no bar
    assert tl.timeline([]) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.00025, "0.25 ms"), (0.35, "350 ms"), (1.25, "1.2 s"), (123, "2 min 3 s"), (3720, "1 h 2 min")],
)
def test_span(seconds: float, text: str) -> None:
    assert tl.span(seconds) == text


def test_a_state_alpineagents_wrote_is_read_as_its_adapter_shows_it() -> None:
    snapshot = {"labels": {"framework": "alpineagents"}, "alpineagents": {}}
    at = [(T0 + timedelta(seconds=s)).isoformat() for s in range(4)]
    reply = {
        "message": {"content": [{"type": "tool_call", "id": "t1", "name": "lookup", "args": {}}]},
        "usage": {"input_tokens": 70, "output_tokens": 7},
    }
    entries = [
        {"seq": 0, "kind": "user", "at": at[0], "content": "hi"},
        {"seq": 1, "kind": "model_request", "at": at[0], "content": "alpine-model"},
        {"seq": 2, "kind": "model_reply", "at": at[1], "content": reply},
        {
            "seq": 3,
            "kind": "tool_result",
            "at": at[3],
            "content": "found",
            "outcome": "done",
            "call": {"id": "t1", "name": "lookup"},
        },
    ]
    chart = tl.timeline(entries, snapshot)
    assert chart is not None
    assert [(r.kind, r.name, r.start, r.end, r.state) for r in chart.rows] == [
        ("model", "alpine-model", 0, 1, "done"),
        ("tool", "lookup", 1, 3, "done"),
    ]
    assert chart.tokens[0].row.usage == tl.Usage(70, 7, 77)
    plain = tl.timeline(entries)  # without the snapshot that says who wrote it: its usage is not found
    assert plain is not None and plain.tokens == []


def test_a_restart_leaves_the_request_it_cut_off_open_and_a_reconciled_call_open() -> None:
    entries = history(
        (0, "model_request", {"model": "m"}),
        (9, "run_start", {"agent": {"name": "a"}}),  # the worker died waiting for the model
        (10, "model_request", {"model": "m"}),
        (11, "model_reply", {"tool_calls": [call("s", "send")]}),
        (20, "run_start", {"agent": {"name": "a"}}),  # ... and again during the call
        (21, "tool_result", result("s", "send", reconciled=True)),
    )
    chart = tl.timeline(entries)
    assert chart is not None
    cut, answered, sent = chart.rows
    assert (cut.start, cut.end, cut.state, cut.open, cut.duration) == (0, 9, "noreply", True, "in doubt")
    assert (answered.start, answered.end, answered.state, answered.open) == (10, 11, "done", False)
    assert (sent.start, sent.end, sent.state, sent.open, sent.duration) == (
        11,
        21,
        "reconciled",
        True,
        "reconciled",
    )
    assert "found after a restart" in sent.title


def test_a_trimmed_history_counts_from_its_tasks_time() -> None:
    start = (T0 - timedelta(hours=1)).isoformat()
    base = {"seq": 40, "kind": "base", "at": T0.isoformat(), "task": {"text": "t", "at": start}}
    entries = [
        base,
        {"seq": 41, "kind": "model_request", "at": (T0 + timedelta(seconds=1)).isoformat(), "model": "m"},
        {"seq": 42, "kind": "model_reply", "at": (T0 + timedelta(seconds=3)).isoformat()},
    ]
    chart = tl.timeline(entries)
    assert chart is not None
    assert (chart.rows[0].start, chart.rows[0].end) == (3601, 3603)
    assert chart.ticks[0].label == "+1 h 0 min"
