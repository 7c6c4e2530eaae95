"""Hosts for the tests that need more than one: Linux network namespaces joined by a bridge.

:class:`Net` makes one namespace per host (``node``) plus one for a switch: a Linux
bridge ``br0`` in its own namespace. Each node gets one veth pair, ``eth0`` in the node
and ``p-NODE`` in the switch, enslaved to the bridge, so every node reaches every other
on 198.18.0.0/24 (a part of 198.18.0.0/15, the range reserved for network tests).
Nothing is connected to the host's namespace and no namespace has a default route, so no
traffic leaves them. :meth:`Net.cut` takes a node's switch port down (a pulled cable:
packets to and from it are dropped, its TCP connections stay open and resume when
:meth:`Net.heal` puts it back up).

The veths are made inside the namespaces (``ip -n SWITCH link add ... netns NODE``), and
the names carry a random suffix, so parallel runs never clash. :meth:`Net.remove` kills
what still runs inside the namespaces and deletes them (which deletes the veths and the
bridge with them); a test process killed with SIGKILL leaves empty namespaces named
``sk*-*`` behind (``ip netns del`` them), never processes: everything started here gets
SIGKILL when the test process ends.

PostgreSQL and Redis servers that listen on a node's address: :func:`start_postgres_in`,
:func:`start_redis_in`. PostgreSQL refuses to run as root, so it runs as the ``postgres``
user (``setpriv`` execs it directly: signals reach the postmaster, so a stop is a clean
shutdown).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import servers
from tests.support.serverprocs import START_TIMEOUT, PostgresServer, RedisServer, _tail
from tests.support.workers_driver import Worker

SUBNET = "198.18.0"  # /24, inside 198.18.0.0/15


class NoNamespaces(RuntimeError):
    """Network namespaces cannot be made here; the message says why."""


def ip(*args: str) -> str:
    """Run ``ip ARGS``; RuntimeError with its stderr if it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def can_make_namespaces() -> None:
    """Raise NoNamespaces saying why this machine cannot run the tests across hosts."""
    if os.geteuid() != 0:
        raise NoNamespaces("making network namespaces needs root")
    if shutil.which("ip") is None:
        raise NoNamespaces("the ip command is missing; install it with: apt-get install iproute2")
    probe = f"skprobe{secrets.token_hex(4)}"
    try:
        ip("netns", "add", probe)
    except RuntimeError as exc:
        raise NoNamespaces(f"cannot make a network namespace: {exc}") from None
    ip("netns", "del", probe)


def need_namespaces() -> None:
    """Skip the test where namespaces cannot be made; under CI as root, fail it instead."""
    try:
        can_make_namespaces()
    except NoNamespaces as exc:
        if os.environ.get("CI", "").lower() == "true" and os.geteuid() == 0:
            pytest.fail(f"CI runs as root, so the tests across hosts must run: {exc}", pytrace=False)
        pytest.skip(str(exc))


class Net:
    """Namespaces ``sk<suffix>-<node>`` on one switch; see the module's docstring."""

    def __init__(self) -> None:
        self.suffix = secrets.token_hex(3)
        self.switch = self.ns("switch")
        self.nodes: dict[str, str] = {}  # node -> its address
        self.made: list[str] = []
        try:
            self._add_namespace(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.remove()
            raise

    def ns(self, node: str) -> str:
        return f"sk{self.suffix}-{node}"

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def add(self, node: str) -> str:
        """A new host on the switch; returns its address."""
        address = f"{SUBNET}.{len(self.nodes) + 1}"
        name = self.ns(node)
        self._add_namespace(name)
        port = self.port(node)
        ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name)
        ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        self.nodes[node] = address
        return address

    def port(self, node: str) -> str:
        return f"p-{node}"[:15]

    def cut(self, node: str) -> None:
        """Partition ``node``: its switch port goes down (its own eth0 stays configured)."""
        ip("-n", self.switch, "link", "set", self.port(node), "down")

    def heal(self, node: str) -> None:
        ip("-n", self.switch, "link", "set", self.port(node), "up")

    def prefix(self, node: str) -> list[str]:
        """The command prefix that runs a program on ``node``."""
        return ["ip", "netns", "exec", self.ns(node)]

    def worker(self, node: str, name: str | None = None) -> Worker:
        """A tests/support/children/lease_worker.py process on ``node``."""
        return Worker(name or node, self.prefix(node))

    def routes(self, node: str) -> list[str]:
        return ip("-n", self.ns(node), "-4", "route", "show").strip().splitlines()

    def remove(self) -> None:
        """Kill what runs in the namespaces, then delete them (veths and bridge with them)."""
        for name in reversed(self.made):
            with contextlib.suppress(RuntimeError):
                for pid in ip("netns", "pids", name).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", name)
        self.made.clear()


def _until(check: list[str], proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Run ``check`` until it succeeds (the server accepts sessions)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting:\n{_tail(log)}")
        if subprocess.run(check, capture_output=True).returncode == 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} was not ready within {START_TIMEOUT:.0f} s:\n{_tail(log)}")


class NetPostgres(PostgresServer):
    """PostgreSQL listening on a node's address, as the ``postgres`` user in the node."""

    def __init__(self, root: Path, net: Net, node: str) -> None:
        super().__init__(root, 5432, servers.postgres_bindir(), servers.PG_PASSWORD)
        self.prefix = net.prefix(node)
        self.address = net.nodes[node]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres:{self.password}@{self.address}:{self.port}/postgres"

    def init(self) -> None:
        super().init()
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 198.18.0.0/15 scram-sha-256\n")

    def command(self) -> list[str]:
        args = [
            f"listen_addresses={self.address}" if arg.startswith("listen_addresses=") else arg
            for arg in super().command()
        ]
        user = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--"]
        return [*self.prefix, *user, *args]

    def popen_kwargs(self) -> dict[str, Any]:
        return {}  # root, for ip netns exec; setpriv becomes postgres

    def ready(self) -> None:
        assert self.proc is not None
        isready = str(self.bindir / "pg_isready")
        check = [*self.prefix, isready, "-q", "-h", self.address, "-p", str(self.port), "-U", "postgres"]
        _until(check, self.proc, self.log, "postgres")


class NetRedis(RedisServer):
    """Redis listening on a node's address."""

    def __init__(self, root: Path, net: Net, node: str) -> None:
        super().__init__(root, 6379, servers.REDIS_PASSWORD, ())
        self.prefix = net.prefix(node)
        self.address = net.nodes[node]

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.address}:{self.port}/0"

    def command(self) -> list[str]:
        args = super().command()
        args[args.index("--bind") + 1] = self.address
        return [*self.prefix, *args]

    def ready(self) -> None:
        assert self.proc is not None
        check = [*self.prefix, "redis-cli", "-h", self.address, "-p", str(self.port), "--no-auth-warning"]
        check += ["-a", str(self.password), "ping"]
        _until(check, self.proc, self.log, "redis-server")


def start_postgres_in(net: Net, node: str) -> NetPostgres:
    """A fresh PostgreSQL server on ``node``; ServerMissing if it is not installed."""
    servers.postgres_bindir()
    root = servers._scratch("statekeep-netpg-")
    os.chmod(root, 0o700)
    server = NetPostgres(root, net, node)
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


def start_redis_in(net: Net, node: str) -> NetRedis:
    """A fresh Redis server on ``node``; ServerMissing if it is not installed."""
    servers.redis_binary()
    if shutil.which("redis-cli") is None:
        raise servers.ServerMissing("redis-cli not found; install it with: apt-get install redis-tools")
    server = NetRedis(servers._scratch("statekeep-netredis-"), net, node)
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    return server
