"""Errors that leave a server store, in statekeep's words: a server that cannot be reached,
or refuses this client (its database, user, password or a setting), becomes ConnectionError
saying where it is and what to check; no error carries a password."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import TracebackType

#: What to check when a server cannot be reached, for every message that says so.
CHECK_REACH = "check that the server is running and that the store URL's host and port are right"


class ConnectionLost(ConnectionError):
    """The ConnectionError of a connection that was lost or could not be made (not of a
    server that refused this client): what a store with a ``failover_timeout`` resends
    after (see :mod:`._failover`). Callers catch it as ConnectionError."""


class Talking:
    """An async context manager around one operation (``action``: ``"read"``, ``"write"``,
    ...) of a store that talks to ``server`` (as messages name it: ``"PostgreSQL at
    host:port"``). ``lost`` are the errors of a lost or refused connection; ``refusal``
    says, for an error with which the server refused this client, what it refused and
    what to check (None for any other error); ``scrub`` masks passwords in a text."""

    __slots__ = ("action", "lost", "refusal", "scrub", "server")

    def __init__(
        self,
        action: str,
        server: str,
        scrub: Callable[[str], str],
        lost: tuple[type[BaseException], ...],
        refusal: Callable[[BaseException], str | None],
    ) -> None:
        self.action, self.server, self.scrub, self.lost, self.refusal = action, server, scrub, lost, refusal

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        refused = self.refusal(exc)
        if refused is not None:  # checked first: a driver may count a refusal as a lost connection
            raise ConnectionError(f"{self.server} {self.scrub(refused)}") from exc
        text = str(exc)
        clean = self.scrub(text)
        if isinstance(exc, self.lost):
            if self.action == "write":
                outcome = (
                    "the write may or may not have been saved; sending the same write again is "
                    "safe (entries the store already has are skipped)"
                )
            else:
                outcome = f"the {self.action} did not complete; try again"
            message = (
                f"{self.server} could not be reached or the connection was lost ({why_lost(exc, clean)}); "
                f"{outcome}; {CHECK_REACH}"
            )
            raise ConnectionLost(message) from exc
        if clean != text:  # rare: keep the type's name, lose the password
            raise RuntimeError(f"{type(exc).__name__}: {clean}") from None


def why_lost(exc: BaseException, text: str) -> str:
    """Why a connection failed, in a few plain words where the cause is a common one, else
    ``text`` (the error's own message, passwords masked)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused: nothing listens there"
        if isinstance(seen, socket.gaierror):
            return "the host name is unknown"
        if isinstance(seen, TimeoutError | asyncio.TimeoutError):
            return "no answer in time"
        if isinstance(seen, ConnectionResetError | BrokenPipeError):
            return "the server closed the connection"
        seen = seen.__cause__ or seen.__context__
    strerror = getattr(exc, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    return text.strip() or "the connection failed"
