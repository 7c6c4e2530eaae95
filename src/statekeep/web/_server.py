"""Running the viewer: :func:`serve` (the Python API) and what ``statekeep serve`` uses."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable
from types import FrameType
from typing import Any
from urllib.parse import urlencode

import uvicorn

from .._store.contract import Store
from ._app import check_approve, check_token, create_app
from ._guard import is_loopback


class _Server(uvicorn.Server):
    """uvicorn's server, telling once it listens where (the real port when 0 was asked)."""

    def __init__(
        self, config: uvicorn.Config, on_ready: Callable[[str], None], stopping: threading.Event
    ) -> None:
        super().__init__(config)
        self.on_ready = on_ready
        self.stopping = stopping

    async def shutdown(self, sockets: Any = None) -> None:
        self.stopping.set()  # the live streams end, so that no connection holds the stop up
        await super().shutdown(sockets)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:
            return
        sock = self.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        shown = self.config.host if self.config.host not in ("0.0.0.0", "::") else host
        if ":" in shown:
            shown = f"[{shown}]"
        self.on_ready(f"http://{shown}:{port}/")


def _announce(url: str) -> None:
    print(f"statekeep: serving {url} (Ctrl-C to stop)", flush=True)


def check_host(host: str, token: str | None, allow_approve: bool = False) -> None:
    """ValueError when ``token`` is empty, or ``host`` is not loopback and no token guards
    the viewer, or approvals are allowed without a token."""
    check_token(token)
    check_approve(token, allow_approve)
    if token is None and not is_loopback(host):
        raise ValueError(
            f"--host {host} lets other machines in: give a --token (or $STATEKEEP_TOKEN), or bind 127.0.0.1"
        )


class _GoneClients(logging.Filter):
    """Drops asyncio's "socket.send() raised exception." lines: a browser tab closed while
    its live stream was being written, which is no news (the stream ends on its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "socket.send() raised exception."


_QUIET = _GoneClients()


def _server(
    store: Store,
    host: str,
    port: int,
    token: str | None,
    on_ready: Callable[[str], None],
    allow_approve: bool = False,
) -> tuple[_Server, socket.socket]:
    check_host(host, token, allow_approve)
    logging.getLogger("asyncio").addFilter(_QUIET)  # once: a filter is added only once
    app = create_app(store, token=token, host=host, allow_approve=allow_approve)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=5,  # in case a stream is stuck in a slow store call
    )
    listener = listen(host, port)  # bound here: a taken port is an OSError, not a log line
    return _Server(config, on_ready, app.state.stopping), listener


def serve(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    open_browser: bool = False,
    on_ready: Callable[[str], None] = _announce,
    allow_approve: bool = False,
) -> None:
    """Serve the viewer over ``store`` until Ctrl-C or SIGTERM, then return normally.

    ``port=0`` picks a free port; ``on_ready`` gets the URL once the server listens (by
    default it prints "statekeep: serving URL"). A non-loopback ``host`` needs a ``token``
    (ValueError otherwise, as for an empty token); a port that cannot be bound is an OSError. The store is not
    closed. To serve while the program goes on (a :class:`MemoryStore`), use :func:`start`.
    ``allow_approve``: approve and reject buttons for tool calls waiting on a person (needs a
    ``token``; see :func:`~statekeep.web.create_app`).
    """

    def ready(url: str) -> None:
        on_ready(url)
        if open_browser:
            # With the token once in the URL (the viewer turns it into a cookie). In a thread:
            # a console browser ($BROWSER=lynx) returns only when the user quits it, and the
            # event loop must go on serving, and stopping on SIGTERM, meanwhile.
            target = f"{url}?{urlencode({'token': token})}" if token else url
            threading.Thread(
                target=webbrowser.open, args=(target,), name="statekeep-open", daemon=True
            ).start()

    server, listener = _server(store, host, port, token, ready, allow_approve)
    # uvicorn raises the signal again once it has stopped, to let the caller see it: we
    # have stopped cleanly, so a no-op handler swallows it (the old ones come back after).
    quiet: Callable[[int, FrameType | None], None] = lambda signum, frame: None  # noqa: E731
    old = (
        {sig: signal.signal(sig, quiet) for sig in (signal.SIGINT, signal.SIGTERM)} if _main_thread() else {}
    )
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
        for sig, handler in old.items():
            signal.signal(sig, handler)


class Viewer:
    """The viewer serving in a background thread (see :func:`start`): its :attr:`url`, and
    :meth:`stop`. A context manager that stops it at the end of the block."""

    def __init__(self, server: _Server, listener: socket.socket) -> None:
        self._server = server
        self._listener = listener
        self._ready = threading.Event()
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="statekeep-viewer", daemon=True)

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._listener])
        finally:
            self._listener.close()

    def _started(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait (up to ``timeout`` seconds) until the server has closed."""
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(store: Store, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> Viewer:
    """Serve the viewer over ``store`` in a background thread and return once it listens
    (its URL is ``.url``; ``port=0``, the default, picks a free port). Made for a
    :class:`MemoryStore`, which only this process can see: the program goes on running
    its agent while the viewer shows it. Stop it with ``.stop()`` or a ``with`` block.
    """
    viewer: Viewer | None = None

    def ready(url: str) -> None:
        assert viewer is not None
        viewer._started(url)

    server, listener = _server(store, host, port, token, ready)
    viewer = Viewer(server, listener)
    viewer._thread.start()
    while not viewer._ready.wait(0.05):
        if not viewer._thread.is_alive():
            raise RuntimeError("the viewer stopped while starting (see the error above)")
    return viewer


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (0: a free port); OSError if it cannot be."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and sys.platform != "win32"
