"""A session's saved run state: the SDK's ``RunState`` of a run paused for approvals.

A run whose tools need approval stops with ``result.interruptions``; its ``RunState`` (the
SDK's ``result.to_state()``, as JSON by ``RunState.to_json()``) is all it needs to go on. The
session keeps it as a ``run_state`` entry of its history (see :mod:`._openai_history`), so
another process, started later, loads it, approves or rejects, and runs on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

# imported by openai_agents.py only, after it has said what to install if the SDK is missing
from agents import Agent, RunState
from agents.run_state import ContextDeserializer, ContextOverride, ContextSerializer

from .._core.codec import check
from .._core.errors import CorruptStateError, StateConflictError
from .._core.ranges import SNAPSHOT_ONLY
from ._cancel import finish_despite_cancel, stop_if_cancelled
from ._openai_history import MAX_TRIES, RUN_STATE, Tail, header, now

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")


class RunStates:
    """The run-state methods of :class:`~statekeep.adapters.openai_agents.StatekeepSession`."""

    session_id: str
    state_id: str
    _seen: Tail | None

    if TYPE_CHECKING:  # given by StatekeepSession

        async def _read(self, since: int) -> tuple[Tail, list[dict[str, Any]], int] | None: ...
        async def _current(self, seen: Tail | None) -> Tail | None: ...
        async def _wrote(self, tail: Tail | None, entries: list[dict[str, Any]], after: Tail) -> bool: ...
        def _gave_up(self) -> StateConflictError: ...
        def _check_open(self) -> None: ...

    async def save_run_state(
        self,
        state: RunState[Any, Any],
        *,
        context_serializer: ContextSerializer | None = None,
        strict_context: bool = False,
    ) -> None:
        """Keep ``state`` (a run paused for approvals: ``result.to_state()``) in the session,
        in place of any run state saved before, until :meth:`clear_run_state`.

        Saved as ``state.to_json(context_serializer=..., strict_context=...)`` (never the
        tracing API key); the SDK's ``UserError`` if it cannot serialize the state, and a
        ``TypeError`` naming the value if statekeep's codec refuses part of it: nothing is
        written then. Durable on return as the store's ``awrite`` is: a process started
        after it returns finds the state with :meth:`load_run_state`."""
        self._check_open()
        value = state.to_json(context_serializer=context_serializer, strict_context=strict_context)
        check(value, "save_run_state: the run state")
        await finish_despite_cancel(lambda stop: self._put_run_state(value, stop))

    async def load_run_state(
        self,
        agent: Agent[Any],
        *,
        context_override: ContextOverride | None = None,
        context_deserializer: ContextDeserializer | None = None,
        strict_context: bool = False,
    ) -> RunState[Any, Agent[Any]] | None:
        """The run state :meth:`save_run_state` kept, rebuilt for ``agent`` (the run's
        starting agent) by the SDK's ``RunState.from_json`` with these options; None if
        none is kept (never saved, or cleared). Approve or reject its
        ``get_interruptions()``, then ``Runner.run(agent, state, session=session)``, then
        :meth:`clear_run_state` (or save the new state if the run paused again).

        Only the session's own store is trusted with it: the SDK warns against loading a
        run state a client could have changed."""
        self._check_open()
        found = await self._run_state_entry()
        if found is None:
            return None
        return await _rebuilt(agent, found[2], context_override, context_deserializer, strict_context)

    async def take_run_state(
        self,
        agent: Agent[Any],
        *,
        context_override: ContextOverride | None = None,
        context_deserializer: ContextDeserializer | None = None,
        strict_context: bool = False,
    ) -> RunState[Any, Agent[Any]] | None:
        """:meth:`load_run_state` and :meth:`clear_run_state` in one write, so that one
        caller only resumes the paused run: of several processes or tasks taking it at once,
        exactly one gets it, the others None (as every caller after it).

        The state is rebuilt before it is cleared: an error of ``RunState.from_json`` (an
        ``agent`` that is not the run's) clears nothing. At most once: if the taking process
        dies before the run goes on, the calls it waited on stay unanswered in the session
        (the history still holds the state: ``statekeep show``). Durable on return as the
        store's ``awrite`` is."""
        self._check_open()

        async def build(value: dict[str, Any]) -> RunState[Any, Agent[Any]]:
            return await _rebuilt(agent, value, context_override, context_deserializer, strict_context)

        return await finish_despite_cancel(lambda stop: self._take(build, stop))

    async def clear_run_state(self) -> None:
        """Forget the saved run state (after the run it paused went on): :meth:`load_run_state`
        returns None from then on. The history keeps the entry (``statekeep show`` shows it).
        Nothing is written if none is kept. Durable on return as the store's ``awrite`` is."""
        self._check_open()
        await finish_despite_cancel(lambda stop: self._put_run_state(None, stop))

    async def _run_state_entry(self) -> tuple[Tail, int, dict[str, Any]] | None:
        """The session's tail (with its last entry), and the seq and value of its run state."""
        seen = self._seen
        since = seen.paused if seen is not None and seen.paused is not None else SNAPSHOT_ONLY
        while True:
            got = await self._read(since)
            if got is None:
                return None
            tail, entries, _ = got
            if tail.paused is None:
                return None
            if tail.paused == since and entries:
                entry = entries[0]
                value = entry.get(RUN_STATE)
                if entry.get("kind") != RUN_STATE or not isinstance(value, dict):
                    raise CorruptStateError(
                        f"State {self.state_id!r}: its snapshot says the session's run state is "
                        f"at seq {since}, but the entry there is not one"
                    )
                return tail, since, value
            since = tail.paused  # saved again meanwhile, or not read yet

    async def _take(self, build: Callable[[dict[str, Any]], Awaitable[T]], stop: asyncio.Event) -> T | None:
        token = uuid.uuid4().hex
        built: tuple[int, T] | None = None
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            found = await self._run_state_entry()
            if found is None:
                return None  # none kept, or another caller took it first
            tail, seq, value = found
            if built is None or built[0] != seq:
                built = (seq, await build(value))
            assert tail.last is not None  # read from the run state to the end
            entry = {"seq": tail.end, "kind": RUN_STATE, RUN_STATE: None, "taken": seq, "w": token}
            after = dataclasses.replace(tail, end=tail.end + 1, paused=None, last=None)
            if await self._wrote(tail, [tail.last, entry], after):
                return built[1]
        raise self._gave_up()

    async def _put_run_state(self, value: dict[str, Any] | None, stop: asyncio.Event) -> None:
        token = uuid.uuid4().hex
        tail = await self._current(self._seen)
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            if value is None and (tail is None or tail.paused is None):
                return  # nothing kept: nothing to clear
            if tail is None:  # no session yet: start one that holds only the run state
                entry = {"seq": 1, "kind": RUN_STATE, RUN_STATE: value, "w": token}
                entries = [header(self.session_id, token), entry]
                after = Tail(2, 1, 0, now(), paused=1)
            else:
                assert tail.last is not None  # _current and _wrote keep it
                entry = {"seq": tail.end, "kind": RUN_STATE, RUN_STATE: value, "w": token}
                paused = None if value is None else tail.end
                entries = [tail.last, entry]
                after = dataclasses.replace(tail, end=tail.end + 1, paused=paused, last=None)
            if await self._wrote(tail, entries, after):
                return
            tail = await self._current(tail)
        raise self._gave_up()


async def _rebuilt(
    agent: Agent[Any],
    value: dict[str, Any],
    context_override: ContextOverride | None,
    context_deserializer: ContextDeserializer | None,
    strict_context: bool,
) -> RunState[Any, Agent[Any]]:
    """The SDK's ``RunState.from_json`` of a kept run state, with the caller's options."""
    return await RunState.from_json(
        agent,
        value,
        context_override=context_override,
        context_deserializer=context_deserializer,
        strict_context=strict_context,
    )
