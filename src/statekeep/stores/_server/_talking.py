"""Errors that leave a server store: a lost or refused connection becomes ConnectionError
with a clear message, and no error carries a password."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType


class Talking:
    """An async context manager around one operation (``action``: ``"read"``, ``"write"``,
    ...) of a store that talks to ``server`` (as messages name it: ``"PostgreSQL at
    host:port"``). ``lost`` are the errors of a lost or refused connection; ``scrub`` takes
    the store's passwords out of a text."""

    __slots__ = ("action", "lost", "scrub", "server")

    def __init__(
        self, action: str, server: str, scrub: Callable[[str], str], lost: tuple[type[BaseException], ...]
    ) -> None:
        self.action, self.server, self.scrub, self.lost = action, server, scrub, lost

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
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
                f"{self.server} could not be reached or the connection was lost "
                f"({type(exc).__name__}: {clean}); {outcome}"
            )
            if clean != text:
                raise ConnectionError(message) from None
            raise ConnectionError(message) from exc
        if clean != text:  # rare: keep the type's name, lose the password
            raise RuntimeError(f"{type(exc).__name__}: {clean}") from None
