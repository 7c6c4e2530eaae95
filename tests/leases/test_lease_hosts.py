"""Leases across hosts: PostgreSQL and Redis each on a host of its own, workers on two
more, each host a network namespace on one switch (tests/support/netns.py), with a pulled cable
as the partition.

Worker A holds the lease and writes; its link is cut with a write of A's on the wire;
B waits on the server's clock until A's lease has lapsed, takes over and writes; the link
heals. A's delayed write and every later one are refused, and B's entries are all there.
Needs root and iproute2: skipped elsewhere, failed under CI (``CI=true``) as root.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import netns, servers
from tests.support.netns import SUBNET, Net, need_namespaces, start_postgres_in, start_redis_in
from tests.support.servers import Server, ServerMissing, unique_name
from tests.support.workers_driver import Worker, wait_lease_gone

KINDS = ["postgres", "redis"]


class Hosts:
    """The namespaces and the servers in them (each started on first use)."""

    def __init__(self, net: Net) -> None:
        self.net = net
        self.servers: dict[str, Server | ServerMissing] = {}

    def url(self, kind: str) -> str:
        """A store URL on the ``kind`` server, in a namespace of the test's own."""
        got = self.servers.get(kind)
        if got is None:
            try:
                got = (
                    start_postgres_in(self.net, "pg")
                    if kind == "postgres"
                    else start_redis_in(self.net, "redis")
                )
            except ServerMissing as exc:
                got = exc
            self.servers[kind] = got
        if isinstance(got, ServerMissing):
            servers.need(got)
        base = got.dsn if kind == "postgres" else got.url  # type: ignore[union-attr]
        return f"{base}?namespace={unique_name('n').replace('_', '-')}"

    def remove(self) -> None:
        for server in self.servers.values():
            if isinstance(server, Server):
                server.remove()
        self.net.remove()


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    need_namespaces()
    made = Hosts(Net())
    try:
        for node in ("pg", "redis", "a", "b"):
            made.net.add(node)
        yield made
    finally:
        made.remove()


@pytest.fixture
def workers(hosts: Hosts) -> Iterator[tuple[Worker, Worker]]:
    a = hosts.net.worker("a")
    try:
        b = hosts.net.worker("b")
    except BaseException:
        a.stop()
        raise
    try:
        yield a, b
    finally:
        for node, worker in (("a", a), ("b", b)):
            hosts.net.heal(node)
            worker.stop()


def item(who: str, n: int) -> dict[str, Any]:
    return {"by": who, "n": n}


def test_hosts_reach_each_other_and_nothing_else(hosts: Hosts) -> None:
    net = hosts.net
    for node, address in net.nodes.items():
        routes = net.routes(node)
        assert not [r for r in routes if r.startswith("default")], (node, routes)
        assert [r.split()[:3] for r in routes] == [[f"{SUBNET}.0/24", "dev", "eth0"]], (node, routes)
        assert f"src {address}" in routes[0]
    host = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert f" {SUBNET}." not in host  # nothing of ours in the test's own namespace
    assert net.suffix not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_removing_the_hosts_leaves_nothing() -> None:
    need_namespaces()
    net = Net()
    try:
        net.add("x")
        sleeper = subprocess.Popen([*net.prefix("x"), "sleep", "600"])
        names = [net.switch, net.ns("x")]
        assert set(names) <= set(
            subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        )
    finally:
        net.remove()
    assert sleeper.wait() == -9  # killed, not left running in a deleted namespace
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [name for name in names if name in left.split()]


def test_no_namespaces_skips_but_fails_under_ci_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)  # no ip command
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="apt-get install iproute2"):
        need_namespaces()
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    with pytest.raises(pytest.fail.Exception, match="must run: the ip command is missing"):
        need_namespaces()
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        need_namespaces()


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_link_holds_writes_back_until_it_heals(
    hosts: Hosts, workers: tuple[Worker, Worker], kind: str
) -> None:
    """The harness itself: a store works from both worker hosts, and a cut link really
    stops A's traffic (B writes in between), which goes on when the link heals."""
    a, b = workers
    url = hosts.url(kind)
    a.call("open", url=url)
    b.call("open", url=url)
    assert a.call("append", state="s", items=[item("a", 0)]) == [0]
    hosts.net.cut("a")
    a.send("write", state="s", entries=[{"seq": 1, **item("a", 1)}], snapshot=None)
    assert b.call("append", state="s", items=[item("b", 0)]) == [1]
    assert b.call("read", state="s")["entries"] == [{"seq": 0, **item("a", 0)}, {"seq": 1, **item("b", 0)}]
    assert not a.has_reply()  # A's write is still on the wire, after B's
    hosts.net.heal("a")
    assert a.reply()["error"] == "StateConflictError"  # it arrived, after B's
    assert a.call("append", state="s", items=[item("a", 2)]) == [2]


@pytest.mark.parametrize("kind", KINDS)
def test_partitioned_worker_is_fenced_off(hosts: Hosts, workers: tuple[Worker, Worker], kind: str) -> None:
    a, b = workers
    url = hosts.url(kind)
    a.call("open", url=url)
    b.call("open", url=url)
    lease_a = a.call("acquire", state="s", owner="worker-a", ttl=60)
    a.call("append", state="s", items=[item("a", 0), item("a", 1)], lease=lease_a)
    lease_a = a.call("renew", lease=lease_a, ttl=1)  # from here it lapses soon

    hosts.net.cut("a")
    late = {"seq": 2, **item("a", 2)}
    a.send("write", state="s", entries=[late], snapshot={"n": 3}, lease=lease_a)  # on the wire
    wait_lease_gone(b, "s")  # the server's clock, asked from B
    lease_b = b.call("acquire", state="s", owner="worker-b", ttl=60)
    assert lease_b["token"] > lease_a["token"]
    mine = [b.call("append", state="s", items=[item("b", n)], lease=lease_b) for n in range(3)]
    assert mine == [[2], [3], [4]]
    assert not a.has_reply()  # the partition held A's write back until now

    hosts.net.heal("a")
    late_reply = a.reply()
    assert late_reply["error"] == "StaleLeaseError", late_reply
    assert a.refused("append", state="s", items=[item("a", 3)], lease=lease_a) == "StaleLeaseError"
    assert a.refused("append", state="s", items=[item("a", 3)]) == "LeaseHeldError"
    assert a.refused("acquire", state="s", owner="worker-a", ttl=60) == "LeaseHeldError"

    record = b.call("read", state="s")
    expected = [item("a", 0), item("a", 1), *(item("b", n) for n in range(3))]
    assert record["entries"] == [{"seq": seq, **e} for seq, e in enumerate(expected)]
    assert record["snapshot"]["n"] == 5
    current = a.call("current_lease", state="s")
    assert (current["owner"], current["token"]) == ("worker-b", lease_b["token"])
