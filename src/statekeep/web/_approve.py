"""Approvals in the viewer: the calls a run page shows waiting for a person, and, with
``statekeep serve --allow-approve`` (``create_app(allow_approve=True)``), the approve and
reject buttons' ``POST /runs/{id}/approvals/{call}``.

A decision is a write, so it is guarded more than a page is: it needs the viewer's token
(``--allow-approve`` is refused without one), the form's CSRF token (a random value of this
server's life, only in the pages it serves: another site's form cannot know it), and, when the
browser sends them, an ``Origin`` naming this viewer and a ``Sec-Fetch-Site`` that is not
cross-site (the viewer's ``no-referrer`` policy makes a browser send ``Origin: null``,
which says nothing). The token cookie is ``SameSite=Strict`` besides. Anything missing: 403, and nothing
is written.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._core.errors import LeaseHeldError, StateConflictError
from .._core.ids import validate_id
from .._core.records import Record
from .._run.state import State
from .._store.contract import Store
from . import _fmt as fmt
from ._render import message

#: The path of a decision: POST here with ``decision`` (approve | reject), ``note``, ``csrf``.
DECIDE = "/runs/{state_id:str}/approvals/{call_id:path}"  # (a call id may hold a "/")
MAX_FORM = 64 * 1024  # bytes of a decision's form at most


def is_decision(path: str) -> bool:
    """Whether ``path`` is a decision's (``/runs/ID/approvals/CALL``): the only POST there is."""
    parts = path.split("/", 4)
    return (
        len(parts) == 5
        and parts[0] == ""
        and parts[1] == "runs"
        and parts[3] == "approvals"
        and parts[4] != ""
    )


def pending_views(state_id: str, record: Record) -> list[dict[str, Any]]:
    """What a run page shows of the calls waiting for approval (none for a State that does not
    wait, or one the viewer cannot replay: the timeline shows it as it is)."""
    snap = record.snapshot if isinstance(record.snapshot, dict) else {}
    if snap.get("stopped_by") != "approval":
        return []
    try:
        state = State._from_history(state_id, record.entries)
    except (ValueError, TypeError, KeyError):
        return []
    return [
        {
            "id": call["id"],
            "name": fmt.text(call["name"]),
            "args": fmt.pretty(call["args"]),
            "since": call["since"],
        }
        for call in state.pending_approvals
    ]


def _same_origin(request: Request) -> bool:
    """The browser's own word on where the form came from, when it gives it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":  # none, or hidden: the viewer's pages send no referrer
        return True
    host = request.headers.get("host", "")
    parts = urlsplit(origin)
    return bool(parts.netloc) and parts.netloc.lower() == host.lower()


async def decide(request: Request) -> Response:
    """``POST /runs/{id}/approvals/{call}``: approve or reject a waiting call, then back to the
    run's page (303). 403 without the CSRF token or from another site, 400 for a bad form, 404
    for no such State, 409 for a call that cannot be decided (or a State changed meanwhile)."""
    body = await request.body()
    if len(body) > MAX_FORM:
        return message("Bad request", "The form is too large.", 400)
    form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    expected: str = request.app.state.csrf
    if not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode()) or not _same_origin(request):
        return message(
            "Forbidden",
            "This decision did not come from this viewer's own page (its CSRF token is missing or "
            "wrong): open the run's page again and use its buttons. Nothing was changed.",
            403,
        )
    decision = form.get("decision")
    if decision not in ("approve", "reject"):
        return message("Bad request", "decision must be approve or reject; nothing was changed.", 400)
    try:
        state_id = validate_id(request.path_params["state_id"])
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    call_id = request.path_params["call_id"]
    note = form.get("note", "").strip() or None
    store: Store = request.app.state.store
    try:
        state = await store.aload(state_id)
    except LookupError:
        return message("Not found", f"No State {state_id!r} in this store.", 404)
    problem = state._replay.approval_problem(call_id)
    if problem is not None:
        return message("Cannot decide", f"State {state_id}: {problem}. Nothing was changed.", 409)
    try:
        (state.approve if decision == "approve" else state.reject)(call_id, note=note)
    except ValueError as exc:  # a run is going on (or was cut off): it must stop first
        return message("Cannot decide now", f"{exc}. Open its page again once it waits.", 409)
    try:
        await store.asave(state)
    except LeaseHeldError:
        return message(
            "Cannot decide now",
            f"State {state_id} is leased by a running agent; nothing was changed. Decide once it stops for "
            "approval again.",
            409,
        )
    except StateConflictError:
        return message(
            "Changed meanwhile",
            f"State {state_id} was saved by someone else meanwhile; nothing was changed. Open its page "
            "again and decide there.",
            409,
        )
    return RedirectResponse(f"/runs/{state_id}", status_code=303)
