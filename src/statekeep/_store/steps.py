"""Durable steps: run a function once per State, its start saved before it runs and its
result saved at once after; called again (after a crash, in a new process), a recorded step
gives back its result without running the function. The Store contract's ``step``/``astep``
(:class:`Stepping`, which :class:`~statekeep.Store` inherits) and the agent loop's
``ctx.step`` run :func:`run_step`.

A step whose start is saved and whose end is not is *in doubt*: its function may or may not
have run. Called again, it follows the tool rules: ``reconcile(ctx)`` says whether it ran
(its result: recorded as the step's, ``reconciled``; :data:`~statekeep.NotRun`: it runs
again), ``idempotent=True`` runs it again with the same key (a new start, one attempt more),
and with neither it is recorded ``unknown`` and :class:`StepInDoubtError` is raised, then
and on every later call.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import sys
import typing
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .._core.context import NotRun, ToolContext
from .._core.errors import StepFailedError, StepInDoubtError
from .._run.replay_steps import Scope
from .._run.state import State
from .._runtime.callerloop import worker_thread
from .saving import match_incarnation

if TYPE_CHECKING:
    from .._core.leases import Lease

Saver = Callable[[State], Awaitable[None]]

IN_DOUBT = (
    "The process stopped while this step ran, before its end was recorded, so its function may or "
    "may not have run. It is not run again."
)


def _check(state: object, name: object, fn: object, reconcile: object, idempotent: object) -> None:
    if not isinstance(state, State):
        raise TypeError(f"step(): state must be a statekeep State, got {type(state).__name__}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"step(): name must be a non-empty str, unique in the State, got {name!r}")
    if not callable(fn):
        raise TypeError(f"step({name!r}): fn must be a function (sync or async), got {fn!r}")
    if reconcile is not None and not callable(reconcile):
        raise TypeError(f"step({name!r}): reconcile= takes a function of the ToolContext, got {reconcile!r}")
    if type(idempotent) is not bool:
        raise TypeError(f"step({name!r}): idempotent= takes True or False, got {idempotent!r}")


def _context_param(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s parameter annotated ToolContext, if it has one."""
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError, NameError):
        return None
    return next((p for p in params if hints.get(p) is ToolContext), None)


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: awaited if async, else in a worker thread (as tools run)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return await fn(*args, **kwargs)
    got = await worker_thread(fn, *args, **kwargs)
    return await got if inspect.isawaitable(got) else got


def _recorded(state: State, name: str, scope: Scope, record: dict[str, Any]) -> Any:
    """What a step whose end is recorded gives: its output (a copy), or its error raised again."""
    if record["outcome"] == "done":
        return copy.deepcopy(record["output"])
    if record["outcome"] == "error":
        raise StepFailedError(
            f"step {name!r} of State {state.id!r} failed when it ran, and its error is recorded: "
            f"{record['output']}", state.id, name, record["output"],
        )  # fmt: skip
    raise StepInDoubtError(
        f"step {name!r} of State {state.id!r} is in doubt: its run was interrupted before its end was "
        f"recorded (attempt {record['attempt']}), so it may or may not have run, and it is recorded as "
        "unknown. Check its effect by its key (the error's .key); to have such a step resolved next "
        "time, give it reconcile= (a function of the ToolContext that finds whether it ran) or "
        "idempotent=True (safe to run again with the same key)",
        state.id, name, record["key"], record["attempt"],
    )  # fmt: skip


async def run_step(
    state: State,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    save: Saver,
    reconcile: Callable[[ToolContext], Any] | None = None,
    idempotent: bool = False,
    scope: Scope = None,
) -> Any:
    """Run step ``name`` of ``state`` (in tool call ``scope``, if given), saving with ``save``."""
    _check(state, name, fn, reconcile, idempotent)
    record = state._step_called(name, scope)
    if record is None:  # a new step
        return await _start(state, name, fn, args, save, scope, state._step_key(name, scope), 1)
    if "outcome" in record:
        return _recorded(state, name, scope, record)
    key, attempt = record["key"], record["attempt"]
    if (scope, name) in state._steps_unrun:  # its start's save failed: fn never ran
        return await _start(state, name, fn, args, save, scope, key, attempt, again=False)
    context = ToolContext(state.id, f"step:{name}" if scope is None else scope, key, attempt, name)
    if reconcile is not None:
        try:
            found = await _call(reconcile, context)
        except Exception:
            if not idempotent:
                await _give_up(state, name, scope, save)  # raises, with the reconcile's error as context
            found = NotRun
        if found is not NotRun:
            state._end_step(name, scope, found, "done", reconciled=True)  # TypeError: still in doubt
            await save(state)
            return _recorded(state, name, scope, state._step_record(name, scope))
        return await _start(state, name, fn, args, save, scope, key, attempt + 1)
    if idempotent:
        return await _start(state, name, fn, args, save, scope, key, attempt + 1)
    await _give_up(state, name, scope, save)


async def _give_up(state: State, name: str, scope: Scope, save: Saver) -> typing.NoReturn:
    """Record the step in doubt as unknown, save, and raise StepInDoubtError."""
    state._end_step(name, scope, IN_DOUBT, "unknown")
    await save(state)
    _recorded(state, name, scope, state._step_record(name, scope))
    raise AssertionError("unreachable")  # pragma: no cover


async def _start(
    state: State,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    save: Saver,
    scope: Scope,
    key: str,
    attempt: int,
    *,
    again: bool = True,
) -> Any:
    """Save the step's start (intent before effect), run ``fn``, save its end."""
    unrun = state._steps_unrun
    if again:
        state._start_step(name, scope, key, attempt)
        unrun.add((scope, name))
    await save(state)
    unrun.discard((scope, name))
    param = _context_param(fn)
    extra = (
        {} if param is None else {param: ToolContext(state.id, scope or f"step:{name}", key, attempt, name)}
    )
    try:
        output = await _call(fn, *args, **extra)
    except Exception as exc:
        state._end_step(name, scope, f"{type(exc).__name__}: {exc}", "error")
        await save(state)
        record = state._step_record(name, scope)
        try:
            _recorded(state, name, scope, record)
        except StepFailedError as failed:
            raise failed from exc
    try:
        state._end_step(name, scope, output, "done")
    except TypeError as exc:
        state._end_step(name, scope, f"step {name!r} ran, but its result cannot be saved: {exc}", "error")
        await save(state)
        raise TypeError(
            f"step {name!r} ran, but its result cannot be saved: {exc}. A step's function must return "
            "a JSON value (dict, list, str, int, float, bool or None); the step is recorded as failed "
            "with this message, and is not run again"
        ) from None
    await save(state)
    return _recorded(state, name, scope, state._step_record(name, scope))


class Stepping:
    """The Store contract's durable steps: :meth:`astep` and its sync twin :meth:`step`."""

    async def asave(self, state: State, *, lease: Lease | None = None) -> None:
        raise NotImplementedError

    async def astep(
        self,
        state: State,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Callable[[ToolContext], Any] | None = None,
        idempotent: bool = False,
        lease: Lease | None = None,
    ) -> Any:
        """Run ``fn(*args)`` once as the durable step ``name`` of ``state`` and return its
        result: a sync ``fn`` runs in a worker thread, an async one is awaited. A parameter
        of ``fn`` annotated :class:`~statekeep.ToolContext` gets the step's context: its
        stable ``idempotency_key`` (recorded with the step's start: the same in every
        process), to pass to the services ``fn`` changes, ``attempt``, ``name`` (the step's),
        and ``call_id`` (``"step:" + name``; for ``ctx.step``, the tool call's id).

        The step's start is saved before ``fn`` runs (with everything else ``state`` holds
        unsaved), and its result as soon as ``fn`` returns. Called again (on the State loaded
        in a new process, after a crash or a restart), a step whose result is recorded
        returns it without running ``fn``; one whose ``fn`` raised raises
        :class:`StepFailedError` again (the first time too, from the error). Names are unique
        per State, and a loaded State's recorded steps must be called in the order they were
        recorded (ValueError naming both steps otherwise; nothing recorded).

        A step started and never ended (the process died while ``fn`` ran) is in doubt when
        called again: ``reconcile(ctx)`` (sync or async) says whether it ran: a result (the
        step's, recorded with ``reconciled: true``) or :data:`~statekeep.NotRun` (``fn`` runs
        again with the same key, one attempt more); ``idempotent=True`` runs ``fn`` again
        with the same key (also when ``reconcile`` raises). Without either (or when
        ``reconcile`` raises), the step is recorded ``unknown`` and :class:`StepInDoubtError`
        is raised, then and on every later call: ``fn`` never runs again by accident.

        ``fn`` must return a JSON value: otherwise TypeError saying so, and the step is
        recorded as failed (not done). ``lease=``: saves with that lease (see :meth:`asave`).

        Durable on return (as the store's :meth:`asave`): the step's end, and with it
        everything ``state`` held before the call. On an error of a save, what that save
        says (nothing of the step is lost: the next save sends it).
        """

        async def save(held: State) -> None:
            await self.asave(held, lease=lease)

        match_incarnation(self, state)  # before the step's key is made from it
        return await run_step(state, name, fn, args, save=save, reconcile=reconcile, idempotent=idempotent)

    def step(
        self,
        state: State,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Callable[[ToolContext], Any] | None = None,
        idempotent: bool = False,
        lease: Lease | None = None,
    ) -> Any:
        """Sync :meth:`astep`, with the same rules and durability: it runs on an event loop
        of its own (never statekeep's private one), on a thread of its own when called inside
        a running event loop (which it blocks meanwhile)."""
        work = self.astep(state, name, fn, *args, reconcile=reconcile, idempotent=idempotent, lease=lease)
        if not _in_a_loop():
            return asyncio.run(work)
        with ThreadPoolExecutor(1, thread_name_prefix="statekeep-step") as pool:
            # In the caller's context: its OpenTelemetry span stays the step's parent.
            return pool.submit(contextvars.copy_context().run, asyncio.run, work).result()


def _in_a_loop() -> bool:
    """Whether this thread runs an event loop (asyncio's, or trio's)."""
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_trio_token()
        return True
    except RuntimeError:
        return False
