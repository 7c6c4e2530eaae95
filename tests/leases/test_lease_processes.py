"""Leases between real processes on one host, on every store that holds them across
processes: FileStore, SQLiteStore, PostgresStore (direct, and behind PgBouncer in transaction
mode) and RedisStore (servers from
tests/support/servers.py). Each worker is a ``python -m tests.support.children.lease_worker`` process with a store
of its own, driven one command at a time (tests/support/workers_driver.py).

A lease is made to lapse soon by renewing it with a short ttl; the tests then wait on the
store's own clock (``current_lease`` until None), never on a sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import servers
from tests.support.servers import unique_name
from tests.support.workers_driver import Worker, wait_lease_gone

LONG = 60  # a ttl no step of a test outlives
SHORT = 0.2  # the ttl a lease is renewed with to make it lapse


def _namespace() -> str:
    return unique_name("n").replace("_", "-")


URLS: dict[str, Callable[[Path], str]] = {
    "file": lambda tmp: str(tmp / "store"),
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'store.db'}",
    "postgres": lambda tmp: f"{servers.shared_postgres().dsn}?namespace={_namespace()}",
    # PostgreSQL behind PgBouncer in transaction mode, its pool smaller than the workers' connections.
    "pgbouncer": lambda tmp: f"{servers.shared_pgbouncer().dsn}?pooler=transaction&namespace={_namespace()}",
    "redis": lambda tmp: f"{servers.shared_redis().url}?namespace={_namespace()}",
}


@pytest.fixture(params=sorted(URLS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return URLS[request.param](tmp_path)


@pytest.fixture
def start(url: str) -> Iterator[Callable[..., list[Worker]]]:
    """Start workers with the store open (``api``: "sync" or "async"); all stop at the end."""
    started: list[Worker] = []

    def starter(*names: str, api: str = "sync") -> list[Worker]:
        workers = [Worker(name) for name in names]  # all start at once
        started.extend(workers)
        for worker in workers:
            worker.send("open", url=url, api=api)
        for worker in workers:
            worker.result()
        return workers

    yield starter
    for worker in started:
        worker.stop()


def item(who: str, n: int) -> dict[str, Any]:
    return {"by": who, "n": n}


def lapse(worker: Worker, lease: dict[str, Any], poller: Worker) -> None:
    """Make ``lease`` lapse soon and wait, on the store's clock, until it has."""
    worker.call("renew", lease=lease, ttl=SHORT)
    wait_lease_gone(poller, lease["state_id"])


def test_racing_takeovers_have_one_winner(start: Callable[..., list[Worker]]) -> None:
    """Three processes race for each lapsed lease, round after round: one wins, the others
    get LeaseHeldError naming it, and none of them can write, with their old lease or
    without; everything the winners wrote is there."""
    racers = start("p0", "p1", "p2")
    held: dict[str, dict[str, Any]] = {}  # each process's latest lease: all have one, stale
    written: list[dict[str, Any]] = []
    for worker in racers:
        held[worker.name] = worker.call("acquire", state="s", owner=worker.name, ttl=LONG)
        worker.call("append", state="s", items=[item(worker.name, -1)], lease=held[worker.name])
        written.append(item(worker.name, -1))
        if worker is not racers[-1]:
            lapse(worker, held[worker.name], racers[-1])
    tokens = [lease["token"] for lease in held.values()]
    current = held["p2"]
    for round_ in range(3):
        holder = next(w for w in racers if w.name == current["owner"])
        lapse(holder, current, racers[(racers.index(holder) + 1) % 3])
        order = racers[round_:] + racers[:round_]  # no process is always the first asked
        for worker in order:  # all at once: each process acquires as soon as it reads this
            worker.send("acquire", state="s", owner=worker.name, ttl=LONG)
        replies = {worker.name: worker.reply() for worker in order}
        winners = [name for name, got in replies.items() if got["ok"]]
        assert len(winners) == 1, replies
        winner = winners[0]
        current = replies[winner]["value"]
        assert current["owner"] == winner
        for name, got in replies.items():
            if name != winner:
                assert got["error"] == "LeaseHeldError", got
                assert winner in got["message"], got
        tokens.append(current["token"])
        mine = [item(winner, round_), item(winner, round_ + 100)]
        by_winner = next(w for w in racers if w.name == winner)
        by_winner.call("append", state="s", items=mine[:1], lease=current)
        for loser in racers:
            if loser.name == winner:
                continue
            stale = held[loser.name]
            assert loser.refused("append", state="s", items=[item("x", 0)], lease=stale) == "StaleLeaseError"
            assert loser.refused("append", state="s", items=[item("x", 0)]) == "LeaseHeldError"
            assert loser.refused("delete", state="s") == "LeaseHeldError"
        by_winner.call("append", state="s", items=mine[1:], lease=current)
        written += mine
        held[winner] = current

    assert tokens == sorted(set(tokens)), tokens  # strictly increasing
    record = racers[0].call("read", state="s")
    assert record["entries"] == [{"seq": seq, **e} for seq, e in enumerate(written)]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_paused_worker_is_fenced_off(start: Callable[..., list[Worker]], api: str) -> None:
    """A stops (SIGSTOP) right after deciding on a write, past its lease; B takes over and
    writes; A resumes (SIGCONT): that write and every later one of A's are refused, and
    B's entries are all there."""
    a, b = start("a", "b", api=api)
    lease_a = a.call("acquire", state="s", owner="worker-a", ttl=LONG)
    assert a.call("append", state="s", items=[item("a", n) for n in range(3)], lease=lease_a) == [0, 1, 2]
    lease_a = a.call("renew", lease=lease_a, ttl=SHORT)

    a.pause()
    a.send("write", state="s", entries=[{"seq": 3, **item("a", 3)}], snapshot={"n": 4}, lease=lease_a)
    wait_lease_gone(b, "s")
    lease_b = b.call("acquire", state="s", owner="worker-b", ttl=LONG)
    assert lease_b["token"] > lease_a["token"]
    assert [b.call("append", state="s", items=[item("b", n)], lease=lease_b) for n in range(3)] == [
        [3],
        [4],
        [5],
    ]
    a.resume()

    assert a.reply()["error"] == "StaleLeaseError"  # the write it decided on before it stopped
    assert a.refused("append", state="s", items=[item("a", 4)], lease=lease_a) == "StaleLeaseError"
    assert a.refused("renew", lease=lease_a, ttl=LONG) == "StaleLeaseError"
    assert a.refused("delete", state="s", lease=lease_a) == "StaleLeaseError"
    assert a.refused("append", state="s", items=[item("a", 4)]) == "LeaseHeldError"
    a.call("release", lease=lease_a)  # no longer its lease: changes nothing

    record = a.call("read", state="s")
    expected = [*(item("a", n) for n in range(3)), *(item("b", n) for n in range(3))]
    assert record["entries"] == [{"seq": seq, **e} for seq, e in enumerate(expected)]
    assert record["snapshot"]["n"] == 6
    current = a.call("current_lease", state="s")
    assert (current["owner"], current["token"]) == ("worker-b", lease_b["token"])


def test_token_increases_across_takeovers_and_processes(start: Callable[..., list[Worker]]) -> None:
    """Released, lapsed, taken by another process, the State deleted, a new process: every
    lease on the State has a greater token than all before it."""
    one, two = start("one", "two")
    tokens = []
    lease = one.call("acquire", state="s", owner="one", ttl=LONG)
    tokens.append(lease["token"])
    one.call("release", lease=lease)
    assert two.call("current_lease", state="s") is None

    lease = two.call("acquire", state="s", owner="two", ttl=LONG)  # after a release
    tokens.append(lease["token"])
    two.call("append", state="s", items=[item("two", 0)], lease=lease)
    lapse(two, lease, one)
    # Lapsed, though nobody took over: refused all the same.
    assert two.refused("append", state="s", items=[item("two", 1)], lease=lease) == "StaleLeaseError"

    lease = one.call("acquire", state="s", owner="one", ttl=LONG)  # after a lapse
    tokens.append(lease["token"])
    one.call("delete", state="s", lease=lease)
    assert two.call("read", state="s") is None
    one.call("release", lease=lease)
    two.stop()

    (three,) = start("three")  # a new process, with a store of its own
    lease = three.call("acquire", state="s", owner="three", ttl=LONG)  # after the delete
    tokens.append(lease["token"])
    three.call("append", state="s", items=[item("three", 0)], lease=lease)
    lapse(three, lease, one)
    lease = one.call("acquire", state="s", owner="one", ttl=LONG)
    tokens.append(lease["token"])
    assert tokens == sorted(set(tokens)), tokens
    assert one.call("read", state="s")["entries"] == [{"seq": 0, **item("three", 0)}]
