"""The text the ``statekeep`` command and the demo show: the listing, a State's timeline.

Everything here comes from stored data, so every line is returned with its control
characters escaped (:func:`safe`): stored text cannot move the cursor or fake a line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from .._core.records import Record, SavedState, run_status
from .._run.readers import reader

#: The store the command and the demo use when none is given: a folder in the working directory.
DEFAULT_STORE = ".statekeep"

# Characters a terminal acts on (C0, DEL, C1: cursor moves, screen clears, new lines) or
# that reorder text (bidirectional controls), and line separators: shown escaped.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def safe(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``),
    so that stored data cannot move the cursor, clear the screen or fake a line."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def listing(rows: Iterable[SavedState]) -> list[str]:
    """The table ``statekeep list`` prints: a header, then one line per State."""
    lines = [f"{'ID':<34} {'UPDATED (UTC)':<19} {'TURN':>4}  {'STATUS':<10} TASK"]
    for row in rows:
        when = row.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        lines.append(
            f"{row.id:<34} {when:<19} {row.turn:>4}  {short(row.status, 10):<10} {short(row.task, 60)}"
        )
    return [safe(line) for line in lines]


def row_json(row: SavedState) -> str:
    """One listing row as one line of JSON (``statekeep list --json``); non-ASCII and control
    characters escaped, times in ISO 8601 UTC."""
    return json.dumps(
        {
            "id": row.id,
            "task": row.task,
            "status": row.status,
            "agent": row.agent,
            "parent": row.parent,
            "labels": row.labels,
            "turn": row.turn,
            "finished": row.finished,
            "stopped_by": row.stopped_by,
            "created_at": row.created_at.isoformat(),
            "updated_at": row.updated_at.isoformat(),
            "expires_at": None if row.expires_at is None else row.expires_at.isoformat(),
            "forked_from": row.forked_from,
        },
        ensure_ascii=True,
    )


def summary(record: Record) -> str:
    """One line about a State (``statekeep delete`` shows it before asking)."""
    snap = record.snapshot or {}
    return f"{len(record.entries)} entries, turn {snap.get('turn', '?')}, task {str(snap.get('task', ''))!r}"


def timeline(state_id: str, record: Record) -> list[str]:
    """A readable history: a header, then one line per entry (:func:`entry_line`), long
    texts shortened, control characters escaped. Any entry the store accepts is shown,
    whatever its fields hold; a framework adapter's State, in its adapter's words."""
    return [*heading(state_id, record), *lines(record.entries, record.snapshot)]


def lines(entries: Iterable[dict[str, Any]], snapshot: object) -> list[str]:
    """The timeline lines of ``entries`` of the State whose snapshot is ``snapshot``
    (which says whether an adapter wrote them, and so how to read them)."""
    show = reader(snapshot)
    out = []
    for entry in entries:
        shown = show(entry)
        out.append(entry_line(shown.entry, shown.line))
    return out


def heading(state_id: str, record: Record) -> list[str]:
    """The lines above a timeline's entries: the task, the times, the turn and the status."""
    snap = record.snapshot if isinstance(record.snapshot, dict) else {}
    lines = [f"State {state_id}: {short(str(snap.get('task', '')), 100)}"]
    if snap:
        stopped_by = snap.get("stopped_by")
        status = run_status(bool(snap.get("finished")), str(stopped_by) if stopped_by else None)
        lines.append(
            f"created {_time(snap.get('created_at'))} · updated {_time(snap.get('updated_at'))} · "
            f"turn {short(str(snap.get('turn')), 20)} · {short(status, 40)}"
        )
    lines.append("")
    return [safe(line) for line in lines]


def entry_line(entry: dict[str, Any], said: str | None = None) -> str:
    """One timeline line: seq, clock time, kind and what the entry says (``said``, an
    adapter's summary of it, or else statekeep's own description), escaped."""
    kind = short(str(entry.get("kind", "?")), 30)
    seq = short(str(entry.get("seq", "?")), 20)
    text = _describe(entry) if said is None else short(said, 160)
    return safe(f"{seq:>5}  {_time(entry.get('at'), clock=True)}  {kind:<13} {text}")


def entry_json(entry: dict[str, Any]) -> str:
    """One history entry as one line of JSON, as stored (non-ASCII and control characters
    escaped): ``statekeep show --follow --json`` prints one per entry."""
    return json.dumps(entry, ensure_ascii=True)


def record_json(state_id: str, record: Record) -> str:
    """One State as one JSON document on one line, ``{"id", "snapshot", "entries"}``
    (``statekeep show --json``)."""
    return json.dumps(
        {"id": state_id, "snapshot": record.snapshot, "entries": record.entries}, ensure_ascii=True
    )


def _describe(e: dict[str, Any]) -> str:
    try:
        return _describe_kind(e)
    except Exception:  # a field of an unexpected type: show the entry as it is
        return _rest(e)


def _describe_kind(e: dict[str, Any]) -> str:
    kind = e.get("kind")
    if kind in ("task", "user"):
        return short(_text(e.get("text")))
    if kind == "run_start":
        agent = _dict(e.get("agent"))
        tools = ", ".join(_text(t) for t in _list(agent.get("tools"))) or "none"
        return short(f"agent {agent.get('name')!r} · model {_text(agent.get('model'))} · tools: {tools}", 120)
    if kind == "model_request":
        return short(f"asking {_text(e.get('model'))}")
    if kind == "model_reply":
        calls = [
            f"{_text(c.get('name'))}({_args(c.get('args'))}) [{_text(c.get('id'))}]"
            for c in map(_dict, _list(e.get("tool_calls")))
        ]
        text = short(_text(e.get("text")), 60) if e.get("text") else ""
        parts = (f'"{text}"' if text else "", short(", ".join(calls), 120))
        return " → ".join(p for p in parts if p) or "(empty)"
    if kind == "tool_result":
        head = f"{_text(e.get('name'))} [{_text(e.get('call_id'))}] {_text(e.get('outcome'))}"
        return f"{short(head, 60)}: {short(_text(e.get('output')), 70)}"
    if kind in ("model_error", "error"):
        return short(_text(e.get("message")))
    if kind == "stop":
        answer = e.get("answer")
        by = short(f"by {_text(e.get('by'))}", 40)
        return by + (f": {short(_text(answer), 70)}" if answer is not None else "")
    if kind == "base":  # a trimmed history's first entry (store.trim)
        task = short(_text(_dict(e.get("task")).get("text")), 70)
        return f"trimmed: stands for seqs 0 to {_text(e.get('seq'))}, turn {_text(e.get('turn'))} · {task}"
    if kind == "approval_wait":
        return short("waiting for approval: " + ", ".join(_text(c) for c in _list(e.get("call_ids"))))
    if kind == "approval":
        how = "approved" if e.get("approved") is True else "rejected"
        note = f": {_text(e.get('note'))}" if e.get("note") else ""
        return short(f"{how} [{_text(e.get('call_id'))}]{note}")
    if kind == "tool_resume":  # a pending call runs now, after a pause
        return short(f"{_text(e.get('name'))} [{_text(e.get('call_id'))}] runs again: {_text(e.get('by'))}")
    if kind == "step_start":
        attempt = e.get("attempt")
        again = f" (attempt {_text(attempt)})" if type(attempt) is int and attempt > 1 else ""
        return short(f"step {_text(e.get('name'))!r} starts{again}")
    if kind == "step_end":
        how = _text(e.get("outcome")) + (", reconciled" if e.get("reconciled") is True else "")
        head = f"step {_text(e.get('name'))!r} {how}"
        return f"{short(head, 60)}: {short(_text(e.get('output')), 70)}"
    if kind == "data":
        key = short(_text(e.get("key")), 40)
        return f"{key} deleted" if e.get("deleted") else f"{key} = {short(repr(e.get('value')), 60)}"
    return _rest(e)


def _rest(e: dict[str, Any]) -> str:
    return short(str({k: v for k, v in e.items() if k not in ("seq", "kind", "at")}))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _args(args: Any) -> str:
    if not isinstance(args, dict):
        return short(repr(args), 40)
    return short(", ".join(f"{k}={v!r}" for k, v in args.items()), 50)


def short(text: str, width: int = 80) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _time(value: Any, *, clock: bool = False) -> str:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return "?"
    return when.strftime("%H:%M:%S.%f")[:-3] if clock else when.strftime("%Y-%m-%d %H:%M:%S")
