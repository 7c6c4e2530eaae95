"""A session's tool call keys: the idempotency key a function tool passes to the service it calls.

The key of a call is ``idempotency_key(session_id, incarnation, tool_call_id)``, with the
incarnation of the session's State: the same in every process and after any crash, and a
new one for a session deleted and started again under the same id, even by a model that
gives the same call ids again (a scripted one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# imported by openai_agents.py only, after it has said what to install if the SDK is missing
from agents.tool_context import ToolContext as AgentsToolContext

from .._core.errors import StateNotFoundError
from .._core.keys import idempotency_key
from .._core.ranges import SNAPSHOT_ONLY
from .._core.records import Record
from .._store.contract import Store
from ._flow import adrive, drive
from ._home import Home


class ToolCallKeys:
    """The tool call key methods of :class:`~statekeep.adapters.openai_agents.StatekeepSession`."""

    session_id: str
    state_id: str
    store: Store
    _home: Home
    _incarnation: tuple[str | None] | None

    if TYPE_CHECKING:  # given by StatekeepSession

        def _check_open(self) -> None: ...

    def tool_call_key(self, tool_call: AgentsToolContext[Any] | str) -> str:
        """The idempotency key of one tool call of this session: the same in every process,
        from every session object and after any crash or resume; different for every other
        call id, session, or life of the session (deleted and started again under its id).
        Pass it to the service the tool calls (an ``Idempotency-Key`` header, a unique
        column), so that a call run again is recognised there.

        ``tool_call`` is the SDK's ``agents.ToolContext`` a function tool receives as its
        first parameter (its ``tool_call_id`` is used), or that call id itself. The key is
        ``statekeep.idempotency_key(session_id, incarnation, tool_call_id)``, where
        ``incarnation`` is that of the session's State as this object last read or wrote it
        (None for a store that keeps none). A run (``Runner.run(..., session=session)``)
        reads and saves the session before its model is asked anything, so its tools find
        it known; otherwise (another session object, a run resumed from a ``RunState``)
        the first call reads it once, with the store's sync API (which works inside a
        running event loop; an ``async`` tool should await :meth:`atool_call_key`).
        :meth:`clear_session` keeps the State, so the keys stay as they were.

        TypeError for a ``tool_call`` that carries no call id; StateNotFoundError if the
        session has nothing saved yet (nothing to key the call with: a run saves its
        input before any tool runs)."""
        call_id = _call_id(tool_call, "tool_call_key")
        self._check_open()
        if self._incarnation is None:
            self._learn(drive(self._home.reading(self.state_id, SNAPSHOT_ONLY)))
        return self._key(call_id)

    async def atool_call_key(self, tool_call: AgentsToolContext[Any] | str) -> str:
        """:meth:`tool_call_key` for an ``async`` tool: the same key, read (if the session
        is not known yet) with the store's async API, never blocking the event loop."""
        call_id = _call_id(tool_call, "atool_call_key")
        self._check_open()
        if self._incarnation is None:
            self._learn(await adrive(self._home.reading(self.state_id, SNAPSHOT_ONLY)))
        return self._key(call_id)

    def _learn(self, record: Record | None) -> None:
        self._incarnation = None if record is None else (record.incarnation,)

    def _key(self, call_id: str) -> str:
        known = self._incarnation
        if known is None:
            raise StateNotFoundError(
                f"OpenAI Agents session {self.session_id!r} has nothing saved in {self.store!r} "
                f"yet, so tool call {call_id!r} has no key (it holds the session's incarnation)",
                "Ask for it in a tool of a run given this session (Runner.run(agent, input, "
                "session=session) saves its input before any tool runs), or after add_items",
            )
        return idempotency_key(self.session_id, known[0], call_id)


def _call_id(tool_call: object, name: str) -> str:
    call_id = tool_call if isinstance(tool_call, str) else getattr(tool_call, "tool_call_id", None)
    if not isinstance(call_id, str) or not call_id:
        got = repr(tool_call) if isinstance(tool_call, str) else type(tool_call).__name__
        raise TypeError(
            f"{name}(): tool_call must be the agents.ToolContext a function tool receives "
            f"(with a tool_call_id) or a non-empty tool call id, got {got}"
        )
    return call_id
