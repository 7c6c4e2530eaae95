"""Agent(compact=Compactor(...)): the loop compacts before a model request once the estimated
context passes the bound, saves the compaction like every step, and a run loaded by a new
store object sees, and goes on from, what the model saw."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from statekeep import Agent, Compactor, FileStore, Reply, ScriptedModel, SQLiteStore, State, Store
from statekeep._run.history import SUMMARY_INTRO
from statekeep.cli import main
from statekeep.web._render import entries_html
from tests.support.agents import call, kinds

PAGE = "lorem ipsum " * 40  # ~480 bytes: about 120 tokens by the estimate


def page(n: int) -> str:
    """Fetch page n."""
    return f"page {n}: {PAGE}"


def fetching(pages: int, answer: str = "Done.", ids: str = "c") -> ScriptedModel:
    """A model that fetches ``pages`` pages one reply at a time (call ids ``ids`` + n), then answers."""
    return ScriptedModel([*(Reply("", [call(f"{ids}{i}", "page", n=i)]) for i in range(pages)), answer])


class Summaries:
    """A summarize function that records what it was given; sync, or async with ``aio``."""

    def __init__(self) -> None:
        self.given: list[list[dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.given.append(messages)
        return f"summary {len(self.given)} of {len(messages)} messages"

    async def aio(self, messages: list[dict[str, Any]]) -> str:
        await anyio.sleep(0)  # a checkpoint under asyncio and trio alike
        return self(messages)


def drive(agent: Agent, state: State, mode: str) -> Any:
    return agent.run(state) if mode == "run" else asyncio.run(agent.arun(state))


def summarizer(summaries: Summaries, mode: str) -> Any:
    return summaries if mode == "run" else summaries.aio


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_run_that_passes_the_bound_compacts_and_the_model_sees_the_summary(mode: str) -> None:
    summaries = Summaries()
    model = fetching(5)
    compact = Compactor(max_tokens=300, summarize=summarizer(summaries, mode), keep=2)
    agent = Agent(model, tools=[page], compact=compact, system="Be brief.")
    state = State("Read five pages", id="r")
    assert drive(agent, state, mode) == "Done."

    compactions = [e for e in state.history if e["kind"] == "compaction"]
    assert compactions and len(compactions) == len(summaries.given)
    # Each compaction sits just before a request, with what summarize returned.
    for e in compactions:
        assert state.history[e["seq"] + 1]["kind"] == "model_request"
        assert e["summary"].startswith("summary ")
    # The first summary was made of the task and the oldest steps; later ones start from the summary before.
    assert summaries.given[0][0] == {"role": "user", "content": "Read five pages"}
    assert summaries.given[1][0]["content"] == SUMMARY_INTRO + compactions[0]["summary"]
    # The model got the system prompt, the latest summary and the last two messages (a call and its result).
    last = model.calls[-1]
    assert last[0] == {"role": "system", "content": "Be brief."}
    assert last[1]["content"] == SUMMARY_INTRO + compactions[-1]["summary"]
    assert [m["role"] for m in last[2:]] == ["assistant", "tool"]
    assert all(Compactor.estimate(call_messages) <= 300 + 250 for call_messages in model.calls)
    assert state.task == "Read five pages" and state.turn == 6 and state.finished


def test_no_compaction_below_the_bound() -> None:
    summaries = Summaries()
    state = State("Read two pages")
    Agent(fetching(2), tools=[page], compact=Compactor(max_tokens=10_000, summarize=summaries)).run(state)
    assert "compaction" not in kinds(state.history) and summaries.given == []


def test_nothing_to_replace_sends_the_request_as_it_is() -> None:
    summaries = Summaries()
    state = State("Read three pages")
    compact = Compactor(max_tokens=10, summarize=summaries, keep=100)  # keeps everything
    assert Agent(fetching(3), tools=[page], compact=compact).run(state) == "Done."
    assert "compaction" not in kinds(state.history) and summaries.given == []


def test_the_cut_never_separates_tool_calls_from_their_results() -> None:
    summaries = Summaries()
    model = ScriptedModel(
        [
            Reply("", [call("a", "page", n=1), call("b", "page", n=2), call("c", "page", n=3)]),
            Reply("", [call("d", "page", n=4)]),
            "Done.",
        ]
    )
    state = State("Read pages")
    # keep=1 would keep only the last result: the whole reply and its three results are kept instead.
    Agent(model, tools=[page], compact=Compactor(max_tokens=100, summarize=summaries, keep=1)).run(state)
    for messages in model.calls:
        offered = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", ())}
        answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        assert answered <= offered
    assert [m["role"] for m in model.calls[1]] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
    ]  # nothing to cut yet
    assert [m["role"] for m in model.calls[2]] == [
        "user",
        "assistant",
        "tool",
    ]  # the summary, d and its result


def test_summarize_gets_copies_and_a_summary_that_is_no_str_ends_the_run_saved(tmp_path: Path) -> None:
    def mangle(messages: list[dict[str, Any]]) -> Any:
        messages[0]["content"] = "changed"
        return 42

    store = FileStore(tmp_path / "runs")
    state = State("Read pages", id="bad")
    agent = Agent(fetching(3), tools=[page], store=store, compact=Compactor(max_tokens=100, summarize=mangle))
    with pytest.raises(TypeError, match="summarize returned int; it must return a str"):
        agent.run(state)
    assert state.history[0]["text"] == "Read pages"
    loaded = store.load("bad")
    assert loaded.history[-1]["kind"] == "error" and "compaction" not in kinds(loaded.history)
    assert loaded.messages[0] == {"role": "user", "content": "Read pages"}
    store.close()


def test_a_summarize_that_raises_ends_the_run_as_a_model_error_would() -> None:
    def broken(messages: list[dict[str, Any]]) -> str:
        raise RuntimeError("summary service down")

    state = State("Read pages")
    with pytest.raises(RuntimeError, match="summary service down"):
        Agent(fetching(3), tools=[page], compact=Compactor(max_tokens=100, summarize=broken)).run(state)
    assert state.history[-1]["message"] == "RuntimeError: summary service down"
    assert state.stopped_by == "error"


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"max_tokens": 0}, ValueError, "max_tokens=...\\) must be a positive int"),
        ({"max_tokens": 1.5}, ValueError, "max_tokens"),
        ({"keep": -1}, ValueError, "keep=...\\) must be an int >= 0"),
        ({"summarize": "text"}, TypeError, "summarize=...\\) must be a function"),
    ],
)
def test_compactor_arguments_are_checked(kwargs: dict[str, Any], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        Compactor(**{"max_tokens": 100, "summarize": str, **kwargs})


def test_agent_takes_only_a_compactor() -> None:
    with pytest.raises(TypeError, match=r"Agent\(compact=...\) takes a statekeep.Compactor, got dict"):
        Agent(ScriptedModel([]), compact={"max_tokens": 5})  # type: ignore[arg-type]


def test_the_compaction_is_saved_on_every_store(store: Store) -> None:
    state = State("Read four pages", id="saved")
    agent = Agent(
        fetching(4), tools=[page], store=store, compact=Compactor(max_tokens=250, summarize=Summaries())
    )
    agent.run(state)
    loaded = store.load("saved")
    assert loaded == state and loaded.messages == state.messages
    assert "compaction" in kinds(loaded.history) and loaded.compacted_through == state.compacted_through


@pytest.mark.parametrize("mode", ["run", "arun"])
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_compacted_run_loaded_by_a_new_store_object_goes_on_and_compacts_again(
    tmp_path: Path, kind: str, mode: str
) -> None:
    def open_store() -> Store:
        return FileStore(tmp_path / "runs") if kind == "file" else SQLiteStore(tmp_path / "runs.db")

    summaries = Summaries()
    compact = Compactor(max_tokens=300, summarize=summarizer(summaries, mode), keep=2)
    first = open_store()
    state = State("Read pages", id="long")
    drive(Agent(fetching(4), tools=[page], store=first, compact=compact, limit=4), state, mode)
    assert state.stopped_by == "limit"  # stopped, not finished: it can go on
    through = state.compacted_through
    assert through is not None
    first.close()

    second = open_store()  # as another process would
    loaded = second.load("long")
    assert loaded.messages == state.messages and loaded.messages[0]["content"].startswith(SUMMARY_INTRO)
    loaded.add_user("Now read four more.")
    model = fetching(4, "Eight read.", ids="d")
    assert drive(Agent(model, tools=[page], store=second, compact=compact), loaded, mode) == "Eight read."
    assert model.calls[0][0]["content"].startswith(SUMMARY_INTRO)  # it went on from the summary
    assert loaded.compacted_through is not None and loaded.compacted_through > through
    second.close()

    third = open_store()
    assert third.load("long") == loaded
    third.close()


def test_statekeep_show_and_the_viewer_show_a_compaction(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "runs")
    state = State("Read pages", id="shown")
    summarize = lambda messages: "Pages 0 and 1 were read."  # noqa: E731
    Agent(fetching(3), tools=[page], store=store, compact=Compactor(max_tokens=250, summarize=summarize)).run(
        state
    )
    entry = next(e for e in state.history if e["kind"] == "compaction")
    store.close()

    shown = CliRunner().invoke(main, ["show", "shown", "--store", str(tmp_path / "runs")])
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if " compaction " in line)
    assert f"replaces the messages of seq 0 to {entry['through']} with: Pages 0 and 1 were read." in line

    html = dict(entries_html(state.history, None, None))[entry["seq"]]
    assert "kind-compaction" in html and "Pages 0 and 1 were read." in html
    assert f"seq 0 to {entry['through']}" in html


def test_arun_under_trio_compacts_with_a_plain_or_an_async_summarize() -> None:
    for summarize in (Summaries(), Summaries().aio):
        state = State("Read five pages")
        agent = Agent(
            fetching(5), tools=[page], compact=Compactor(max_tokens=300, summarize=summarize, keep=2)
        )
        assert anyio.run(agent.arun, state, backend="trio") == "Done."
        assert "compaction" in kinds(state.history)
