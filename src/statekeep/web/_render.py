"""The Jinja2 templates (autoescape on: everything from the store shows as text) and what
they need to show one timeline entry or one runs row."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.responses import HTMLResponse

from .._core.records import SavedState, run_status
from .._run.readers import reader
from .._run.shown import Shown
from . import _fmt as fmt

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,  # every template is HTML: stored text can never become markup
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters.update(pretty=fmt.pretty, text=fmt.text, css_word=fmt.css_word, num=lambda v: f"{v:.1f}")
_ENV.tests.update(state_id=fmt.is_id)


def render(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)


def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(render(name, **context), status_code=status_code)


def message(title: str, text: str, status_code: int) -> HTMLResponse:
    """A short page saying what went wrong (404, 400, 401, ...)."""
    return page("message.html", status_code, title=title, text=text)


def entry_classes(entry: dict[str, Any]) -> str:
    """``entry kind-{kind}``, plus ``unknown`` for a tool result whose outcome is unknown and
    ``error`` for model errors, errors and failed tool results: what should stand out."""
    kind = entry.get("kind")
    classes = ["entry", f"kind-{fmt.css_word(kind)}"]
    if kind == "tool_result" and entry.get("outcome") == "unknown":
        classes.append("unknown")
    if kind in ("model_error", "error") or (
        kind == "tool_result" and (entry.get("is_error") is True or entry.get("outcome") == "error")
    ):
        classes.append("error")
    return " ".join(classes)


def entry_view(entry: dict[str, Any], previous_at: Any, shown: Shown | None = None) -> dict[str, Any]:
    """What ``_entry.html`` shows for one entry (``previous_at``: the previous entry's ``at``;
    ``shown``: how its adapter reads it, for a State an adapter wrote)."""
    if shown is not None:
        entry = shown.entry
    calls = entry.get("tool_calls") if entry.get("kind") == "model_reply" else None
    at = entry.get("at")
    return {
        "e": entry,
        "seq": entry.get("seq"),
        "classes": entry_classes(entry),
        "at": fmt.text(at),
        "clock": _clock(at),
        "gap": "" if previous_at is None else fmt.gap(previous_at, at),
        "calls": [c if isinstance(c, dict) else {"name": fmt.text(c)} for c in calls]
        if isinstance(calls, list)
        else [],
        "line": None if shown is None else shown.line,
        "detail": None if shown is None else shown.detail,
    }


def _clock(value: Any) -> str:
    when = fmt.parse_time(value)
    return fmt.text(value) if when is None else when.strftime("%Y-%m-%d %H:%M:%S")


def entries_html(
    entries: list[dict[str, Any]], previous_at: Any, snapshot: object = None
) -> list[tuple[int, str]]:
    """Each entry rendered as its ``<li>``, with its seq (for the live stream); those of a
    State an adapter wrote (its ``snapshot`` says) in the adapter's words."""
    show = reader(snapshot)
    out = []
    for entry in entries:
        seq = entry.get("seq")
        view = entry_view(entry, previous_at, show(entry))
        out.append((seq if type(seq) is int else -1, render("_entry.html", v=view)))
        previous_at = entry.get("at")
    return out


def row_view(row: SavedState, children: int, now: datetime | None = None) -> dict[str, Any]:
    """What ``_row.html`` shows for one State of the runs page."""
    return {
        "id": row.id,
        "task": row.task,
        "agent": row.agent or "",
        "turn": row.turn,
        "status": row.status,
        "status_class": f"status-{fmt.css_word(row.status)}",
        "updated_iso": row.updated_at.isoformat(),
        "updated": fmt.relative(row.updated_at, now or datetime.now(UTC)),
        "updated_exact": fmt.exact(row.updated_at),
        "children": children,
        "parent": row.parent or "",
        "fork_of": fmt.text(row.forked_from.get("id")) if row.forked_from else "",
    }


def snapshot_status(snapshot: dict[str, Any] | None) -> str:
    """The status word of a snapshot (as :attr:`SavedState.status`), whatever it holds."""
    snap = snapshot if isinstance(snapshot, dict) else {}
    stopped_by = snap.get("stopped_by")
    return run_status(snap.get("finished") is True, stopped_by if isinstance(stopped_by, str) else None)
