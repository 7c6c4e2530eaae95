"""Throwaway PostgreSQL and Redis servers for the tests and the benchmarks.

Each server runs from a fresh temporary folder on a free loopback port and is gone when
stopped. As plain functions (:func:`start_postgres`, :func:`start_redis`) they serve the
benchmarks and the tests that kill and restart a server of their own; the shared servers
(:func:`shared_postgres`, :func:`shared_redis`, and the session fixtures
``postgres_server`` and ``redis_server``) start on first use and stop at exit.

A missing server binary skips the tests that need it, saying what to install; under CI
(``CI=true``) it fails them instead, so that a CI machine without the servers cannot pass.

Also a small worker for the multi-process tests: ``python -m tests.support.servers writer ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ctypes
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

PG_VERSION = "15"
START_TIMEOUT = 60.0
PG_PASSWORD = "pg-secret-" + secrets.token_hex(4)
REDIS_PASSWORD = "redis-secret-" + secrets.token_hex(4)


class ServerMissing(RuntimeError):
    """A server binary is not installed; the message says what to install."""


def postgres_bindir() -> Path:
    """The folder of PostgreSQL's server programs (15 preferred, else the newest there is)."""
    base = Path("/usr/lib/postgresql")
    preferred = base / PG_VERSION / "bin"
    if (preferred / "postgres").exists():
        return preferred
    found = sorted(
        (p for p in base.glob("*/bin") if (p / "postgres").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    raise ServerMissing(
        f"PostgreSQL server binaries not found ({preferred}/postgres); "
        f"install them with: apt-get install postgresql-{PG_VERSION}"
    )


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise ServerMissing("redis-server not found; install it with: apt-get install redis-server")
    return path


def need(missing: ServerMissing) -> None:
    """Skip the test for a missing server, or fail it under CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI needs this server: {missing}", pytrace=False)
    pytest.skip(str(missing))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the thread that started it ends (with the
    test process, when started from the main thread), so no server outlives a killed run."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting:\n{_tail(log)}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not accept connections within {START_TIMEOUT:.0f} s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


class Server:
    """A server process run from ``root``, restartable on the same port and data."""

    name = "server"

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "server.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def popen_kwargs(self) -> dict[str, Any]:
        return {}

    def ready(self) -> None:
        assert self.proc is not None
        _wait_for_port(self.port, self.proc, self.log, self.name)

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, killed whole
                preexec_fn=_die_with_parent,
                **self.popen_kwargs(),
            )
        try:
            self.ready()
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the server and every process of its group (a crash)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._wait_group_gone(self.proc.pid)

    def stop(self) -> None:
        """Stop the server cleanly (SIGKILL if it takes long); the data stays."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, self.stop_signal)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    stop_signal = signal.SIGTERM

    def restart(self) -> None:
        self.kill()
        self.start()

    def remove(self) -> None:
        """Stop and delete everything it had."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _wait_group_gone(pgid: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)


class PostgresServer(Server):
    """``postgres`` on 127.0.0.1:port; superuser ``postgres`` with ``password`` over TCP."""

    name = "postgres"
    stop_signal = signal.SIGINT  # fast shutdown

    def __init__(self, root: Path, port: int, bindir: Path, password: str) -> None:
        super().__init__(root, port)
        self.bindir = bindir
        self.password = password
        self.data = root / "data"
        self.sockets = root / "sockets"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self) -> dict[str, Any]:
        if os.geteuid() != 0:
            return {}
        entry = pwd.getpwnam("postgres")
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def popen_kwargs(self) -> dict[str, Any]:
        return self._as_postgres()

    def init(self) -> None:
        self.sockets.mkdir()
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        self.log.touch()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets, pwfile, self.log):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        result = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--pwfile",
                str(pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            preexec_fn=_die_with_parent,
            **self._as_postgres(),
        )
        pwfile.unlink()
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def command(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.sockets),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=300",
            "-c",
            "fsync=on",
            "-c",
            "synchronous_commit=on",
            "-c",
            "shared_buffers=128MB",
        ]

    def ready(self) -> None:
        assert self.proc is not None
        _wait_for_port(self.port, self.proc, self.log, "postgres")
        # The port opens before recovery ends: wait until a session is accepted.
        isready = self.bindir / "pg_isready"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{_tail(self.log)}")
            if not isready.exists():
                return
            done = subprocess.run(
                [str(isready), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"],
                capture_output=True,
            )
            if done.returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"postgres was not ready within {START_TIMEOUT:.0f} s:\n{_tail(self.log)}")


class RedisServer(Server):
    """``redis-server`` on 127.0.0.1:port with an append-only file fsync'd on every write."""

    name = "redis-server"

    def __init__(self, root: Path, port: int, password: str | None, extra: tuple[str, ...]) -> None:
        super().__init__(root, port)
        self.password = password
        self.extra = extra

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        args = [
            redis_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.root),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--daemonize",
            "no",
        ]
        if self.password:
            args += ["--requirepass", self.password]
        return [*args, *self.extra]


def _scratch(prefix: str) -> Path:
    # Not under pytest's tmp folders: those are 0700 root, which the postgres user cannot enter.
    return Path(tempfile.mkdtemp(prefix=prefix))


def start_postgres(password: str = PG_PASSWORD) -> PostgresServer:
    """Start a new PostgreSQL server; raises ServerMissing if it is not installed."""
    bindir = postgres_bindir()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServerMissing(
                "running as root, PostgreSQL needs the 'postgres' user, which the postgresql "
                f"packages create: apt-get install postgresql-{PG_VERSION}"
            ) from None
    root = _scratch("statekeep-pg-")
    os.chmod(root, 0o700)
    server = PostgresServer(root, free_port(), bindir, password)
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


def start_redis(password: str | None = REDIS_PASSWORD, extra: tuple[str, ...] = ()) -> RedisServer:
    """Start a new Redis server (AOF with fsync always unless ``extra`` says otherwise)."""
    redis_binary()
    server = RedisServer(_scratch("statekeep-redis-"), free_port(), password, extra)
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    _started.append(server)
    return server


_started: list[Server] = []
_shared: dict[str, Server | ServerMissing] = {}


def _shared_server(kind: str) -> Server:
    got = _shared.get(kind)
    if got is None:
        try:
            got = start_postgres() if kind == "postgres" else start_redis()
        except ServerMissing as exc:
            got = exc
        _shared[kind] = got
    if isinstance(got, ServerMissing):
        need(got)
    assert isinstance(got, Server)
    return got


def shared_postgres() -> PostgresServer:
    """The PostgreSQL server the tests share (started on first use); skips if not installed."""
    server = _shared_server("postgres")
    assert isinstance(server, PostgresServer)
    return server


def shared_redis() -> RedisServer:
    """The Redis server the tests share (started on first use); skips if not installed."""
    server = _shared_server("redis")
    assert isinstance(server, RedisServer)
    return server


_started_by = os.getpid()


@atexit.register
def stop_all() -> None:
    """Stop and remove every server this process started (a forked child leaves them be)."""
    if os.getpid() != _started_by:
        return
    while _started:
        _started.pop().remove()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    yield shared_postgres()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    yield shared_redis()


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def postgres_store(tmp_path: Any = None, **options: Any) -> Any:
    """A PostgresStore on the shared server, in a schema of its own."""
    from statekeep.stores import PostgresStore

    options.setdefault("schema", unique_name("sk"))
    return PostgresStore(shared_postgres().dsn, **options)


def redis_store(tmp_path: Any = None, **options: Any) -> Any:
    """A RedisStore on the shared server, under a key prefix of its own."""
    from statekeep.stores import RedisStore

    options.setdefault("prefix", unique_name("sk") + ":")
    return RedisStore(shared_redis().url, **options)


# -- shared test bodies ---------------------------------------------------------------


def run_writers(
    kind: str, where: str, namespace: str, states: list[str], *, workers: int, writes: int, pad: int = 0
) -> int:
    """Run ``workers`` writer processes that each append ``writes`` entries to every State
    (read, then append at the seq read, again on StateConflictError), then check every
    State: seqs dense from 0, each (worker, i) exactly once, each worker's in order.
    The States must exist. Returns how many conflicts the writers met in all."""
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.support.servers", "writer", "--kind", kind, "--where", where),
                *("--namespace", namespace, "--name", f"w{n}", "--writes", str(writes), "--pad", str(pad)),
                *states,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for n in range(workers)
    ]
    conflicts = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"writer failed:\n{err.decode(errors='replace')}"
        conflicts += json.loads(out.decode().strip().splitlines()[-1])["conflicts"]
    store = _open(kind, where, namespace)
    try:
        for sid in states:
            record = store.read(sid)
            assert record is not None, sid
            assert [e["seq"] for e in record.entries] == list(range(workers * writes)), sid
            seen = [(e["worker"], e["i"]) for e in record.entries]
            assert sorted(seen) == sorted((f"w{n}", i) for n in range(workers) for i in range(writes)), sid
            for n in range(workers):
                mine = [i for w, i in seen if w == f"w{n}"]
                assert mine == sorted(mine), (sid, n)
            assert record.snapshot is not None and record.snapshot["seq"] == workers * writes - 1
    finally:
        store.close()
    return conflicts


def fail_without_secret(stores: list[Any], secret: str) -> None:
    """Each of ``stores`` (meant to fail: wrong password, nobody there, ...) hides ``secret``
    in its repr and fails its first read without it in any exception of the chain. Closes them."""
    for bad in stores:
        try:
            assert secret not in repr(bad)
            with pytest.raises(Exception) as info:
                bad.read("a")
            chain: list[str] = []
            exc: BaseException | None = info.value
            while exc is not None:
                chain.append(f"{type(exc).__name__}: {exc} {exc.args!r}")
                exc = exc.__cause__ or exc.__context__
            assert not any(secret in text for text in chain), chain
        finally:
            bad.close()


async def stream_through_outage(
    make_store: Any, server: Server, secret: str, *, states: int = 4, pad: int = 64 * 1024
) -> dict[str, int]:
    """Write to several States while ``server`` is killed with SIGKILL and restarted.

    Each writer resends its write after a ConnectionError until it is acknowledged.
    Before resending, it reads the State: the write whose outcome was unknown must be
    there whole or not at all. At the end a fresh store must hold every acknowledged
    write, dense, each exactly once. Returns counts of what happened."""
    store = make_store()
    ids = [f"s{n}" for n in range(states)]
    for sid in ids:
        await store.awrite(sid, [], {"seq": -1}, create=True)
    acked = {sid: 0 for sid in ids}
    counts = {"errors": 0, "whole": 0, "absent": 0}
    stop = asyncio.Event()

    def entry(sid: str, seq: int) -> dict[str, Any]:
        return {"seq": seq, "state": sid, "pad": f"{sid}:{seq}:" + "y" * pad}

    async def writer(sid: str) -> None:
        seq, unknown = 0, False
        while not stop.is_set():
            try:
                if unknown:
                    record = await store.aread(sid)
                    assert record is not None
                    n = len(record.entries)
                    assert n in (seq, seq + 1), (sid, seq, n)
                    if n == seq + 1:
                        assert record.entries[seq] == entry(sid, seq)
                    counts["whole" if n == seq + 1 else "absent"] += 1
                    unknown = False
                await store.awrite(sid, [entry(sid, seq)], {"seq": seq})
            except ConnectionError as exc:
                assert secret not in str(exc) and secret not in repr(exc.__cause__)
                counts["errors"] += 1
                unknown = True
                await asyncio.sleep(0.02)
                continue
            seq += 1
            acked[sid] = seq

    async def wait_acks(more: int) -> None:
        target = sum(acked.values()) + more
        deadline = time.monotonic() + 120
        while sum(acked.values()) < target:
            for task in tasks:
                if task.done():
                    task.result()  # a writer's failed check
            assert time.monotonic() < deadline, f"writes did not go on: {acked} {counts}"
            await asyncio.sleep(0.01)

    tasks = [asyncio.create_task(writer(sid)) for sid in ids]
    try:
        await wait_acks(40)
        await asyncio.to_thread(server.kill)
        errors = counts["errors"]
        deadline = time.monotonic() + 60
        while counts["errors"] == errors:  # writes fail while the server is down
            assert time.monotonic() < deadline, "no write failed while the server was down"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.start)
        await wait_acks(40)  # the same store goes on after the outage
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    await store.aclose()

    fresh = make_store()
    try:
        for sid in ids:
            record = await fresh.aread(sid)
            assert record is not None
            assert record.entries == [entry(sid, seq) for seq in range(acked[sid])], sid
            assert record.snapshot == {"seq": acked[sid] - 1}
        await fresh.awrite(ids[0], [entry(ids[0], acked[ids[0]])], None)  # and it goes on
    finally:
        await fresh.aclose()
    return {**counts, "acked": sum(acked.values())}


# -- a writer for the multi-process tests ------------------------------------------------


def _open(kind: str, where: str, namespace: str) -> Any:
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        return PostgresStore(where, schema=namespace)
    from statekeep.stores import RedisStore

    return RedisStore(where, prefix=namespace)


async def _writer(args: argparse.Namespace) -> dict[str, Any]:
    """Append ``args.writes`` entries to each State, each one read-then-append, retried on
    StateConflictError; report how many conflicts it met."""
    from statekeep import StateConflictError

    store = _open(args.kind, args.where, args.namespace)
    conflicts = 0

    async def one_state(sid: str) -> None:
        nonlocal conflicts
        for i in range(args.writes):
            entry = {"worker": args.name, "i": i, "pad": "x" * args.pad}
            while True:
                record = await store.aread(sid)
                assert record is not None
                seq = len(record.entries)
                snapshot = {"last": args.name, "seq": seq}
                try:
                    await store.awrite(sid, [{"seq": seq, **entry}], snapshot)
                    break
                except StateConflictError:
                    conflicts += 1

    try:
        await asyncio.gather(*(one_state(sid) for sid in args.states))
    finally:
        await store.aclose()
    return {"worker": args.name, "conflicts": conflicts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.servers")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("writer", help="append to States from this process (multi-process tests)")
    w.add_argument("--kind", choices=["postgres", "redis"], required=True)
    w.add_argument("--where", required=True, help="DSN or URL")
    w.add_argument("--namespace", required=True, help="schema or key prefix")
    w.add_argument("--name", required=True)
    w.add_argument("--writes", type=int, required=True)
    w.add_argument("--pad", type=int, default=0)
    w.add_argument("states", nargs="+")
    args = parser.parse_args(argv)
    result = asyncio.run(_writer(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
