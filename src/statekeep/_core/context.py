"""What a tool (or a durable step's ``reconcile``) learns about its call: :class:`ToolContext`,
and :data:`NotRun` (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final


@final
class _NotRunType:
    """The type of :data:`NotRun` (one instance)."""

    _instance: _NotRunType | None = None

    def __new__(cls) -> _NotRunType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NotRun"

    def __reduce__(self) -> str:
        return "NotRun"


#: What a ``reconcile`` function returns when the call it checks did not run: the call then
#: runs (again) with the same idempotency key.
NotRun: Final = _NotRunType()


@dataclass(frozen=True)
class ToolContext:
    """The context of one tool call (or durable step), given to a tool that declares a
    parameter annotated ``ToolContext`` and to ``reconcile`` functions. The model never
    sees it.

    ``idempotency_key``: stable for this call across crashes and processes (see
    :func:`statekeep.idempotency_key`): pass it to the services the tool changes, so a call
    run again is recognised there. ``attempt``: 1, plus one for each time the call was found
    in doubt after a crash and run again (counted from the history's ``tool_resume`` entries,
    each saved before the call ran again: no extra write).
    """

    state_id: str
    call_id: str
    idempotency_key: str
    attempt: int = 1
    #: The tool's name and the call's arguments, as the model gave them.
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    #: Runs a durable step inside the call (set by the loop; see :meth:`step`).
    _stepper: Callable[..., Any] | None = field(default=None, repr=False, compare=False)

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        reconcile: Callable[[ToolContext], Any] | None = None,
        idempotent: bool = False,
    ) -> Any:
        """Run ``fn(*args)`` once as a durable step of this call, named ``name`` (unique
        within the call): its start is saved before ``fn`` runs and its result at once after,
        and the call run again after a crash gets the recorded result back without running
        ``fn`` again. A step in doubt (started, its end never saved) follows ``reconcile`` /
        ``idempotent`` as ``store.astep`` says. Durable on return: the step's end, saved."""
        if self._stepper is None:
            raise RuntimeError(
                "ToolContext.step() needs a call run by an Agent with a store: there is nowhere to "
                "record the step"
            )
        return await self._stepper(name, fn, *args, reconcile=reconcile, idempotent=idempotent)
