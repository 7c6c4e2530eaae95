"""StatekeepSession under the Agents SDK's compaction session wrapper,
``OpenAIResponsesCompactionSession``: items added, compacted (by hand and by the Runner after
a turn), read back, and read again through a new session object on the same store.

No network: the Responses ``compact`` endpoint and the model are fakes that answer as the API
does (the compacted output is the user messages, then one ``compaction`` item), and tracing is
off."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, Usage
from agents.memory import OpenAIResponsesCompactionSession
from agents.models.interface import Model
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from statekeep import MemoryStore, Store
from statekeep._core.records import Record
from statekeep.adapters.openai_agents import StatekeepSession


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


class CompactEndpoint:
    """``client.responses.compact``, answering as the API does: every user message of the
    input, then one opaque compaction item."""

    def __init__(self, extra: Any = None) -> None:
        self.responses = self
        self.requests: list[dict[str, Any]] = []
        self.extra = extra  # a value to put in the compaction item

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        users = [item for item in kwargs.get("input", []) if item.get("role") == "user"]
        n = len(self.requests)
        item = {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"sealed summary {n}"}
        if self.extra is not None:
            item["extra"] = self.extra
        return SimpleNamespace(output=[*users, item], usage=None)

    def client(self) -> AsyncOpenAI:
        return cast(AsyncOpenAI, self)


class Answering(Model):
    """A model that answers each request with the next of ``texts`` (a Responses message)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(input)
        n = len(self.inputs)
        text = ResponseOutputText(type="output_text", text=self.texts[n - 1], annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def wrapped(store: Store, endpoint: CompactEndpoint, **settings: Any) -> OpenAIResponsesCompactionSession:
    return OpenAIResponsesCompactionSession(
        "chat-1",
        StatekeepSession("chat-1", store),
        client=endpoint.client(),
        compaction_mode="input",
        **settings,
    )


async def test_a_compaction_by_hand_replaces_the_items_and_a_new_session_reads_them(store: Store) -> None:
    endpoint = CompactEndpoint()
    session = wrapped(store, endpoint)
    history = [msg("plan a trip"), msg("Where to?", "assistant"), msg("Lisbon"), msg("In May?", "assistant")]
    await session.add_items(history)
    assert await session.get_items() == history

    await session.run_compaction({"force": True})

    assert endpoint.requests[0]["input"] == history  # the stored items were sent as they are
    compacted = [
        msg("plan a trip"),
        msg("Lisbon"),
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "sealed summary 1"},
    ]
    assert await session.get_items() == compacted
    assert await StatekeepSession("chat-1", store).get_items() == compacted  # a new object, same store

    await session.add_items([msg("Yes, May.")])
    again = wrapped(store, CompactEndpoint())  # a new wrapper too: it reads what is stored
    assert await again.get_items() == [*compacted, msg("Yes, May.")]
    assert await again.get_items(limit=2) == [compacted[-1], msg("Yes, May.")]

    # The statekeep history stays append-only: the compaction is a clear and the new items.
    record = await store.aread(StatekeepSession("chat-1", store).state_id)
    assert record is not None
    kinds = [entry["kind"] for entry in record.entries]
    assert kinds == ["session", *["item"] * 4, "clear", *["item"] * 3, "item"]


class Writes(Store):
    """A MemoryStore that counts the writes made to it."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.writes = 0

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        return await self.inner.aread(state_id, since=since)

    async def awrite(self, state_id: str, entries: Any, snapshot: Any, *, create: bool = False) -> None:
        self.writes += 1
        await self.inner.awrite(state_id, entries, snapshot, create=create)


async def test_the_compacted_items_replace_the_old_ones_in_one_write() -> None:
    """A process that dies during a compaction leaves the old items or the new ones, never an
    empty session (the wrapper's own replacement is a clear, then an add: two writes)."""
    store = Writes()
    session = wrapped(store, CompactEndpoint())
    await session.add_items([msg("a"), msg("b", "assistant"), msg("c")])
    store.writes = 0
    await session.run_compaction({"force": True})
    assert store.writes == 1
    assert len(await session.get_items()) == 3  # a, c and the compaction item


async def test_a_compacted_output_statekeep_cannot_store_leaves_the_session_as_it_was(store: Store) -> None:
    session = wrapped(store, CompactEndpoint(extra=float("nan")))
    await session.add_items([msg("a"), msg("b", "assistant")])
    with pytest.raises(TypeError, match="NaN"):
        await session.run_compaction({"force": True})
    assert await StatekeepSession("chat-1", store).get_items() == [msg("a"), msg("b", "assistant")]


async def test_nothing_is_compacted_below_the_wrappers_threshold(store: Store) -> None:
    endpoint = CompactEndpoint()
    session = wrapped(store, endpoint)
    await session.add_items([msg("hi"), msg("hello", "assistant")])
    await session.run_compaction()  # the default decision: ten candidate items or more
    assert endpoint.requests == []
    assert await StatekeepSession("chat-1", store).get_items() == [msg("hi"), msg("hello", "assistant")]


@pytest.mark.parametrize("store", ["memory", "file", "sqlite"], indirect=True)
async def test_the_runner_compacts_after_a_turn_and_the_next_turn_sees_the_compacted_items(
    store: Store,
) -> None:
    endpoint = CompactEndpoint()
    session = wrapped(store, endpoint, should_trigger_compaction=lambda context: True)
    model = Answering("Lisbon is lovely in May.", "Pack light clothes.")
    agent = Agent(name="planner", model=model)
    config = RunConfig(tracing_disabled=True)

    first = await Runner.run(agent, "Where should I go in May?", session=session, run_config=config)
    assert first.final_output == "Lisbon is lovely in May."
    assert len(endpoint.requests) == 1  # the Runner compacted after the turn
    sent = endpoint.requests[0]["input"]
    assert [item.get("role") for item in sent] == ["user", "assistant"]

    stored = await StatekeepSession("chat-1", store).get_items()  # read by a new object
    assert stored == [
        {"role": "user", "content": "Where should I go in May?"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "sealed summary 1"},
    ]

    # A new wrapper and a new StatekeepSession on the same store go on from the compacted items.
    later = wrapped(store, endpoint, should_trigger_compaction=lambda context: False)
    second = await Runner.run(agent, "What should I pack?", session=later, run_config=config)
    assert second.final_output == "Pack light clothes."
    assert model.inputs[1][:2] == stored
    answer: Any = (await later.get_items())[-1]
    assert answer["content"][0]["text"] == "Pack light clothes."
