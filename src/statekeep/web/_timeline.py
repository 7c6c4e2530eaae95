"""A run's calls as a waterfall: one row per model request and per tool call, a bar from its
start to its end, on a time axis from the run's start; and each model call's token usage.

Pure: :func:`timeline` turns a history's entries into a :class:`Timeline` (rows with their
geometry, in the SVG's user units), which ``_timeline.html`` draws. Times come from the
entries' ``at``; an entry without a readable ``at`` draws nothing.

- A model row runs from its ``model_request`` to the ``model_reply`` (or ``model_error``)
  that closes it; one with no reply yet is open, and one a new request or run began after
  without a reply (its worker died) is open up to there.
- A tool row runs from when its call could start to its ``tool_result``. The agent runs a
  reply's calls one after the other, so a call starts at the latest of its reply, the result
  before it, and its own ``tool_resume`` (a call run again after a restart or an approval);
  a call a person rejected runs from the decision to its error result. Open-ended, drawn
  without a right edge and marked: a call whose result says its outcome is ``unknown`` (in
  doubt: it may or may not have run) or that its tool's ``reconcile`` found done after a
  restart (when it ended is not known), both drawn up to that result; and a call or request
  with no end yet (drawn past the last entry's
  time, :data:`STUB` further: still running, waiting for a person's approval, or in doubt once
  the run has stopped). The axis ends at the last entry: a run whose worker died an hour ago
  (still "running" in the store) keeps a readable chart.
- At most :data:`MAX_ROWS` rows: a longer run shows its last ones, and says how many are not
  shown; the axis then starts at the first shown row (its ticks still count from the run's
  start).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._run.readers import reader
from .._run.shown import framework_of
from . import _fmt as fmt
from ._tokens import Segment, Usage, longest, segments, usage_of

__all__ = ["Row", "Segment", "Timeline", "TokenBar", "Usage", "rows_of", "timeline", "token_bars", "usage_of"]

MAX_ROWS = 60  # rows drawn at most (the last ones)
WIDTH = 960  # the SVG's width in user units
LABEL = 230  # the label column's width
RIGHT = 110  # the duration column's width
ROW = 22  # one row's height
BAR = 14  # a bar's height
TOP = 26  # the axis labels' band, above the rows
MIN_BAR = 2.0  # a bar is at least this wide, so that an instant call still shows
TICKS = 5
PLOT = WIDTH - LABEL - RIGHT
STUB = 24  # how far past the axis's end a bar with no end goes
AXIS = PLOT - STUB  # the time axis's length

#: What each row's ``state`` says, for its tooltip and the legend.
STATES = {
    "done": "done",
    "error": "failed",
    "rejected": "rejected by a person",
    "unknown": "in doubt: it may or may not have run (its end is not known)",
    "waiting": "no reply or result yet: still running, or in doubt if its worker stopped",
    "approval": "waiting for a person's approval",
    "approved": "approved by a person, not run yet: it runs when the run goes on",
    "noreply": "no reply was saved: the request is in doubt",
    "reconciled": "done, as the tool's reconcile found after a restart (when it ended is not known)",
}


@dataclass(slots=True)
class Row:
    """One call: ``kind`` "model" or "tool", its ``name`` (the model, or the tool), where it
    starts and ends in seconds from the run's start (``end`` None: open-ended)."""

    kind: str
    name: str
    seq: int  # the entry that starts it (a request, or the reply holding the call)
    start: float
    end: float | None
    state: str
    call_id: str = ""
    usage: Usage | None = None
    notes: list[str] = field(default_factory=list)
    # Geometry, set by :func:`timeline`: the bar's left edge, width and top.
    x: float = 0.0
    width: float = 0.0
    y: float = 0.0

    @property
    def open(self) -> bool:
        return self.end is None or self.state in ("unknown", "noreply", "reconciled")

    @property
    def duration(self) -> str:
        """The duration column: how long it took, or why that is not known."""
        if self.state == "approval":
            return "awaiting approval"
        if self.state == "approved":
            return "approved, not run"
        if self.state == "rejected" and self.end is None:
            return "rejected"
        if self.state in ("unknown", "noreply"):
            return "in doubt"
        if self.state == "reconciled":
            return "reconciled"
        return "no end yet" if self.end is None else span(self.end - self.start)

    @property
    def title(self) -> str:
        """The bar's tooltip: what, when, how long, how it ended."""
        what = f"model request to {self.name}" if self.kind == "model" else f"tool {self.name}"
        if self.call_id:
            what += f" (call {self.call_id})"
        when = f"from +{span(self.start)}"
        took = "no end yet" if self.end is None else f"took {span(self.end - self.start)}"
        parts = [what, f"{when}, {took}", STATES[self.state], *self.notes]
        if self.usage is not None:
            parts.append(f"tokens: {self.usage.text()}")
        return "; ".join(parts)


@dataclass
class TokenBar:
    """One model call's token usage as a bar: its row, its number among the run's model calls
    drawn, and its segments."""

    row: Row
    number: int
    y: float
    segments: list[Segment]

    @property
    def title(self) -> str:
        assert self.row.usage is not None
        return f"model call {self.number} ({self.row.name}, seq {self.row.seq}): {self.row.usage.text()}"


@dataclass
class Tick:
    x: float
    label: str


@dataclass
class Timeline:
    """The waterfall of one run (see the module's docstring), ready to draw."""

    rows: list[Row]
    hidden: int  # earlier rows not drawn (past MAX_ROWS)
    ticks: list[Tick]
    height: float
    tokens: list[TokenBar]  # the drawn model calls that gave a usage, in order
    tokens_height: float

    @property
    def summary(self) -> str:
        """The chart's text alternative."""
        models = sum(r.kind == "model" for r in self.rows)
        tools = len(self.rows) - models
        open_ = sum(r.open for r in self.rows)
        text = f"{models} model request{'s' * (models != 1)} and {tools} tool call{'s' * (tools != 1)}"
        if self.hidden:
            text += f" (the last {len(self.rows)} calls; {self.hidden} earlier not drawn)"
        if open_:
            text += f"; {open_} open-ended (no end known)"
        return text + "."


def span(seconds: float) -> str:
    """A duration: "0.25 ms", "350 ms", "1.2 s", "2 min 3 s", "1 h 2 min"."""
    seconds = max(0.0, seconds)
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


@dataclass
class _Pending:
    name: str
    seq: int
    ready: datetime  # when its reply came
    started: datetime | None = None  # its tool_resume
    asked: datetime | None = None  # its approval_wait
    decided: datetime | None = None  # a person's approval or rejection
    approved: bool | None = None  # that decision (None: none, or not a bool)
    notes: list[str] = field(default_factory=list)


def rows_of(
    entries: Iterable[dict[str, Any]],
    snapshot: object = None,
    *,
    running: bool = False,
    before: int | None = None,
) -> list[Row]:
    """The calls of a history, in order of start (see the module's docstring): times in
    seconds from the first entry's ``at``. ``running``: the run is under way (a call without
    a result is still running rather than in doubt); it only changes the words. ``before``:
    only the calls that start before that seq (a page of earlier entries), each as the whole
    history tells it (a call whose result came after ``before`` is done, not in doubt)."""
    return _calls(entries, snapshot, running, before)[0]


def _calls(
    entries: Iterable[dict[str, Any]], snapshot: object, running: bool, before: int | None = None
) -> tuple[list[Row], float]:
    """:func:`rows_of`, and the latest time (seconds from the first entry's) of an entry
    before ``before``."""
    # An adapter's State is read as its adapter shows it; statekeep's own entries as they are.
    show = None if framework_of(snapshot) is None else reader(snapshot)
    origin: datetime | None = None
    latest = 0.0
    rows: list[Row] = []
    model: Row | None = None  # the request waiting for its reply
    pending: dict[str, _Pending] = {}
    cursor: datetime | None = None

    def secs(when: datetime) -> float:
        assert origin is not None
        return (when - origin).total_seconds()

    for raw in entries:
        entry = raw if show is None else show(raw).entry
        at = fmt.parse_time(entry.get("at"))
        if at is None:
            continue
        if origin is None:  # the run's start: a trimmed history's base keeps its task's time
            task = entry.get("task") if entry.get("kind") == "base" else None
            origin = (fmt.parse_time(task.get("at")) if isinstance(task, Mapping) else None) or at
        kind, seq = entry.get("kind"), entry.get("seq")
        seq = seq if type(seq) is int else -1
        if before is None or seq < before:
            latest = max(latest, secs(at))
        if kind in ("model_request", "run_start") and model is not None:  # it never got its reply
            model.end, model.state, model = secs(at), "noreply", None
        if kind == "model_request":
            model = Row("model", fmt.text(entry.get("model")), seq, secs(at), None, "waiting")
            rows.append(model)
        elif kind in ("model_reply", "model_error") and model is not None:
            model.end, model.state = secs(at), ("done" if kind == "model_reply" else "error")
            if kind == "model_reply":
                model.usage = usage_of(entry.get("usage"))
            model = None
        if kind == "model_reply":
            calls = entry.get("tool_calls")
            asked = entry.get("approval")  # its calls that wait for a person, said with the reply
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                    waits = isinstance(asked, list) and call["id"] in asked
                    pending[call["id"]] = _Pending(
                        fmt.text(call.get("name")), seq, at, asked=at if waits else None
                    )
            cursor = at
        elif kind == "tool_resume" and isinstance(p := pending.get(fmt.text(entry.get("call_id"))), _Pending):
            p.started = at
            p.notes.append(f"run again ({fmt.text(entry.get('by'))})")
            cursor = at
        elif kind == "approval_wait" and isinstance(entry.get("call_ids"), list):
            for call_id in entry["call_ids"]:
                if isinstance(p := pending.get(fmt.text(call_id)), _Pending):
                    p.asked = p.asked or at
        elif kind == "approval" and isinstance(p := pending.get(fmt.text(entry.get("call_id"))), _Pending):
            p.decided = at
            p.approved = entry["approved"] if isinstance(entry.get("approved"), bool) else None
            p.asked = p.asked or at
        elif kind == "tool_result":
            call_id = fmt.text(entry.get("call_id"))
            p = pending.pop(call_id, None) or _Pending(fmt.text(entry.get("name")), seq, cursor or at)
            start = p.started or max(p.ready, cursor or p.ready)
            state = "done"
            if entry.get("outcome") == "unknown":
                state = "unknown"
            elif entry.get("is_error") is True or entry.get("outcome") == "error":
                state = "error"
            if p.approved is True and p.started is None:  # approved, its resume not saved: ran then
                start = max(start, p.decided or start)
            elif p.asked is not None and p.started is None:  # asked a person, never run: rejected
                start, state = p.decided or at, "rejected"
            if entry.get("reconciled") is True and state == "done":
                state = "reconciled"
            rows.append(Row("tool", p.name, p.seq, secs(start), secs(at), state, call_id, notes=p.notes))
            cursor = at
    running_one = False  # a reply's calls run one at a time: only the first pending one runs
    for call_id, p in pending.items():
        if p.asked is not None and p.started is None:  # waits for a person, or for the run to go on
            state = "approval" if p.approved is None else "approved" if p.approved else "rejected"
            start = p.asked if p.decided is None else p.decided
            rows.append(Row("tool", p.name, p.seq, secs(start), None, state, call_id, notes=p.notes))
        elif not running_one:
            running_one = True
            start = p.started or max(p.ready, cursor or p.ready)
            state = "waiting" if running else "unknown"
            rows.append(Row("tool", p.name, p.seq, secs(start), None, state, call_id, notes=p.notes))
    if model is not None and not running:
        model.state = "noreply"
    if before is not None:
        rows = [r for r in rows if r.seq < before]
    rows.sort(key=lambda r: (r.start, r.seq, r.kind != "model"))
    return rows, latest


def timeline(
    entries: Iterable[dict[str, Any]],
    snapshot: object = None,
    *,
    running: bool = False,
    before: int | None = None,
) -> Timeline | None:
    """The waterfall of a history (see the module's docstring), or None when it holds no
    call. ``running``: the run is under way (only the words of an open call change).
    ``before``: a page of the entries before that seq draws the calls that start in it, as
    the whole history ``entries`` tells them (see :func:`rows_of`); its axis ends at its
    last entry, or at the end of a call drawn, if later."""
    rows, latest = _calls(entries, snapshot, running, before)
    if not rows:
        return None
    hidden = max(0, len(rows) - MAX_ROWS)
    rows = rows[hidden:]
    lo = rows[0].start
    hi = max([latest, *(r.end for r in rows if r.end is not None)])
    scale = AXIS / (hi - lo) if hi > lo else 0.0
    for i, row in enumerate(rows):
        row.x = LABEL + (row.start - lo) * scale
        if row.end is None:
            row.width = (hi - row.start) * scale + STUB
        else:
            row.width = max(MIN_BAR, (row.end - row.start) * scale)
        row.y = TOP + i * ROW + (ROW - BAR) / 2
    ticks = [
        Tick(LABEL + AXIS * i / (TICKS - 1), "+" + span(lo + (hi - lo) * i / (TICKS - 1)))
        for i in range(TICKS)
    ]
    if hi <= lo:
        ticks = ticks[:1]
    tokens = token_bars(rows)
    return Timeline(rows, hidden, ticks, TOP + len(rows) * ROW + 4, tokens, len(tokens) * ROW + 4)


def token_bars(rows: list[Row]) -> list[TokenBar]:
    """A bar per model call that gave its usage (see :mod:`statekeep.web._tokens`): the
    longest fills the plot."""
    models = [r for r in rows if r.kind == "model"]
    used = [(n, r, r.usage) for n, r in enumerate(models, 1) if r.usage is not None]
    most = longest(u for _, _, u in used)
    scale = PLOT / most if most else 0.0
    return [
        TokenBar(row, number, i * ROW + (ROW - BAR) / 2, segments(usage, LABEL, scale))
        for i, (number, row, usage) in enumerate(used)
    ]
