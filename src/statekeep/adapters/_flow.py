"""An adapter method written once for the sync and the async API: as a *flow*.

A flow is a generator that yields the store calls it needs (:class:`Call`) and gets their
results back, or their exceptions thrown in (it decides: retry, or let it go up); a flow
that returns items one by one yields them wrapped in :class:`Emit`; several flows whose
results it wants at once, in :class:`Together`. :func:`drive` runs a flow with the stores'
sync methods and :func:`adrive` awaits their native coroutines (:func:`drive_each` and
:func:`adrive_each` for a flow that emits). Flows compose with ``yield from``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """``target.name(*args, **kwargs)``, or ``await target.aname(...)`` from :func:`adrive`.
    ``rows``: the method is an iterator (``iter_states``): its items, as a list."""

    target: Any
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    rows: bool = False


@dataclass(frozen=True, slots=True)
class Emit:
    """Items a flow hands to its caller on the way (a listing), before it goes on."""

    items: list[Any]


@dataclass(frozen=True, slots=True)
class Together:
    """Flows whose results (a list, in their order) are wanted at once: :func:`drive` runs
    them one after the other, :func:`adrive` concurrently (``asyncio.gather``)."""

    flows: list[Generator[Any, Any, Any]]


#: A flow that returns ``T``: it yields calls (and emits), and is sent their results.
Flow = Generator[Call | Together | Emit, Any, T]


def call(step: Call | Together) -> Any:
    """Make the call with the sync method (or run the flows)."""
    if isinstance(step, Together):
        return [drive(flow) for flow in step.flows]
    method = getattr(step.target, step.name)
    if step.rows:
        return list(method(*step.args, **step.kwargs))
    return method(*step.args, **step.kwargs)


async def acall(step: Call | Together) -> Any:
    """Make the call, awaiting the async twin of the method (or run the flows)."""
    if isinstance(step, Together):
        return await asyncio.gather(*(adrive(flow) for flow in step.flows))
    method = getattr(step.target, "a" + step.name)
    if step.rows:
        return [row async for row in method(*step.args, **step.kwargs)]
    return await method(*step.args, **step.kwargs)


def _returning(flow: Flow[T], box: list[T]) -> Flow[None]:
    # The same steps as ``flow``; its return value goes into ``box`` (an async generator
    # cannot return one, so each driver below runs flows this way).
    box.append((yield from flow))


def drive(flow: Flow[T]) -> T:
    """Run ``flow`` with the stores' sync methods; its result (it must emit nothing)."""
    box: list[T] = []
    for _ in drive_each(_returning(flow, box)):
        raise AssertionError("an emitting flow is run by drive_each")
    return box[0]


async def adrive(flow: Flow[T]) -> T:
    """Run ``flow`` awaiting the stores' native coroutines; its result."""
    box: list[T] = []
    async for _ in adrive_each(_returning(flow, box)):
        raise AssertionError("an emitting flow is run by adrive_each")
    return box[0]


def drive_each(flow: Flow[None]) -> Iterator[Any]:
    """The items ``flow`` emits, running it with the stores' sync methods as they are taken."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Emit):
                yield from step.items
                step = next(flow)
                continue
            try:
                result = call(step)
            except Exception as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration:
        return
    finally:
        flow.close()  # run its finally blocks now if the caller stopped early or was cancelled


async def adrive_each(flow: Flow[None]) -> AsyncIterator[Any]:
    """The items ``flow`` emits, awaiting the stores' native coroutines."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Emit):
                for item in step.items:
                    yield item
                step = next(flow)
                continue
            try:
                result = await acall(step)
            except Exception as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration:
        return
    finally:
        flow.close()  # run its finally blocks now if the caller stopped early or was cancelled
