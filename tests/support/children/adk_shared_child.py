"""Writes to a session with ``app:``/``user:`` state through StatekeepSessionService and
hangs in the middle: run by tests/adapters/test_adk_shared.py in a process of its own:

    python -m tests.support.children.adk_shared_child KIND PATH MODE

KIND ``sqlite`` or ``file`` (the store at PATH, namespace ``adapted``); MODE ``create``
(session ``s`` of app ``a``, user ``u``, with ``{"k": 1, "user:plan": "pro"}``) or
``append`` (session ``s`` made, then event ``e1`` with ``{"k": 1, "user:lang": "fr",
"app:v": 7}``). The first write to the user's state prints ``HANG`` and blocks forever
(the test kills the process there: the session is written, the user state not).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

from statekeep import FileStore, SQLiteStore, Store
from statekeep.adapters._adk_layout import user_id_of
from statekeep.adapters.adk import StatekeepSessionService


def hanging(base: type[Store]) -> type[Store]:
    class Hanging(base):  # type: ignore[valid-type, misc]
        async def awrite(
            self, state_id: str, entries: Any, snapshot: Any, *, expect_next: int | None = None, **kwargs: Any
        ) -> None:
            if state_id == user_id_of("a", "u"):
                print("HANG", flush=True)
                await asyncio.Event().wait()
            await super().awrite(state_id, entries, snapshot, expect_next=expect_next, **kwargs)

    return Hanging


async def main(kind: str, path: str, mode: str) -> None:
    store = hanging(SQLiteStore if kind == "sqlite" else FileStore)(path, namespace="adapted")
    service = StatekeepSessionService(store)
    if mode == "create":
        await service.create_session(
            app_name="a", user_id="u", session_id="s", state={"k": 1, "user:plan": "pro"}
        )
    else:
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        delta = {"k": 1, "user:lang": "fr", "app:v": 7}
        await service.append_event(
            session, Event(id="e1", author="user", invocation_id="i", actions=EventActions(state_delta=delta))
        )
    print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
