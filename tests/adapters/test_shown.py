"""statekeep's own views of a State an adapter wrote: ``store.load()`` says which adapter and
how to read it (on every store); ``statekeep show`` and the viewer render each adapter's
entries readably (alpineagents replies, stops and token usage; LangGraph checkpoints
decoded, never base64; OpenAI Agents items)."""

from __future__ import annotations

import asyncio
import operator
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from statekeep import FileStore, Store, UnsupportedFormatError
from statekeep.cli import main
from statekeep.web import create_app
from tests.support.frameworks import require_installed
from tests.support.stores import STORE_FACTORIES

require_installed("langgraph", "1.2.22")
require_installed("openai-agents", "0.24.0")
require_installed("alpineagents", "0.7.1")

from alpineagents import Agent, Message, tool  # noqa: E402
from alpineagents import State as AlpineState  # noqa: E402
from alpineagents.testing import FakeModel, tool_call  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from statekeep.adapters.alpineagents import StatekeepStore  # noqa: E402
from statekeep.adapters.langgraph import StatekeepSaver  # noqa: E402
from statekeep.adapters.openai_agents import StatekeepSession  # noqa: E402


@tool
def add(a: int, b: int) -> int:
    """Add two numbers"""
    return a + b


class Chat(TypedDict):
    messages: Annotated[list[Any], operator.add]
    note: str


def answer(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage("Q3 was up 12 percent")], "note": "answered"}


def save_all(store: Store) -> dict[str, Store]:
    """One State per adapter in ``store``; each adapter's own store, by framework."""
    alpine = StatekeepStore(store)
    agent = Agent(
        model=FakeModel([tool_call("add", a=1, b=2), "It is 3"]),
        store=alpine,
        tools=[add],
        reporter=None,
        human=None,
    )
    agent.run(AlpineState(id="sum-1", messages=[Message.user("What is 1+2?")]))
    saver = StatekeepSaver(store)
    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke(
        {"messages": [HumanMessage("How was Q3?")], "note": ""}, {"configurable": {"thread_id": "q3"}}
    )
    session = StatekeepSession("user-42", store)
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "name": "weather", "arguments": '{"city": "Paris"}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    ]
    asyncio.run(session.add_items(items))
    asyncio.run(session.pop_item())
    return {"alpineagents": alpine.store, "langgraph": saver.store, "openai-agents": session.store}


@pytest.fixture(params=sorted(STORE_FACTORIES))
def shared(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


READ_WITH = {
    ("alpineagents", "sum-1"): ("an alpineagents State", "StatekeepStore(store).load('sum-1')"),
    ("langgraph", "q3"): ("a LangGraph thread", "checkpointer=StatekeepSaver(store)"),
    ("openai-agents", "user-42"): (
        "an OpenAI Agents session",
        "StatekeepSession('user-42', store).get_items()",
    ),
}


def test_load_of_an_adapters_state_names_the_adapter_and_how_to_read_it(shared: Store) -> None:
    stores = save_all(shared)
    for (framework, state_id), (what, how) in READ_WITH.items():
        with pytest.raises(UnsupportedFormatError) as caught:
            stores[framework].load(state_id)
        message = str(caught.value)
        assert what in message and how in message and "damaged" not in message, message


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    with FileStore(tmp_path / "runs") as store:
        save_all(store)
    return tmp_path / "runs"


def show(folder: Path, space: str, state_id: str) -> str:
    result = CliRunner().invoke(main, ["show", state_id, "--store", f"{folder}?namespace={space}"])
    assert result.exit_code == 0, result.output
    return result.output


def test_show_renders_an_alpineagents_run(folder: Path) -> None:
    out = show(folder, "alpineagents", "sum-1")
    assert "add(a=1, b=2)" in out and '"It is 3"' in out  # the reply's tool call, then its text
    assert "add [call_" in out and "done: 3" in out  # the tool result
    assert "agent None · model fake/fake · tools: add" in out
    assert "by until (waiting_for_user)" in out and "(empty)" not in out


def test_show_decodes_langgraph_checkpoints(folder: Path) -> None:
    out = show(folder, "langgraph", "q3")
    with FileStore(folder, namespace="langgraph") as store:
        record = store.read("q3")
    assert record is not None
    blobs = [blob[1] for e in record.entries for blob in (e.get("values") or {}).values()]
    long_ones = [blob for blob in blobs if len(blob) >= 24]
    assert long_ones and not any(blob[:24] in out for blob in long_ones)  # never the base64
    # format 2: the message list as what it appends to the one an earlier entry holds
    assert re.search(
        r'\(step 1, loop\): note="answered", messages=seq \d+\'s \+ \[AIMessage\("Q3 was up 12 percent"\)\]',
        out,
    )
    assert "writes of task" in out


def test_show_renders_openai_items(folder: Path) -> None:
    out = show(folder, "openai-agents", "user-42")
    assert "user: Weather in Paris?" in out
    assert 'calls weather({"city": "Paris"}) [c1]' in out and "output of [c1]: sunny" in out
    assert "assistant: It is sunny." in out and "pop_item: the item at seq 4 was removed" in out


def run_page(folder: Path, space: str, state_id: str) -> str:
    with (
        FileStore(folder, namespace=space) as store,
        TestClient(create_app(store), base_url="http://127.0.0.1") as client,
    ):
        response = client.get(f"/runs/{state_id}")
        assert response.status_code == 200, response.text
        return response.text


def test_the_viewer_renders_adapter_states(folder: Path) -> None:
    alpine = run_page(folder, "alpineagents", "sum-1")
    assert "It is 3" in alpine and "until (waiting_for_user)" in alpine
    with FileStore(folder, namespace="alpineagents") as store:
        saved = store.read("sum-1")
    assert saved is not None
    usage = [e["content"]["usage"] for e in saved.entries if e["kind"] == "model_reply"]
    spent_in, spent_out = (sum(u[key] for u in usage) for key in ("input_tokens", "output_tokens"))
    assert spent_in > 0 and spent_out > 0  # what alpineagents saved, which the page sums
    assert f"{spent_in:,} in · {spent_out:,} out · {spent_in + spent_out:,} total" in alpine

    langgraph = run_page(folder, "langgraph", "q3")
    assert "Q3 was up 12 percent" in langgraph and "How was Q3?" in langgraph
    with FileStore(folder, namespace="langgraph") as store:
        record = store.read("q3")
    assert record is not None
    for entry in record.entries:
        for _, blob in (entry.get("values") or {}).values():
            assert len(blob) < 24 or blob[:24] not in langgraph  # decoded, never shown raw

    openai = run_page(folder, "openai-agents", "user-42")
    assert "user: Weather in Paris?" in openai and "output of [c1]: sunny" in openai
