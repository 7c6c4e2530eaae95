"""A workflow of three durable steps that tests/store/test_steps_crash.py kills with SIGKILL
at one point and then runs again, from the top, in a new process.

Run as ``python steps_child.py STORE TARGET LEDGER STATE_ID [KILL_AT]``: STORE is ``file``,
``sqlite``, ``postgres`` or ``redis`` (TARGET: the folder, the database file, the schema
or the key prefix; STEPS_URL in the environment: the server's), LEDGER
the side file each step's body appends one line to (``name key``, fsynced) when it runs.
KILL_AT (``step:point``) kills the process at that point of that step:

- ``before-start``: before the save of the step's start;
- ``after-start``: once its start is saved, before its body runs;
- ``effect``: once its body's line is in the ledger, before its end is saved;
- ``after-end``: once its end is saved.

The steps: ``charge`` (idempotent), ``ship`` (reconcile: finds its key in the ledger) and
``notify`` (neither). The last line printed is the JSON of what each step gave: its result,
or ``"in doubt"`` / ``"failed"``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from statekeep import (
    FileStore,
    NotRun,
    SQLiteStore,
    State,
    StateNotFoundError,
    StepFailedError,
    StepInDoubtError,
    Store,
    ToolContext,
)

STEPS = ("charge", "ship", "notify")
POINTS = ("before-start", "after-start", "effect", "after-end")

kind, target, ledger, state_id = sys.argv[1:5]
kill_at = sys.argv[5] if len(sys.argv) > 5 else ""
current = {"step": "", "saves": 0}


def point(name: str) -> None:
    if kill_at == f"{current['step']}:{name}":
        os.kill(os.getpid(), signal.SIGKILL)


def killing(base: type[Store]) -> type[Store]:
    class Killing(base):  # type: ignore[valid-type,misc]
        async def asave(self, state: State, **options: Any) -> None:
            first = current["saves"] == 0
            if first:
                point("before-start")
            await super().asave(state, **options)
            current["saves"] += 1
            point("after-start" if first else "after-end")

    return Killing


def open_store() -> Store:
    if kind == "file":
        return killing(FileStore)(target)
    if kind == "sqlite":
        return killing(SQLiteStore)(target)
    if kind == "redis":
        from statekeep.stores import RedisStore

        return killing(RedisStore)(os.environ["STEPS_URL"], prefix=target)
    from statekeep.stores import PostgresStore

    return killing(PostgresStore)(os.environ["STEPS_URL"], schema=target)


def body(name: str, ctx: ToolContext) -> dict[str, str]:
    with open(ledger, "a") as f:
        f.write(f"{name} {ctx.idempotency_key}\n")
        f.flush()
        os.fsync(f.fileno())
    point("effect")
    return {"done": name, "key": ctx.idempotency_key}


def shipped(ctx: ToolContext) -> Any:
    """The ship step's reconcile: did a body with this key write its line?"""
    lines = Path(ledger).read_text().splitlines() if Path(ledger).exists() else []
    if f"ship {ctx.idempotency_key}" in lines:
        return {"done": "ship", "key": ctx.idempotency_key}
    return NotRun


def charge(ctx: ToolContext) -> dict[str, str]:
    return body("charge", ctx)


def ship(ctx: ToolContext) -> dict[str, str]:
    return body("ship", ctx)


def notify(ctx: ToolContext) -> dict[str, str]:
    return body("notify", ctx)


OPTIONS: dict[str, dict[str, Any]] = {
    "charge": {"idempotent": True},
    "ship": {"reconcile": shipped},
    "notify": {},
}
FUNCTIONS = {"charge": charge, "ship": ship, "notify": notify}

with open_store() as store:
    try:
        state = store.load(state_id)
    except StateNotFoundError:
        state = State("a workflow of steps", id=state_id)
    got: dict[str, Any] = {}
    for name in STEPS:
        current.update(step=name, saves=0)
        try:
            got[name] = store.step(state, name, FUNCTIONS[name], **OPTIONS[name])
        except StepInDoubtError:
            got[name] = "in doubt"
        except StepFailedError:
            got[name] = "failed"
    print(json.dumps(got))
