"""The reference agent loop, and saving as it goes.

- the loop: scripted replies drive tool calls (plain and async tools), tool schemas come from
  signatures, tool and model errors, ``limit``, finished States, the system prompt, sync and
  async runs;
- it saves as it goes: while a tool or the model runs, the store already holds every step.

Saving, loading and repairing a State: tests/run/test_resume.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import traceback
from typing import Any, Literal

import pytest

from statekeep import (
    Agent,
    MemoryStore,
    Reply,
    ScriptedModel,
    State,
    Store,
    Tool,
    agent_info,
)
from tests.support.agents import call, kinds, lookup, no_warnings, t1


def drive(agent: Agent, state: State, mode: str) -> Any:
    """Run ``agent`` on ``state`` with ``agent.run`` or with ``agent.arun`` on a fresh loop."""
    if mode == "run":
        return agent.run(state)
    return asyncio.run(agent.arun(state))


async def fetch(url: str, timeout: float = 1.0) -> dict[str, Any]:
    """Fetch a page."""
    await asyncio.sleep(0)
    return {"url": url, "status": 200}


# -- the loop ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_scripted_replies_drive_plain_and_async_tools(mode: str) -> None:
    model = ScriptedModel(
        [
            Reply(
                "Looking.", [call("c1", "lookup", city="Paris"), call("c2", "fetch", url="https://x.test")]
            ),
            Reply("Both done.", [call("c3", "lookup", city="Lyon")], usage={"in": 3}, stop_reason="tool_use"),
            "Chez Janou, Paris.",
        ]
    )
    state = State("Find a table")
    answer = drive(Agent(model, tools=[lookup, fetch]), state, mode)

    assert answer == "Chez Janou, Paris."
    assert state.finished and state.answer == answer and state.stopped_by == "finish" and state.turn == 3
    assert kinds(state.history) == [
        "task",
        "run_start",
        "model_request",
        "model_reply",
        "tool_result",
        "tool_result",
        "model_request",
        "model_reply",
        "tool_result",
        "model_request",
        "model_reply",
        "stop",
    ]
    results = [e for e in state.history if e["kind"] == "tool_result"]
    assert [(r["call_id"], r["name"], r["output"], r["is_error"], r["outcome"]) for r in results] == [
        ("c1", "lookup", "Paris: Chez Janou", False, "done"),
        ("c2", "fetch", {"url": "https://x.test", "status": 200}, False, "done"),
        ("c3", "lookup", "Lyon: Chez Janou", False, "done"),
    ]
    reply = state.history[7]
    assert reply["usage"] == {"in": 3} and reply["stop_reason"] == "tool_use"
    # The model saw each result before its next reply.
    assert len(model.calls) == 3
    assert model.calls[1][-2:] == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "lookup",
            "content": "Paris: Chez Janou",
            "is_error": False,
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "name": "fetch",
            "content": {"url": "https://x.test", "status": 200},
            "is_error": False,
        },
    ]
    assert model.calls[2] == state.messages[:-1]
    run_start = state.history[1]["agent"]
    assert run_start == agent_info("agent", "scripted", tools=["fetch", "lookup"])


async def test_arun_awaited_in_a_running_loop() -> None:
    store = MemoryStore()
    state = State("async")
    model = ScriptedModel([Reply("", [call("c1", "fetch", url="u")]), "done"])
    assert await Agent(model, tools=[fetch], store=store).arun(state) == "done"
    assert state.finished
    assert await store.aload(state.id) == state


def search(
    city: str,
    limit: int = 5,
    tags: list[str] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    *rest: Any,
    **extra: Any,
) -> list[str]:
    """Find restaurants in a city.

    Longer notes that are not part of the description.
    """
    return []


async def reserve(place: str, when: float, confirm: bool, note, seats: tuple[int, ...] = ()) -> dict:  # type: ignore[no-untyped-def]
    """Reserve a table."""
    return {}


def nodoc(x: int) -> int:
    return x


def test_tool_schema_from_signature() -> None:
    assert Tool.from_function(search).schema == {
        "name": "search",
        "description": "Find restaurants in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "limit": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["fast", "slow"]},
            },
            "required": ["city"],
        },
    }
    assert Tool.from_function(reserve).schema == {
        "name": "reserve",
        "description": "Reserve a table.",
        "parameters": {
            "type": "object",
            "properties": {
                "place": {"type": "string"},
                "when": {"type": "number"},
                "confirm": {"type": "boolean"},
                "note": {},
                "seats": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["place", "when", "confirm", "note"],
        },
    }
    assert Tool.from_function(nodoc).schema["description"] == ""


def test_model_receives_the_tool_schemas() -> None:
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        seen.append(tools)
        return Reply("done")

    Agent(model, tools=[search, reserve]).run(State("schemas"))
    assert seen == [[Tool.from_function(search).schema, Tool.from_function(reserve).schema]]


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_tool_that_raises_gives_an_error_result_and_the_run_continues(mode: str) -> None:
    def flaky(x: int) -> int:
        """Fails."""
        raise ValueError(f"bad x {x}")

    async def aflaky() -> None:
        """Fails too."""
        raise KeyError("gone")

    model = ScriptedModel([Reply("", [call("c1", "flaky", x=3), call("c2", "aflaky")]), "recovered"])
    state = State("errors")
    assert drive(Agent(model, tools=[flaky, aflaky]), state, mode) == "recovered"
    results = [e for e in state.history if e["kind"] == "tool_result"]
    assert [(r["output"], r["is_error"], r["outcome"]) for r in results] == [
        ("ValueError: bad x 3", True, "error"),
        ("KeyError: 'gone'", True, "error"),
    ]
    assert model.calls[1][-2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "flaky",
        "content": "ValueError: bad x 3",
        "is_error": True,
    }
    assert state.finished and "error" not in kinds(state.history)


def test_a_tool_returning_what_json_cannot_hold_gives_an_error_result_and_the_run_goes_on(
    store: Store,
) -> None:
    effects = []

    def tag(label: str) -> set[str]:
        """Tag something; returns a set, which JSON cannot hold."""
        effects.append(label)
        return {label}

    model = ScriptedModel([Reply("", [call("c1", "tag", label="x")]), "tagged"])
    state = State("tag it", id="tagging")
    assert Agent(model, tools=[tag], store=store).run(state) == "tagged"
    assert effects == ["x"] and state.finished
    result = state.history[4]
    assert (result["kind"], result["call_id"], result["is_error"]) == ("tool_result", "c1", True)
    assert result["outcome"] == "done"  # the tool ran: its effects happened
    assert "ran, but its result cannot be saved" in result["output"] and "is a set" in result["output"]
    assert model.calls[1][-1]["content"] == result["output"]  # the model is told
    loaded = store.load("tagging")
    assert loaded == state and loaded.history[4]["outcome"] == "done"


def test_a_reply_json_cannot_hold_is_recorded_as_a_model_error_and_the_state_stays_saveable(
    store: Store,
) -> None:
    model = ScriptedModel([Reply("", [call("c1", "lookup", city={"Paris"})])])
    state = State("bad args", id="bad-args")
    with pytest.raises(TypeError, match=r"State.add_reply\(\) tool_calls\[0\]\['args'\]\['city'\] is a set"):
        Agent(model, tools=[lookup], store=store).run(state)
    assert kinds(state.history)[-3:] == ["model_request", "model_error", "error"]
    store.save(state)  # nothing unsaveable entered the history
    assert store.load("bad-args") == state


def test_unknown_tool_gives_an_error_result() -> None:
    model = ScriptedModel([Reply("", [call("c1", "teleport", to="Mars")]), "ok"])
    state = State("unknown tool")
    assert Agent(model, tools=[lookup, t1]).run(state) == "ok"
    result = state.history[4]
    assert result["kind"] == "tool_result" and result["call_id"] == "c1" and result["name"] == "teleport"
    assert result["is_error"] is True and result["outcome"] == "error"
    assert "unknown tool 'teleport'" in result["output"] and "lookup" in result["output"]
    assert model.calls[1][-1]["is_error"] is True

    # With no tools at all, the message says so.
    state = State("no tools")
    Agent(ScriptedModel([Reply("", [call("c1", "x")]), "ok"])).run(state)
    assert state.history[4]["output"] == "unknown tool 'x'; available: none"


def test_limit_stops_the_run_and_the_state_can_run_again(store: Store) -> None:
    looping = [Reply(f"turn {i}", [call(f"c{i}", "lookup", city="Paris")]) for i in range(3)]
    state = State("loop", id="limited")
    model = ScriptedModel(looping)
    assert Agent(model, tools=[lookup], store=store, limit=2).run(state) is None
    assert state.stopped_by == "limit" and not state.finished and state.turn == 2 and state.answer is None
    assert state.history[-1] == {**state.history[-1], "kind": "stop", "by": "limit", "answer": None}
    assert len(model.calls) == 2
    assert store.read("limited").snapshot["stopped_by"] == "limit"  # type: ignore[index]

    resumed = store.load("limited")
    assert resumed == state
    model = ScriptedModel([Reply("", [call("c9", "lookup", city="Lyon")]), "done"])
    with no_warnings():
        assert Agent(model, tools=[lookup], store=store, limit=2).run(resumed) == "done"
    assert resumed.finished and resumed.turn == 4
    assert kinds(resumed.history).count("run_start") == 2
    assert store.load("limited") == resumed


def test_a_finished_state_cannot_run_again(store: Store) -> None:
    state = State("once", id="once")
    Agent(ScriptedModel(["done"]), store=store).run(state)
    before = list(state.history)
    model = ScriptedModel(["again"])
    with pytest.raises(ValueError, match="finished"):
        Agent(model, store=store).run(state)
    with pytest.raises(ValueError, match="finished"):
        Agent(model, store=store).run(store.load("once"))
    assert model.calls == [] and state.history == before
    assert store.read("once").entries == before  # type: ignore[union-attr]


def test_the_system_prompt_is_the_first_message_the_model_sees() -> None:
    model = ScriptedModel([Reply("", [call("c1", "lookup", city="Oslo")]), "done"])
    state = State("with a system prompt")
    Agent(model, tools=[lookup], system="You are terse.").run(state)
    for messages in model.calls:
        assert messages[0] == {"role": "system", "content": "You are terse."}
        assert messages[1] == {"role": "user", "content": "with a system prompt"}
    # The system prompt is not part of the history: the run_start records its hash only.
    assert all(m["role"] != "system" for m in state.messages)
    sha = hashlib.sha256(b"You are terse.").hexdigest()
    assert state.history[1]["agent"]["system_sha256"] == sha

    model = ScriptedModel(["done"])
    Agent(model).run(State("no system prompt"))
    assert model.calls[0] == [{"role": "user", "content": "no system prompt"}]


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_model_returning_a_dict_or_awaitable_works(mode: str) -> None:
    replies = iter(
        [
            {"text": "dict", "tool_calls": [call("c1", "lookup", city="Rome")], "usage": {"out": 1}},
            {"text": "final"},
        ]
    )

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        return next(replies)

    state = State("dicts")
    assert drive(Agent(model, tools=[lookup]), state, mode) == "final"
    assert state.history[1]["agent"]["model"] == "model"
    assert state.history[3]["text"] == "dict" and state.history[3]["usage"] == {"out": 1}
    assert state.history[4]["output"] == "Rome: Chez Janou"

    state = State("sync dict")
    assert Agent(lambda m, t: {"text": "plain"}).run(state) == "plain"


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_model_that_raises_records_the_error_saves_and_reraises(store: Store, mode: str) -> None:
    calls = 0

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Reply("", [call("c1", "lookup", city="Nice")])
        raise RuntimeError("model down")

    state = State("model fails", id=f"fails-{mode}")
    with pytest.raises(RuntimeError, match="model down"):
        drive(Agent(model, tools=[lookup], store=store), state, mode)
    assert kinds(state.history)[-3:] == ["model_request", "model_error", "error"]
    assert state.history[-2]["message"] == "RuntimeError: model down"
    assert state.history[-1]["message"] == "RuntimeError: model down"
    assert not state.waiting_on_model and state.stopped_by == "error" and not state.finished
    record = store.read(state.id)
    assert record is not None and record.entries == state.history
    assert record.snapshot["stopped_by"] == "error"  # type: ignore[index]
    loaded = store.load(state.id)
    assert loaded == state  # nothing to repair

    # The State can run again.
    with no_warnings():
        assert Agent(ScriptedModel(["back"], name="model"), tools=[lookup], store=store).run(loaded) == "back"
    assert store.load(state.id) == loaded and loaded.finished


def failing_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
    raise ValueError("model down")


def test_an_error_from_run_has_no_false_cause() -> None:
    with pytest.raises(ValueError, match="model down") as info:
        Agent(failing_model).run(State("t"))
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "no running event loop" not in "".join(traceback.format_exception(info.value))


async def test_an_error_from_run_inside_a_running_loop_has_no_false_cause() -> None:
    with pytest.raises(ValueError, match="model down") as info:
        Agent(failing_model).run(State("t"))
    assert info.value.__context__ is None


def test_running_the_same_new_state_twice_says_to_load_delete_or_use_a_new_id(store: Store) -> None:
    Agent(ScriptedModel(["first"]), store=store).run(State("weather", id="weather-1"))
    again = State("weather", id="weather-1")
    with pytest.raises(ValueError, match="already exists") as info:
        Agent(ScriptedModel(["second"]), store=store).run(again)
    message = str(info.value)
    assert "store.load('weather-1')" in message and "store.delete('weather-1')" in message
    assert "new id" in message and "create=" not in message
    with pytest.raises(ValueError, match="already exists") as info:
        store.save(State("weather", id="weather-1"))
    assert "store.load('weather-1')" in str(info.value) and "create=" not in str(info.value)
    assert store.load("weather-1").answer == "first"


async def test_saving_a_deleted_state_says_it_was_deleted(store: Store) -> None:
    state = State("t", id="gone")
    store.save(state)
    store.delete("gone")
    state.add_user("more")
    for save in (store.save, store.asave):
        with pytest.raises(LookupError, match="'gone' was deleted") as info:
            result = save(state)
            if asyncio.iscoroutine(result):
                await result
        assert "create=" not in str(info.value) and "new State" in str(info.value)
    assert store.read("gone") is None


# -- saves as it goes -------------------------------------------------------------------


def _saved_problems(record: Any, state: State, what: str) -> list[str]:
    """Why ``record`` is not everything ``state`` holds so far (with a fitting snapshot)."""
    if record is None:
        return [f"{what}: nothing saved"]
    problems = []
    if record.entries != state.history:
        problems.append(f"{what}: saved {kinds(record.entries)} but the State holds {kinds(state.history)}")
    if record.snapshot != state.snapshot():
        problems.append(f"{what}: snapshot {record.snapshot} != {state.snapshot()}")
    return problems


@pytest.mark.parametrize(("mode", "flavour"), [("run", "async"), ("arun", "async"), ("arun", "sync")])
def test_the_store_holds_each_step_before_the_next_one_starts(store: Store, mode: str, flavour: str) -> None:
    state = State("saved as it goes", id=f"steps-{mode}-{flavour}")
    problems: list[str] = []
    replies = iter(
        [
            Reply("", [call("c1", "step", n=1), call("c2", "step", n=2)]),
            Reply("", [call("c3", "step", n=3)]),
            Reply("done"),
        ]
    )

    def check_tool(record: Any, n: int) -> None:
        problems.extend(_saved_problems(record, state, f"tool call c{n}"))
        replies_with_call = [
            e
            for e in (record.entries if record else [])
            if e["kind"] == "model_reply" and f"c{n}" in [c["id"] for c in e["tool_calls"]]
        ]
        if len(replies_with_call) != 1:
            problems.append(f"tool call c{n}: its model_reply is not saved")

    def check_model(record: Any) -> None:
        problems.extend(_saved_problems(record, state, "model call"))
        if record is None or record.entries[-1]["kind"] != "model_request":
            problems.append("model call: the model_request is not the last saved entry")

    if flavour == "async":

        async def step(n: int) -> str:
            """A step."""
            check_tool(await store.aread(state.id), n)
            return f"step {n}"

        async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
            check_model(await store.aread(state.id))
            return next(replies)

    else:

        def step(n: int) -> str:  # type: ignore[misc]
            """A step."""
            check_tool(store.read(state.id), n)
            return f"step {n}"

        def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:  # type: ignore[misc]
            check_model(store.read(state.id))
            return next(replies)

    assert drive(Agent(model, tools=[step], store=store), state, mode) == "done"
    assert problems == []
    results = [e for e in state.history if e["kind"] == "tool_result"]
    assert [(r["output"], r["outcome"]) for r in results] == [(f"step {n}", "done") for n in (1, 2, 3)]
    assert _saved_problems(store.read(state.id), state, "after the run") == []
