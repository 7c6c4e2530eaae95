"""Agent.arun awaited from trio (through anyio), beside asyncio: a plain run with sync and async
models and tools, the lease renewed by the heartbeat, a takeover that stops the run, and a
cancelled caller whose lease is still released.

Real stores; expiry is waited for by polling the store's own clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from typing import Any

import anyio
import pytest
import trio

from statekeep import Agent, Reply, ScriptedModel, StaleLeaseError, State, Store
from tests.support.agents import (
    call,
    changed_agent,
    history,
    one_resume_warning,
    saved_after_one_run,
    stalls_until_taken_over,
    store_now,
)
from tests.support.stores import STORE_FACTORIES

#: Keys of a saved entry that differ between two runs of the same story.
VARYING = {"at", "agent"}


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


def under_trio(fn: Any, *args: Any) -> Any:
    return anyio.run(fn, *args, backend="trio")


def story(store: Store, state_id: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in VARYING} for e in history(store, state_id)]


def lookup(city: str) -> str:
    """Find a restaurant in a city (a plain tool: it runs in a worker thread)."""
    assert threading.current_thread() is not threading.main_thread()
    return f"{city}: Chez Janou"


async def fetch(url: str) -> dict[str, Any]:
    """Fetch a page (an async tool: it runs in the caller's loop)."""
    await anyio.sleep(0)
    return {"url": url, "status": 200}


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            Reply(
                "Looking.", [call("c1", "lookup", city="Paris"), call("c2", "fetch", url="https://x.test")]
            ),
            Reply("Once more.", [call("c3", "lookup", city="Lyon")], usage={"in": 3}),
            "Chez Janou, Paris.",
        ]
    )


def test_arun_under_trio_tells_the_same_story_as_under_asyncio(store: Store) -> None:
    answers = {
        "asyncio": asyncio.run(
            Agent(scripted(), tools=[lookup, fetch], store=store).arun(State("t", id="a"))
        ),
        "trio": under_trio(Agent(scripted(), tools=[lookup, fetch], store=store).arun, State("t", id="b")),
    }
    assert answers == {"asyncio": "Chez Janou, Paris.", "trio": "Chez Janou, Paris."}
    assert story(store, "b") == story(store, "a")
    assert [e["kind"] for e in story(store, "b")].count("tool_result") == 3
    assert store.load("b").finished


def test_a_sync_model_under_trio_runs_in_a_worker_thread_and_every_step_is_saved_first(store: Store) -> None:
    seen: list[list[str]] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        assert threading.current_thread() is not threading.main_thread()  # not the trio thread
        seen.append([e["kind"] for e in history(store, "job")])
        return Reply("", [call(f"c{len(seen)}", "lookup", city="Paris")]) if len(seen) == 1 else Reply("done")

    assert under_trio(Agent(model, tools=[lookup], store=store).arun, State("t", id="job")) == "done"
    assert seen == [
        ["task", "run_start", "model_request"],
        ["task", "run_start", "model_request", "model_reply", "tool_result", "model_request"],
    ]


def test_a_failing_model_under_trio_raises_its_own_error_saved_and_releases_the_lease(store: Store) -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        raise KeyError("no such model")

    agent = Agent(model, store=store, lease_ttl=30, owner="worker-a")
    with pytest.raises(KeyError, match="no such model"):  # itself: not in trio's exception group
        under_trio(agent.arun, State("t", id="job"))
    assert [e["kind"] for e in history(store, "job")][-2:] == ["model_error", "error"]
    assert store.current_lease("job") is None


def test_the_heartbeat_under_trio_renews_the_lease_through_a_long_model_call(store: Store) -> None:
    async def long_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        first = await store.acurrent_lease("job")
        assert first is not None
        # Wait (without blocking the trio loop) until the store's clock is past the first expiry.
        while await store_now(store) <= first.expires_at:
            await trio.sleep(0.01)
        now = await store.acurrent_lease("job")
        assert now is not None and now.token == first.token and now.expires_at > first.expires_at
        return Reply("done")

    agent = Agent(long_model, store=store, lease_ttl=0.4, owner="worker-a")
    assert under_trio(agent.arun, State("t", id="job")) == "done"
    assert store.load("job").finished
    assert store.current_lease("job") is None  # released at the end


def test_a_takeover_under_trio_stops_the_run_at_the_next_renewal(store: Store) -> None:
    before: list[list[dict[str, Any]]] = []

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        held = await store.acurrent_lease("job")
        await store.arelease(held)  # an operator ends worker-a's lease...
        await store.aacquire("job", "worker-b", 30)  # ...and another worker takes the State
        before.append(history(store, "job"))
        await trio.sleep(60)  # the heartbeat's failed renewal must cancel this
        raise AssertionError("the run was not stopped")

    async def main() -> None:
        lease = await store.aacquire("job", "worker-a", 0.4)
        with pytest.raises(StaleLeaseError, match="worker-a"):
            await Agent(model, store=store).arun(State("t", id="job"), lease=lease)
        await trio.lowlevel.checkpoint()  # the caller's task goes on: its scope is not cancelled

    under_trio(main)
    assert history(store, "job") == before[0]  # no model error, no stop: nothing more saved
    current = store.current_lease("job")
    assert current is not None and current.owner == "worker-b"


def test_a_save_refused_under_trio_after_a_takeover_saves_nothing_more(store: Store) -> None:
    taken: dict[str, Any] = {}
    stalling_model = stalls_until_taken_over(store, taken, Reply("", [call("c1", "lookup", city="Paris")]))

    async def main() -> None:
        first = await store.aacquire("job", "worker-a", 0.5)
        with pytest.raises(StaleLeaseError, match="worker-a"):
            await Agent(stalling_model, tools=[lookup], store=store).arun(State("t", id="job"), lease=first)

    under_trio(main)
    assert history(store, "job") == taken["entries"]  # nothing of worker-a's after the takeover
    assert store.current_lease("job") == taken["lease"]


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_caller_cancelled_by_an_anyio_scope_still_releases_the_runs_lease(
    store: Store, backend: str
) -> None:
    """On asyncio too: anyio cancels again at every await, which once dropped the release."""
    asked = anyio.Event()

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tasks:

                async def cancel_once_asked() -> None:
                    await asked.wait()
                    scope.cancel()

                tasks.start_soon(cancel_once_asked)
                await Agent(model, store=store, lease_ttl=30, owner="worker-a").arun(State("t", id="job"))
        assert scope.cancelled_caught

    anyio.run(main, backend=backend)
    assert store.current_lease("job") is None  # released although the caller was cancelled
    assert history(store, "job")[-1]["kind"] == "model_request"


def test_a_resume_warning_under_trio_points_at_the_callers_line(store: Store) -> None:
    sid = saved_after_one_run(store)
    for how in ("anyio.run(arun)", "await arun"):
        agent, _ = changed_agent(store, name=f"other-{how}", limit=1, call_id=f"c-{how}")
        state = store.load(sid)

        async def main(agent: Agent = agent, state: State = state) -> None:
            await agent.arun(state)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            under_trio(agent.arun, state) if how == "anyio.run(arun)" else under_trio(main)
        assert one_resume_warning(caught).filename == __file__, how
