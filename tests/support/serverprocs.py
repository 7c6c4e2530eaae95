"""PostgreSQL and Redis server processes for the tests and the benchmarks: where their binaries
are, a free port, and a server run from its own folder, restartable on the same port and data
(:mod:`tests.support.servers` starts and shares them)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

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


# -- Postgres failover: a primary and a hot standby (issue 27) --------------------------


class ReplicatedPostgres(PostgresServer):
    """A :class:`PostgresServer` run with more ``-c`` settings: a primary that may wait for a
    synchronous standby, or a hot standby made by :meth:`base_backup`."""

    def __init__(self, root: Path, port: int, bindir: Path, password: str, settings: tuple[str, ...]) -> None:
        super().__init__(root, port, bindir, password)
        self.settings = settings

    def command(self) -> list[str]:
        extra = [arg for setting in self.settings for arg in ("-c", setting)]
        return [*super().command(), *extra]

    def _postgres_env(self) -> dict[str, str]:
        return {**os.environ, "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "10"}

    def base_backup(self, primary: PostgresServer) -> None:
        """Make this server's data a copy of ``primary``'s, set up to follow it as a hot standby
        (``pg_basebackup -R``: ``standby.signal`` and ``primary_conninfo``)."""
        self.sockets.mkdir()
        self.log.touch()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets, self.log):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        command = [str(self.bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port)]
        command += ["-U", "postgres", "-D", str(self.data), "-R", "-X", "stream", "--no-sync"]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=self._postgres_env(),
            preexec_fn=_die_with_parent,
            **self._as_postgres(),
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed:\n{result.stdout}\n{result.stderr}")

    def promote(self) -> None:
        """Promote this standby to a primary (``pg_ctl promote``), waiting until it takes writes."""
        command = [str(self.bindir / "pg_ctl"), "promote", "-w", "-t", "60", "-D", str(self.data)]
        result = subprocess.run(command, capture_output=True, text=True, **self._as_postgres())
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl promote failed:\n{result.stdout}\n{result.stderr}\n{_tail(self.log)}")

    def sql(self, query: str) -> str:
        """The output of ``query`` run by psql on this server (unaligned, tuples only)."""
        command = [str(self.bindir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        command += ["-d", "postgres", "-XAtq", "-c", query]
        result = subprocess.run(command, capture_output=True, text=True, env=self._postgres_env())
        if result.returncode != 0:
            raise RuntimeError(f"psql failed on {query!r}:\n{result.stderr}")
        return result.stdout.strip()

    def wait_for_standby(self, sync: bool) -> None:
        """Wait until a standby streams from this primary (and is its synchronous one, if ``sync``)."""
        want = "sync" if sync else "async"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            states = self.sql("SELECT state || ':' || sync_state FROM pg_stat_replication").split()
            if f"streaming:{want}" in states:
                return
            time.sleep(0.05)
        raise RuntimeError(f"no {want} standby streams from the primary:\n{_tail(self.log)}")


# -- PgBouncer (issue 27): a pooler in transaction mode in front of a throwaway PostgreSQL --------


def pgbouncer_binary() -> str:
    """The ``pgbouncer`` program (Debian puts it in /usr/sbin, often not on a user's PATH)."""
    path = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if path is None:
        raise ServerMissing("pgbouncer not found; install it with: apt-get install pgbouncer")
    return path


class PgBouncerServer(Server):
    """``pgbouncer`` on 127.0.0.1:port in ``pool_mode`` (transaction by default) in front of
    ``postgres``: every database of that server, at most ``pool_size`` server connections per
    database and user, however many clients connect (they queue for one). Clients log in as
    ``postgres`` with the server's password (SCRAM), which pgbouncer also uses to log in to
    PostgreSQL. PgBouncer refuses to run as root: as root it runs as the ``postgres`` user."""

    name = "pgbouncer"
    stop_signal = signal.SIGINT  # pgbouncer's immediate shutdown

    def __init__(
        self, root: Path, port: int, postgres: PostgresServer, pool_size: int, pool_mode: str
    ) -> None:
        super().__init__(root, port)
        self.postgres = postgres
        self.pool_size = pool_size
        self.pool_mode = pool_mode
        self.config = root / "pgbouncer.ini"

    @property
    def dsn(self) -> str:
        """The DSN of the ``postgres`` database through the pooler (without statekeep's
        ``pooler`` parameter: add it, or pass ``pooler=``, as a user must)."""
        return f"postgresql://postgres:{self.postgres.password}@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        users = self.root / "userlist.txt"
        users.write_text(f'"postgres" "{self.postgres.password}"\n')
        self.config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host=127.0.0.1 port={self.postgres.port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = scram-sha-256",
                    f"auth_file = {users}",
                    f"pool_mode = {self.pool_mode}",
                    f"default_pool_size = {self.pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    "max_client_conn = 500",
                    "max_db_connections = 0",
                    "server_reset_query =",
                    "server_check_delay = 0",
                    "query_wait_timeout = 60",
                    "log_connections = 0",
                    "log_disconnections = 0",
                    "",
                ]
            )
        )
        os.chmod(users, 0o600)
        self.log.touch()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.root, users, self.config, self.log):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def popen_kwargs(self) -> dict[str, Any]:
        return self.postgres._as_postgres()

    def command(self) -> list[str]:
        return [pgbouncer_binary(), str(self.config)]


# -- Redis Cluster (issue 27) ---------------------------------------------------------------


def redis_cli_binary() -> str:
    path = shutil.which("redis-cli")
    if path is None:
        raise ServerMissing("redis-cli not found; install it with: apt-get install redis-tools")
    return path


def cluster_node_args(password: str | None, node_timeout_ms: int) -> tuple[str, ...]:
    """The extra redis-server arguments of a cluster node (its replicas log in with the password)."""
    args = (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        str(node_timeout_ms),
        # A replica takes over even when it lost touch with its master a while ago (the tests
        # kill masters under load; the default factor can leave a shard without a master).
        "--cluster-replica-validity-factor",
        "0",
    )
    if password:
        args += ("--masterauth", password)
    return args


def redis_cli(port: int, password: str | None, *args: str, timeout: float = START_TIMEOUT) -> str:
    """Run ``redis-cli`` against 127.0.0.1:port; its output (RuntimeError if it fails)."""
    auth = ["--no-auth-warning", "-a", password] if password else []
    done = subprocess.run(
        [redis_cli_binary(), "-h", "127.0.0.1", "-p", str(port), *auth, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"redis-cli {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def cluster_info(port: int, password: str | None) -> dict[str, str]:
    """``CLUSTER INFO`` of the node on ``port``, as a dict ({} if it does not answer)."""
    try:
        text = redis_cli(port, password, "CLUSTER", "INFO", timeout=5)
    except (RuntimeError, subprocess.TimeoutExpired):
        return {}
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)
