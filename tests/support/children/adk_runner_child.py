"""A real ADK ``Runner`` with a scripted model and a function tool, its session kept by
``StatekeepSessionService``; run by tests/adapters/test_adk_runner.py in a process of its own:

    python -m tests.support.children.adk_runner_child STORE_URL TURN [TURN ...] [--hang-at N]

Each TURN is one user message (``turn N``): the model calls the tool ``record(turn=N)``, then
answers ``done N``. The tool counts its calls in ``user:calls`` and sets ``last`` in the
session state. With ``--hang-at N`` the tool of turn N prints ``HANG`` and blocks forever
(the test kills the process there). Prints ``DONE`` once every turn has run.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from statekeep import open_store
from statekeep.adapters.adk import StatekeepSessionService

APP, USER, SESSION = "shop", "ann", "conversation-1"


class ScriptedModel(BaseLlm):
    """A model that calls ``record`` for the turn in the last user text, then answers."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        parts = last.parts or []
        if any(part.function_response is not None for part in parts):
            turn = next(p.function_response.response for p in parts if p.function_response)["turn"]  # type: ignore[index, union-attr]
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"done {turn}")]))
            return
        text = next(part.text for part in parts if part.text)
        turn = int(text.split()[-1])
        call = types.FunctionCall(name="record", args={"turn": turn}, id=f"call-{turn}")
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


HANG_AT: int | None = None


def record(turn: int, tool_context: ToolContext) -> dict[str, Any]:
    """Record that turn ``turn`` ran."""
    if turn == HANG_AT:
        print("HANG", flush=True)
        threading.Event().wait()  # killed here
    tool_context.state["user:calls"] = tool_context.state.get("user:calls", 0) + 1
    tool_context.state["last"] = turn
    return {"turn": turn}


async def main(url: str, turns: list[int]) -> None:
    store = open_store(url)
    try:
        service = StatekeepSessionService(store)
        agent = LlmAgent(name="clerk", model=ScriptedModel(), instruction="Record each turn.", tools=[record])
        runner = Runner(agent=agent, app_name=APP, session_service=service)
        if await service.get_session(app_name=APP, user_id=USER, session_id=SESSION) is None:
            await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        for turn in turns:
            message = types.Content(role="user", parts=[types.Part(text=f"turn {turn}")])
            async for _ in runner.run_async(user_id=USER, session_id=SESSION, new_message=message):
                pass
        print("DONE", flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--hang-at" in args:
        at = args.index("--hang-at")
        HANG_AT = int(args[at + 1])
        del args[at : at + 2]
    asyncio.run(main(args[0], [int(turn) for turn in args[1:]]))
