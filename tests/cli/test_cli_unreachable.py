"""Exit status 4: the store's server cannot be reached or refused statekeep, said in
statekeep's words (the server, what to check), never as a driver's exception; and a
password masked where it stands in a URL, nothing else of a message touched."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner

from statekeep._core.passwords import redact_url
from statekeep.cli import main
from tests.support import servers

DRIVER_NAMES = ("Error:", "Exception", "asyncpg", "redis.", "Errno", "Traceback")


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def pg_url(*, user: str = "postgres", password: str | None = None, port: int | None = None) -> str:
    server = servers.shared_postgres()
    secret = server.password if password is None else password
    return f"postgresql://{user}:{secret}@127.0.0.1:{port or server.port}"


def redis_url(*, password: str | None = None, port: int | None = None, db: int = 0) -> str:
    server = servers.shared_redis()
    secret = server.password if password is None else password
    return f"redis://:{secret}@127.0.0.1:{port or server.port}/{db}"


CASES = {
    # name: (url maker, what the one line must say besides where the server is)
    "pg-missing-database": (lambda: pg_url() + "/no_such_db", ("no database 'no_such_db'", "check")),
    "pg-unknown-role": (lambda: pg_url(user="nobody") + "/postgres", ("'nobody'", "check")),
    "pg-wrong-password": (lambda: pg_url(password="not-it") + "/postgres", ("password", "check")),
    "pg-closed-port": (lambda: pg_url(port=servers.free_port()) + "/postgres", ("reached", "check")),
    "pg-unknown-parameter": (lambda: pg_url() + "/postgres?bogus=1", ("'bogus'", "namespace")),
    "redis-db-99": (lambda: redis_url(db=99), ("no database 99", "check")),
    "redis-wrong-password": (lambda: redis_url(password="not-it"), ("password", "check")),
    "redis-closed-port": (lambda: redis_url(port=servers.free_port()), ("reached", "check")),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", [["list"], ["show", "x"], ["stats"]], ids=["list", "show", "stats"])
def test_a_server_that_refuses_or_cannot_be_reached_is_exit_status_4(case: str, command: list[str]) -> None:
    make, said = CASES[case]
    url = make()
    code, out, err = cli(*command, "--store", url)
    assert code == 4, err
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("statekeep: "), err
    port = url.split("@127.0.0.1:")[1].split("/")[0]
    assert f"127.0.0.1:{port}" in err, err
    for words in said:
        assert words in err, err
    assert not any(name in err for name in DRIVER_NAMES), err
    assert "not-it" not in err and servers.PG_PASSWORD not in err, err


def test_exit_status_4_is_in_the_help() -> None:
    code, out, _ = cli("--help")
    assert code == 0 and "4 store unreachable" in " ".join(out.split())


# -- item 15: a password is masked where it stands, nothing else ---------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_a_short_password_masks_only_itself(scheme: str) -> None:
    # A password "1" once turned "[Errno 111]" into "[Errno ***]" and 127.0.0.1 into ***27.0.0.***.
    port = servers.free_port()
    url = f"{scheme}://postgres:1@127.0.0.1:{port}/0"
    assert redact_url(url) == f"{scheme}://postgres:***@127.0.0.1:{port}/0"
    code, _, err = cli("list", "--store", url)
    assert code == 4 and f"127.0.0.1:{port}" in err and "***" not in err, err


def test_a_message_quoting_the_url_masks_the_password_only() -> None:
    # A database that is not a statekeep store, opened by a user whose password is "1".
    server = servers.shared_postgres()
    name = servers.unique_name("plain")
    admin = f"{server.dsn.rsplit('/', 1)[0]}/postgres"
    subprocess.run(
        [str(server.bindir / "psql"), admin, "-qc", f"CREATE ROLE {name} LOGIN PASSWORD '1'"], check=True
    )
    subprocess.run(
        [str(server.bindir / "psql"), admin, "-qc", f"CREATE DATABASE {name} OWNER {name}"], check=True
    )
    url = f"postgresql://{name}:1@127.0.0.1:{server.port}/{name}"
    code, _, err = cli("list", "--store", url)
    assert code == 3, err
    assert f"postgresql://{name}:***@127.0.0.1:{server.port}/{name}" in err, err
    assert err.count("***") == 1, err


def test_a_user_name_alone_is_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # A URL with a user name and no password: every "postgres" in a message became "***".
    monkeypatch.setenv("PGPASSWORD", "not-it")
    url = f"postgresql://postgres@127.0.0.1:{servers.shared_postgres().port}/postgres"
    code, _, err = cli("list", "--store", url)
    assert code == 4 and "'postgres'" in err and "***" not in err, err


def test_the_demo_hint_masks_the_password_only() -> None:
    url = pg_url() + "/postgres"
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "demo", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert servers.PG_PASSWORD not in proc.stdout
    lines = proc.stdout.splitlines()
    [hint] = [line for line in lines if "statekeep show" in line]
    shown = shlex.split(hint.split(": ", 1)[1])[-1]
    assert "(with your password in place of ***)" in lines
    assert shown.replace("***", servers.PG_PASSWORD, 1) == url  # the password, and only it, masked
