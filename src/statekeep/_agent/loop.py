"""A reference agent loop: a small, clear example of a loop that saves as it goes.

Not a framework. It shows where a loop saves (at run start, before each model request,
after each reply, after each tool result, at the stop) so that a crash at any instant
leaves a State that ``store.load`` can continue.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from .._core.errors import LeaseHeldError, StaleLeaseError
from .._core.leases import Lease, check_owner, check_ttl
from .._leases.keepalive import LeaseKeeper, default_owner
from .._run.state import State, agent_info
from .._runtime.callerloop import worker_thread
from .._store.contract import Store
from .._store.steps import run_step
from . import approving, tracing
from .compaction import Compactor
from .context import ToolContext
from .resolving import Resolving, record_result
from .tools import Tool


@dataclass(frozen=True)
class Reply:
    """What a model returns: text, tool calls (``{"id", "name", "args"}``), usage, stop reason."""

    text: str = ""
    tool_calls: Sequence[Mapping[str, Any]] = ()
    usage: Mapping[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None


#: A model: called with the messages and the tool schemas, returns a Reply (or awaits one).
Model = Callable[[list[dict[str, Any]], list[dict[str, Any]]], "Reply | Awaitable[Reply]"]


class ScriptedModel:
    """Replays scripted replies in order, for tests and demos. A str is a final text reply."""

    def __init__(self, replies: Iterable[Reply | str], *, name: str = "scripted") -> None:
        self.replies = [Reply(r) if isinstance(r, str) else r for r in replies]
        self.name = name
        self.calls: list[list[dict[str, Any]]] = []  # the messages of each call

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        if len(self.calls) >= len(self.replies):
            raise RuntimeError(f"ScriptedModel has no reply left (it had {len(self.replies)})")
        self.calls.append(list(messages))
        return self.replies[len(self.calls) - 1]


class Agent(Resolving):
    """Runs a State: asks the model, runs the tools it calls, until it answers.

    With a ``store``, the State is saved as the run goes. ``limit`` caps the model turns
    of one run; reaching it stops the run (``stopped_by == "limit"``) without finishing
    it, so it can run again.

    Leases (built-in stores): with ``lease_ttl`` (seconds or a timedelta) each run takes
    the State's lease for ``owner`` (default ``host/pid-N/<name>``) and releases it at its
    end; or pass a lease you acquired to :meth:`run`/:meth:`arun` as ``lease=`` (kept: you
    release it). Either way the run renews the lease once half its period has gone by
    (checked at every step, and by a heartbeat while a long model or tool call runs) and
    saves with ``lease=``. When another owner takes the State over, the run stops at once,
    saves nothing more, and raises :class:`StaleLeaseError`: the State in memory may then
    hold steps the store does not; load it again before going on.

    ``compact``: a :class:`Compactor`; before each model request the run compacts the State
    (:meth:`State.compact`, saved before the request) once the estimated context passes its
    ``max_tokens``.

    Tools (see :func:`statekeep.tool`): intent before effect — with a store, a call is
    durable (the model reply holding it is saved) before its tool starts, and its result is
    saved before the next call starts. A tool that declares a :class:`ToolContext` parameter
    gets the call's stable ``idempotency_key``. After a crash, the first run of the loaded
    State resolves the calls left in doubt by their tools' ``reconcile`` or ``idempotent``
    before anything else; other tools' calls stay reported as "may or may not have run"
    (the docs' "Tools that must not run twice").
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Callable[..., Any]] = (),
        system: str | None = None,
        name: str = "agent",
        store: Store | None = None,
        limit: int = 20,
        lease_ttl: float | timedelta | None = None,
        owner: str | None = None,
        compact: Compactor | None = None,
    ) -> None:
        if compact is not None and not isinstance(compact, Compactor):
            raise TypeError(f"Agent(compact=...) takes a statekeep.Compactor, got {type(compact).__name__}")
        self.model = model
        self.compact = compact
        self.tools = {t.name: t for t in map(Tool.from_function, tools)}
        self.system = system
        self.name = name
        self.store = store
        self.limit = limit
        self.lease_ttl = None if lease_ttl is None else check_ttl(lease_ttl, "lease_ttl")
        self.owner = default_owner(name) if owner is None else check_owner(owner)
        self.model_name = str(getattr(model, "name", getattr(model, "__name__", type(model).__name__)))

    def info(self) -> dict[str, Any]:
        """The agent as ``run_start`` records it."""
        return agent_info(self.name, self.model_name, system=self.system, tools=self.tools)

    def run(self, state: State, *, lease: Lease | None = None) -> Any:
        """Sync :meth:`arun`: runs the loop on an event loop of its own, never on statekeep's
        private one, so slow tools and models never hold up other callers' saves. Inside a
        running event loop it runs on a thread of its own and blocks that loop meanwhile."""
        state._check_run(self.info())  # here, so that a ResumeWarning points at the caller
        try:
            asyncio.get_running_loop()
            in_a_loop = True
        except RuntimeError:
            in_a_loop = False
        # Outside the except block: errors of the run must not be chained to the RuntimeError.
        if not in_a_loop:
            return asyncio.run(self.arun(state, lease=lease))
        with ThreadPoolExecutor(1, thread_name_prefix="statekeep-agent") as pool:
            # In the caller's context: its OpenTelemetry span stays the run's parent.
            return pool.submit(
                contextvars.copy_context().run, asyncio.run, self.arun(state, lease=lease)
            ).result()

    async def arun(self, state: State, *, lease: Lease | None = None) -> Any:
        """Run until the model answers without calling tools; return the answer.

        A tool whose output JSON cannot hold gives the model an error result saying so
        (outcome ``done``: the tool ran), and the run goes on. ``lease=``: see the class;
        :class:`StaleLeaseError` once the State is taken over (nothing more is saved).

        A call whose tool ``wants_approval`` stops the run (None, ``stopped_by`` "approval")
        once the reply's other calls ran; after ``state.approve``/``reject`` the next run
        runs the approved calls and answers the rejected ones first (docs: "Approvals")."""
        state._check_run(self.info())  # (a ResumeWarning under -W error stops it before any tool runs)
        with tracing.run_span(self, state) as (_, trace):  # (the docs' "Telemetry")
            keeper = await LeaseKeeper.start(self.store, state.id, lease, self.lease_ttl, self.owner)
            if keeper is None:
                return await self._run(state, None, trace)
            return await keeper.run(lambda: self._run(state, keeper, trace))

    async def _run(self, state: State, keeper: LeaseKeeper | None, trace: dict[str, str] | None) -> Any:
        await self._resolve_in_doubt(state, keeper)  # a loaded State's in-doubt calls, first
        state.begin_run(self.info(), trace=trace)
        await self._save(state, keeper)
        schemas = [t.schema for t in self.tools.values()]
        save = lambda: self._save(state, keeper)  # noqa: E731  (approvals save through it)
        try:
            if await approving.settle(self, state, keeper, save, record_result):
                return None  # calls still wait for a person's decision
            for _ in range(self.limit):
                if self.compact is not None and await self.compact.compact(state, self.system):
                    await self._save(state, keeper)
                state.request(self.model_name)
                await self._save(state, keeper)
                reply = await self._asked(state, schemas)
                # Asked once a reply, and saved with it: a crash before the run stops for
                # them leaves those calls waiting, not in doubt (they never run unapproved).
                asked = approving.asked(self, reply.tool_calls)
                state.add_reply(
                    reply.text,
                    reply.tool_calls,
                    usage=reply.usage,
                    stop_reason=reply.stop_reason,
                    awaiting_approval=asked,
                )
                await self._save(state, keeper)
                if not reply.tool_calls:
                    state.finish(reply.text)
                    await self._save(state, keeper)
                    return reply.text
                for call in reply.tool_calls:
                    if call["id"] in asked:
                        continue  # run after a person approves it (below: the run stops)
                    if keeper is not None:
                        await keeper.keep()  # a tool's effects must not start on a lost lease
                    output, is_error = await self._call_tool(state, call, keeper)
                    record_result(state, call, output, is_error)
                    await self._save(state, keeper)
                if await approving.stop_for_approval(state, asked, save):
                    return None
            state.stop("limit")
            await self._save(state, keeper)
            return None
        except Exception as exc:
            if isinstance(exc, (StaleLeaseError, LeaseHeldError)) or (keeper and keeper.saw(exc)):
                raise  # another worker holds the State: save nothing more
            if state.waiting_on_model:
                state.add_model_error(f"{type(exc).__name__}: {exc}")
            if not state.pending_calls:
                state.add_error(f"{type(exc).__name__}: {exc}")
            await self._save(state, keeper)
            raise

    async def _asked(self, state: State, schemas: list[dict[str, Any]]) -> Reply:
        """:meth:`_ask`, in a ``chat`` span when traced."""
        attributes = tracing.chat_attributes(self.model_name)
        with tracing.span(
            tracing.tools_for(self.store), f"chat {self.model_name}", attributes, client=True
        ) as chat:
            reply = await self._ask(state, schemas)
            tracing.note_reply(chat, reply.usage, reply.stop_reason)
        return reply

    async def _ask(self, state: State, schemas: list[dict[str, Any]]) -> Reply:
        messages = list(state.messages)
        if self.system is not None:
            messages.insert(0, {"role": "system", "content": self.system})
        got: object
        if _is_async(self.model):
            got = self.model(messages, schemas)
        else:  # a blocking model call must not hold up the event loop
            got = await worker_thread(self.model, messages, schemas)
        if inspect.isawaitable(got):
            got = await got
        if isinstance(got, Mapping):
            return Reply(**got)
        return cast(Reply, got)  # a Reply, or any object with its attributes

    def _context(
        self, state: State, call: Mapping[str, Any], keeper: LeaseKeeper | None = None
    ) -> ToolContext:
        """The ToolContext of pending call ``call`` of ``state`` (every tool and reconcile
        gets its context here): its stable key, the attempt it is on, and (with a store) a
        stepper that runs ``ctx.step`` as a durable step of the call, saved as the run saves."""
        stepper = None
        if self.store is not None:

            async def save(held: State) -> None:
                await self._save(held, keeper)

            async def stepper(name: str, fn: Callable[..., Any], *args: Any, **options: Any) -> Any:
                return await run_step(state, name, fn, args, save=save, scope=call["id"], **options)

        return ToolContext(
            state_id=state.id,
            call_id=call["id"],
            idempotency_key=state._call_key(call["id"]),
            attempt=state._attempt(call["id"]),
            name=call["name"],
            args=dict(call.get("args") or {}),
            _stepper=stepper,
        )

    async def _call_tool(
        self, state: State, call: Mapping[str, Any], keeper: LeaseKeeper | None = None
    ) -> tuple[Any, bool]:
        tools = tracing.tools_for(self.store)
        with tracing.span(tools, f"execute_tool {call['name']}", tracing.tool_attributes(call)) as current:
            tool = self.tools.get(call["name"])
            if tool is None:
                if current is not None and tools is not None:
                    tracing.failed(tools, current, "UnknownTool")
                return f"unknown tool {call['name']!r}; available: {', '.join(self.tools) or 'none'}", True
            try:
                return await tool.call(
                    dict(call.get("args") or {}), self._context(state, call, keeper)
                ), False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if current is not None and tools is not None:
                    tracing.failed(tools, current, type(exc).__qualname__)
                return f"{type(exc).__name__}: {exc}", True

    async def _save(self, state: State, keeper: LeaseKeeper | None) -> None:
        if self.store is None:
            return
        if keeper is None:
            await self.store.asave(state)
        else:
            await self.store.asave(state, lease=await keeper.keep())


def _is_async(fn: Any) -> bool:
    """Is ``fn`` a coroutine function, or an object whose ``__call__`` is one?"""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
