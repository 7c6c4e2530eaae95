"""Compactor: when the reference loop compacts a State, and how it gets the summary."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from .._run.state import State
from .._runtime.callerloop import worker_thread

#: Turns the messages a compaction replaces into the summary the model reads instead.
Summarize = Callable[[list[dict[str, Any]]], str | Awaitable[str]]


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A cheap estimate of the tokens ``messages`` cost a model: one per four bytes of their
    JSON encoding, rounded up. Rough (a tokenizer would differ by model), but it grows as the
    context does, which is what a bound needs."""
    return -(-len(orjson.dumps(messages, default=str)) // 4)


@dataclass(frozen=True)
class Compactor:
    """Compacts a State's messages when they grow past a bound: give it to
    ``Agent(..., compact=Compactor(...))``.

    Before each model request, the agent estimates the context the model would get (the
    system prompt and :attr:`State.messages`, with :meth:`estimate`: the byte count of their
    JSON, divided by four). When it passes ``max_tokens``, the agent calls
    ``summarize`` with the messages to replace (all but the latest ``keep``, with the
    summary of an earlier compaction first, if there is one; more are kept where the cut
    would separate a reply's tool calls from their results) and records what it returns
    with :meth:`State.compact`, saved like every other entry before the request is sent.

    ``summarize`` is a plain or async function (a plain one runs in a worker thread, as
    plain models do) returning a non-empty str; typically it asks a model for a summary
    that keeps what the run needs (the task, facts found, decisions, open questions). An
    exception it raises ends the run as a model's would. Choose ``keep`` so that the kept
    messages stay well below ``max_tokens``: when there is nothing left to replace, no
    compaction is made and the request is sent as it is.
    """

    max_tokens: int
    summarize: Summarize
    keep: int = 4

    #: The estimate the bound is checked against (see :func:`estimate_tokens`).
    estimate = staticmethod(estimate_tokens)

    def __post_init__(self) -> None:
        if type(self.max_tokens) is not int or self.max_tokens < 1:
            raise ValueError(f"Compactor(max_tokens=...) must be a positive int, got {self.max_tokens!r}")
        if type(self.keep) is not int or self.keep < 0:
            raise ValueError(
                f"Compactor(keep=...) must be an int >= 0 (the latest messages kept as they are), "
                f"got {self.keep!r}"
            )
        if not callable(self.summarize):
            raise TypeError(
                "Compactor(summarize=...) must be a function taking the messages to replace and "
                f"returning the summary, got {type(self.summarize).__name__}"
            )

    async def compact(self, state: State, system: str | None = None) -> bool:
        """Compact ``state`` if the context its next model request would get passes
        ``max_tokens`` (``system``: the system prompt sent before the messages); True if a
        compaction entry was added (not saved: the caller saves it)."""
        context = list(state.messages)
        if system is not None:
            context.insert(0, {"role": "system", "content": system})
        if self.estimate(context) <= self.max_tokens:
            return False
        point = state._compaction_point(self.keep)
        if point is None:
            return False
        through, replaced = point
        summary = await self._summary(orjson.loads(orjson.dumps(replaced)))  # a copy to keep
        if not isinstance(summary, str):
            raise TypeError(f"Compactor's summarize returned {type(summary).__name__}; it must return a str")
        state.compact(summary, through=through)
        return True

    async def _summary(self, messages: list[dict[str, Any]]) -> object:
        fn = self.summarize
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            got: object = fn(messages)
        else:
            got = await worker_thread(fn, messages)
        if inspect.isawaitable(got):
            got = await got
        return got
