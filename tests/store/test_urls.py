"""open_store(url) and the CLI's --store: one string names any store."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import uuid
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from statekeep import FileStore, MemoryStore, SQLiteStore, State, open_store
from statekeep._core.passwords import redact_url
from statekeep.cli import main
from tests.support import servers


def test_a_folder_path_is_a_file_store(tmp_path: Path) -> None:
    assert open_store(tmp_path / "runs") == FileStore(tmp_path / "runs")
    assert open_store(str(tmp_path / "runs")) == FileStore(tmp_path / "runs")
    assert open_store(f"file://{tmp_path}/runs") == FileStore(tmp_path / "runs")
    assert open_store(f"file://localhost{tmp_path}/with%20space") == FileStore(tmp_path / "with space")


def test_file_urls_name_local_folders_only() -> None:
    with pytest.raises(ValueError, match="file:///path"):
        open_store("file://elsewhere/runs")


def test_memory_url_is_a_new_memory_store() -> None:
    a, b = open_store("memory://"), open_store("memory://")
    assert isinstance(a, MemoryStore) and a != b


def test_sqlite_urls_as_sqlalchemy_spells_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///runs.db")
    assert isinstance(relative, SQLiteStore) and relative == SQLiteStore(tmp_path / "runs.db")
    assert open_store(f"sqlite:///{tmp_path}/abs.db".replace(":///", ":////", 1)) == SQLiteStore(
        tmp_path / "abs.db"
    )
    for bad in ("sqlite://", "sqlite:///"):
        with pytest.raises(ValueError, match=r"sqlite:///relative\.db"):
            open_store(bad)


def test_unknown_scheme_is_named_and_no_password_shown() -> None:
    with pytest.raises(ValueError, match="unknown store URL scheme 'mongodb'") as info:
        open_store("mongodb://user:hunter2@db.example/x")
    assert "hunter2" not in str(info.value)


def test_server_urls_open_server_stores() -> None:
    from statekeep.stores import PostgresStore, RedisStore

    pg = open_store("postgresql://me:secret@127.0.0.1:1/db")
    assert isinstance(pg, PostgresStore) and "secret" not in repr(pg)
    assert isinstance(open_store("postgres://127.0.0.1:1/db"), PostgresStore)
    assert isinstance(open_store("redis://127.0.0.1:1/0"), RedisStore)


@pytest.mark.parametrize(("url", "extra"), [("postgresql://h/db", "postgres"), ("redis://h:1/0", "redis")])
def test_a_missing_driver_says_which_extra(monkeypatch: pytest.MonkeyPatch, url: str, extra: str) -> None:
    driver = "asyncpg" if extra == "postgres" else "redis"
    monkeypatch.setitem(sys.modules, driver, None)  # as if not installed
    for name in (
        "statekeep.stores._postgres",
        "statekeep.stores._redis",
        "redis.asyncio",
        "redis.exceptions",
    ):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'statekeep\[{extra}\]'"):
        open_store(url)


def saved(store_url: str) -> str:
    sid = f"url-{uuid.uuid4().hex[:10]}"
    with open_store(store_url) as store:
        store.save(State("named by a URL", id=sid))
    return sid


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_cli_reads_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db".replace(":///", ":////", 1)
    sid = saved(url)
    code, out = cli("list", "--store", url)
    assert code == 0 and sid in out and "named by a URL" in out
    code, out = cli("show", sid, "--store", url)
    assert code == 0 and "task" in out
    assert cli("delete", sid, "--store", url, "--yes")[0] == 0
    assert cli("show", sid, "--store", url)[0] == 1


def test_cli_never_creates_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nothing.db".replace(":///", ":////", 1)
    code, out = cli("list", "--store", url)
    assert code == 1 and "no store at" in out
    assert not (tmp_path / "nothing.db").exists()


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_cli_reads_a_server_store(kind: str) -> None:
    url = servers.shared_postgres().dsn if kind == "postgres" else servers.shared_redis().url
    sid = saved(url)
    code, out = cli("list", "--store", url)
    assert code == 0 and sid in out
    assert cli("show", sid, "--store", url)[0] == 0
    assert cli("delete", sid, "--store", url, "--yes")[0] == 0
    code, out = cli("show", sid, "--store", url)
    assert code == 1 and "secret" not in out and servers.PG_PASSWORD not in out


# -- passwords: one redaction rule for every URL ----------------------------------------------


@pytest.mark.parametrize("password", ["Qz1/Wk2", "Qz1?Wk2", "Qz1#Wk2", "Qz1@Wk2/Vb3#Nm4?"])
@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_a_password_with_unescaped_url_characters_is_refused_unshown(scheme: str, password: str) -> None:
    # Drivers would end the password at '/', '?' or '#' and take the rest for the host.
    url = f"{scheme}://user:{password}@127.0.0.1:{servers.free_port()}/0"
    shown = {p for p in (password, *re.split("[/?#@]", password)) if len(p) >= 3}
    with pytest.raises(ValueError, match="%2F, %3F and %23") as info:
        open_store(url)
    assert not any(part in str(info.value) for part in shown), info.value
    code, out = cli("list", "--store", url)
    assert code == 2 and "%2F" in out
    assert not any(part in out for part in shown), out


@pytest.mark.parametrize("password", ["Qz1@Wk2@Vb3", "Qz1%2FWk2%3F%23"])
@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_an_odd_password_is_in_no_repr_or_error(scheme: str, password: str) -> None:
    port = servers.free_port()  # loopback, nothing listening
    url = f"{scheme}://user:{password}@127.0.0.1:{port}/0"
    shown = {p for p in (password, unquote(password), *re.split("[@%]", password)) if len(p) >= 4}
    with open_store(url) as store:
        assert not any(part in repr(store) for part in shown), repr(store)
        assert f"127.0.0.1:{port}" in repr(store)
        with pytest.raises(ConnectionError) as info:
            store.list()
        message = str(info.value)
        assert f"127.0.0.1:{port}" in message  # the host is found past the odd password
        assert not any(part in message for part in shown), message
    code, out = cli("list", "--store", url)
    assert code == 4 and f"127.0.0.1:{port}" in out  # store unreachable
    assert not any(part in out for part in shown), out


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://127.0.0.1:{port}/db?user=u&password=hunter2xyz",
        "redis://127.0.0.1:{port}/0?password=hunter2xyz",
        "postgresql://u:hunter2xyz@127.0.0.1:{port}/db",
    ],
)
def test_the_cli_never_prints_a_password(url: str) -> None:
    url = url.format(port=servers.free_port())
    for command in (["list"], ["show", "x"], ["delete", "x", "--yes"]):
        code, out = cli(*command, "--store", url)
        assert code == 4, out  # store unreachable
        assert "hunter2xyz" not in out and "127.0.0.1" in out, out


@pytest.mark.parametrize(("scheme", "param"), [("postgresql", "application_name"), ("redis", "client_name")])
def test_an_at_sign_in_the_query_is_not_part_of_the_password(scheme: str, param: str) -> None:
    port = servers.free_port()  # loopback, nothing listening
    url = f"{scheme}://user:Qz1Wk2Vb3@127.0.0.1:{port}/0?{param}=me@work"
    assert redact_url(url) == f"{scheme}://user:***@127.0.0.1:{port}/0?{param}=me@work"
    with open_store(url) as store:  # a valid URL: not refused
        assert f"127.0.0.1:{port}" in repr(store) and "Qz1Wk2Vb3" not in repr(store)
        with pytest.raises(ConnectionError) as info:
            store.list()
    assert f"127.0.0.1:{port}" in str(info.value) and "Qz1Wk2Vb3" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "dist", "old"),
    [("postgresql://127.0.0.1:1/db", "asyncpg", "0.29.0"), ("redis://127.0.0.1:1/0", "redis", "5.0.1")],
)
def test_a_driver_older_than_the_floor_is_refused_when_the_store_is_made(
    monkeypatch: pytest.MonkeyPatch, url: str, dist: str, old: str
) -> None:
    # asyncpg 0.29 lacks fetchmany (batched commits turn off silently); redis-py 5 does not
    # check rediss:// host names. pip's floors can be bypassed, so the store checks too.
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: old if d == dist else real(d))
    with pytest.raises(ImportError, match=rf"needs {dist} [\d.]+ or newer, found {re.escape(old)}"):
        open_store(url)


# -- ?namespace= and ?retention= -------------------------------------------------------------------


def test_lifecycle_parameters_are_split_from_the_url() -> None:
    from datetime import timedelta

    from statekeep.stores._urls import split_lifecycle

    assert split_lifecycle("sqlite:///runs.db?namespace=team-a&retention=3600") == (
        "sqlite:///runs.db",
        {"namespace": "team-a", "retention": timedelta(hours=1)},
    )
    assert split_lifecycle("postgresql://u:p@h/db?sslmode=disable&retention=0.5&x=%26") == (
        "postgresql://u:p@h/db?sslmode=disable&x=%26",  # the driver's parameters stay as written
        {"retention": timedelta(seconds=0.5)},
    )
    assert split_lifecycle("memory://") == ("memory://", {})
    assert split_lifecycle("runs?namespace=a") == ("runs", {"namespace": "a"})
    assert split_lifecycle("odd?name") == ("odd?name", {})  # open_store refuses 'name' (see test_url_params)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("namespace=Team", "namespace"),
        ("namespace=", "namespace"),
        ("namespace=a.b", "namespace"),
        ("retention=0", "retention"),
        ("retention=-5", "retention"),
        ("retention=soon", "retention"),
        ("retention=inf", "retention"),
        ("retention=nan", "retention"),
        ("namespace=a&namespace=b", "namespace twice"),
    ],
)
def test_bad_lifecycle_parameters_are_value_errors_naming_them(query: str, named: str) -> None:
    for url in (f"memory://?{query}", f"sqlite:///x.db?{query}", f"postgresql://h/db?{query}"):
        with pytest.raises(ValueError, match=named):
            open_store(url)


def test_a_parameter_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="namespace is given twice"):
        open_store("memory://?namespace=a", namespace="b")


def lifecycle_url(kind: str, tmp_path: Path) -> str:
    query = f"namespace=n{uuid.uuid4().hex[:8]}&retention=3600"
    return {
        "memory": f"memory://?{query}",
        "file": f"{tmp_path}/runs?{query}",
        "file-url": f"file://{tmp_path}/runs?{query}",
        "sqlite": f"sqlite:///{tmp_path}/runs.db?{query}".replace(":///", ":////", 1),
        "postgres": f"{servers.shared_postgres().dsn}?{query}",
        "redis": f"{servers.shared_redis().url}?{query}",
    }[kind]


LIFECYCLE_KINDS = ["memory", "file", "file-url", "sqlite", "postgres", "redis"]


@pytest.mark.parametrize("kind", LIFECYCLE_KINDS)
def test_every_store_kind_takes_namespace_and_retention(kind: str, tmp_path: Path) -> None:
    from datetime import timedelta

    url = lifecycle_url(kind, tmp_path)
    with open_store(url) as store:
        assert store.namespace == url.split("namespace=")[1].split("&")[0]  # type: ignore[attr-defined]
        assert store.retention == timedelta(hours=1)  # type: ignore[attr-defined]
        store.save(State("in a namespace", id="spaced"))
        if kind != "memory":
            with open_store(url.split("?namespace")[0]) as default:
                assert default.read("spaced") is None  # another namespace
            with open_store(url) as again:
                assert again.load("spaced").task == "in a namespace"


def test_the_cli_lists_one_namespace(tmp_path: Path) -> None:
    url = f"{tmp_path}/runs?namespace=team-a"
    with open_store(url) as store:
        store.save(State("team a's", id="mine"))
    with open_store(f"{tmp_path}/runs") as store:
        store.save(State("the default's", id="theirs"))
    code, out = cli("list", "--store", url)
    assert code == 0 and "mine" in out and "theirs" not in out
