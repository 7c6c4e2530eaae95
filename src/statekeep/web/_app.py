"""The viewer as an ASGI app: :func:`create_app`."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._store.contract import Store
from ._approve import DECIDE, decide
from ._charts import StatsCache
from ._feed import Changes
from ._guard import Guard
from ._live import run_events, runs_events
from ._pages import run_page, runs_page
from ._render import message
from ._statuses import Statuses

STATIC = Path(__file__).parent / "static"


async def _not_found(request: Request, exc: Exception) -> Response:
    return message("Not found", "There is no such page in this viewer.", 404)


async def _refused(request: Request, exc: Exception) -> Response:
    response = message("Read-only", "The viewer only shows runs: it changes nothing.", 405)
    response.headers["Allow"] = "GET, HEAD"
    return response


def check_token(token: str | None) -> None:
    """ValueError for an empty token, which would guard nothing."""
    if token is not None and not token.strip():
        raise ValueError(
            "an empty token guards nothing: give a long random one "
            "(python -c 'import secrets; print(secrets.token_urlsafe())'), or none on 127.0.0.1"
        )


def check_approve(token: str | None, allow_approve: bool) -> None:
    """ValueError for approvals without a token: anyone who reaches the viewer could decide."""
    if allow_approve and token is None:
        raise ValueError(
            "--allow-approve lets the viewer's users approve tool calls: give it a --token "
            "(or $STATEKEEP_TOKEN) too, so that only they can"
        )


def create_app(
    store: Store, *, token: str | None = None, host: str = "127.0.0.1", allow_approve: bool = False
) -> Starlette:
    """The viewer over ``store`` as an ASGI app (serve it with uvicorn or any ASGI server).

    Read-only: it only reads the store (with its async methods, on the server's event
    loop), and answers GET and HEAD only. With ``token``, every request needs
    ``Authorization: Bearer TOKEN`` or the cookie that opening a URL with ``?token=TOKEN``
    sets. ``host`` is the address the server binds: without a token, or on a loopback
    ``host``, requests must name it (or localhost, 127.0.0.1, [::1]) in their Host header,
    else 421 (a guard against DNS rebinding). The app does not close ``store``: the caller
    does, after the server stops.

    ``allow_approve``: run pages get approve and reject buttons for the tool calls waiting on
    a person, and the app answers their POST (see :mod:`statekeep.web._approve`: the token and
    a CSRF token guard it); it needs ``token`` (ValueError without one). A decision is durable
    once the redirect back to the run's page is sent.
    """
    check_token(token)
    check_approve(token, allow_approve)
    decisions = [Route(DECIDE, decide, methods=["POST"])] if allow_approve else []
    app = Starlette(
        routes=[
            Route("/", runs_page, methods=["GET", "HEAD"]),
            Route("/events/runs", runs_events, methods=["GET", "HEAD"]),
            Route("/runs/{state_id:str}", run_page, methods=["GET", "HEAD"]),
            Route("/runs/{state_id:str}/events", run_events, methods=["GET", "HEAD"]),
            *decisions,
            Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[Middleware(Guard, token=token, host=host, allow_approve=allow_approve)],
        exception_handlers={404: _not_found, 405: _refused},
    )
    app.state.store = store
    app.state.allow_approve = allow_approve
    #: The approve/reject forms' CSRF token: random, for this app's life, only in its pages.
    app.state.csrf = secrets.token_urlsafe(32)
    # Set when the server stops: the live streams, which never end by themselves, end then.
    app.state.stopping = threading.Event()
    app.state.statuses = Statuses()  # the status filter's choices, gathered as rows are shown
    # The runs page's summary: listed again when the store changes, at most every EVERY seconds.
    app.state.stats = StatsCache()
    app.state.changes = Changes(store, app.state.stopping, app.state.statuses)  # the feeds' one poller
    return app
