"""The Agent under a lease: it renews while it works, saves with the lease, and stops
cleanly (StaleLeaseError, nothing more saved) when another owner takes the State over.

Real stores; expiry is waited for by polling the store's own clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeep import Agent, LeaseHeldError, Reply, ScriptedModel, StaleLeaseError, State, open_store
from tests.support import servers
from tests.support.agents import call, history, stalls_until_taken_over, store_now
from tests.support.children import lease_agent_child as child
from tests.support.stores import STORE_FACTORIES, namespace

#: Every built-in store, and a PostgresStore behind PgBouncer in transaction mode; those whose
#: leases hold across processes.
FACTORIES = {**STORE_FACTORIES, "pgbouncer": lambda tmp_path: servers.pgbouncer_store(tmp_path)}
LEASE_STORES = sorted(FACTORIES)
PROCESS_STORES = [kind for kind in LEASE_STORES if kind != "memory"]


@pytest.fixture(params=LEASE_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    s = FACTORIES[request.param](tmp_path)
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_run_with_lease_ttl_holds_the_lease_while_it_works_and_releases_it(store: Any, mode: str) -> None:
    seen: list[Any] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        seen.append(store.current_lease("job"))
        with pytest.raises(LeaseHeldError):  # a writer without the lease is refused meanwhile
            store.write("job", [], {"task": "hijack"})
        return Reply("done")

    agent = Agent(model, store=store, lease_ttl=30, owner="worker-a")
    state = State("a task", id="job")
    assert (agent.run(state) if mode == "run" else asyncio.run(agent.arun(state))) == "done"
    assert seen[0] is not None and seen[0].owner == "worker-a"
    assert store.current_lease("job") is None  # released at the end
    assert store.load("job").finished
    assert store.acquire("job", "next", 5).token == seen[0].token + 1


def test_a_run_does_not_start_while_another_owner_holds_the_state(store: Any) -> None:
    store.acquire("job", "worker-b", 30)
    model = ScriptedModel(["never asked"])
    with pytest.raises(LeaseHeldError, match="worker-b"):
        Agent(model, store=store, lease_ttl=30).run(State("a task", id="job"))
    assert model.calls == [] and store.read("job") is None


def test_a_lease_for_another_state_is_refused_before_anything_runs(store: Any) -> None:
    lease = store.acquire("other", "me", 30)
    with pytest.raises(ValueError, match="'other'"):
        Agent(ScriptedModel(["x"]), store=store).run(State("t", id="job"), lease=lease)
    assert store.read("job") is None


def test_a_leased_run_needs_a_store() -> None:
    with pytest.raises(ValueError, match="no store"):
        Agent(ScriptedModel(["x"]), lease_ttl=5).run(State("t"))


def test_a_stalled_worker_taken_over_saves_nothing_more_and_raises(store: Any) -> None:
    """The agent's loop stalls inside a model call past its lease; another owner takes the
    State over and writes; the first worker's next save is refused and it stops."""
    taken: dict[str, Any] = {}
    stalling_model = stalls_until_taken_over(store, taken, Reply("", [call("c1", "tool")]))

    ran: list[str] = []

    def tool() -> str:
        ran.append("tool")
        return "ok"

    first = store.acquire("job", "worker-a", 0.5)
    agent = Agent(stalling_model, tools=[tool], store=store)
    state = State("a task", id="job")
    with pytest.raises(StaleLeaseError, match="worker-a"):
        agent.run(state, lease=first)
    assert ran == []  # the reply was not saved, so its tool never ran
    assert history(store, "job") == taken["entries"]  # nothing of worker-a's after the takeover
    assert history(store, "job")[-1]["text"] == "worker-b was here"
    assert store.current_lease("job") == taken["lease"]  # the new owner's lease is untouched


def test_the_heartbeat_renews_the_lease_through_a_long_model_call(store: Any) -> None:
    async def long_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        first = await store.acurrent_lease("job")
        assert first is not None
        # Wait (without blocking the loop) until the store's clock is past the first expiry.
        while await store_now(store) <= first.expires_at:
            await asyncio.sleep(0.01)
        now = await store.acurrent_lease("job")
        assert now is not None and now.token == first.token and now.expires_at > first.expires_at
        return Reply("done")

    agent = Agent(long_model, store=store, lease_ttl=0.4, owner="worker-a")
    assert agent.run(State("t", id="job")) == "done"
    assert store.load("job").finished


def test_a_takeover_during_a_long_call_cancels_the_run_at_the_next_renewal(store: Any) -> None:
    before: list[list[dict[str, Any]]] = []

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        held = await store.acurrent_lease("job")
        await store.arelease(held)  # an operator ends worker-a's lease...
        await store.aacquire("job", "worker-b", 30)  # ...and another worker takes the State
        before.append(history(store, "job"))
        await asyncio.sleep(60)  # the heartbeat's failed renewal must cancel this
        raise AssertionError("the run was not stopped")

    lease = store.acquire("job", "worker-a", 0.4)
    with pytest.raises(StaleLeaseError, match="worker-a"):
        Agent(model, store=store).run(State("t", id="job"), lease=lease)
    assert history(store, "job") == before[0]  # no model error, no stop: nothing more saved
    current = store.current_lease("job")
    assert current is not None and current.owner == "worker-b"


@pytest.mark.asyncio
async def test_arun_in_a_running_loop_is_fenced_too(store: Any) -> None:
    lease = await store.aacquire("job", "worker-a", 30)

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        return Reply("done")

    state = State("t", id="job")
    assert await Agent(model, store=store).arun(state, lease=lease) == "done"
    current = await store.acurrent_lease("job")
    assert current is not None and current.token == lease.token  # the caller's lease is kept
    await store.arelease(lease)


def where(kind: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A store URL and options naming one storage for this test, for two processes."""
    if kind == "file":
        return str(tmp_path / "store"), {}
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}", {}
    if kind == "postgres":
        return servers.shared_postgres().dsn, {"schema": namespace(tmp_path)}
    if kind == "pgbouncer":
        return f"{servers.shared_pgbouncer().dsn}?pooler=transaction", {"schema": namespace(tmp_path)}
    return servers.shared_redis().url, {"prefix": namespace(tmp_path) + ":"}


@pytest.mark.parametrize("kind", PROCESS_STORES)
def test_a_worker_process_paused_past_its_lease_is_refused_once_resumed(kind: str, tmp_path: Path) -> None:
    """SIGSTOP the agent's process in a model call; once its lease has lapsed by the store's
    clock another owner takes over and writes; SIGCONT: the agent stops, having saved nothing
    more, and nothing of the new owner's is lost."""
    url, options = where(kind, tmp_path)
    store = open_store(url, **options)
    proc = subprocess.Popen(
        [sys.executable, child.__file__, url, json.dumps(options), "job", "1.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == child.MARKER
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            while store.current_lease("job") is not None:  # until the store's clock ends it
                pass
            lease = store.acquire("job", "parent", 30)
            state = store.load("job")
            state.add_user("the parent's step")
            store.save(state, lease=lease)
            expected = history(store, "job")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == child.STALE, out
    assert out.startswith("stale: ") and "'child'" in out
    assert history(store, "job") == expected
    assert store.current_lease("job") == lease
    store.close()
