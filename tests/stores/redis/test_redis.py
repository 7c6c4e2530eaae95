"""RedisStore beyond the conformance suite: scripts, key prefixes, the durability warning,
passwords, clients of your own, TLS. Runs on throwaway servers (tests/support/servers.py); what it
shares with PostgresStore (many processes, a crashing server, fork, dropped stores):
tests/stores/test_servers.py."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeep import CorruptStateError, Record, UnsupportedFormatError
from statekeep._runtime.bridge import owner, run_sync
from statekeep.testing import entries, snapshot
from tests.support import servers
from tests.support.servers import RedisServer, unique_name
from tests.support.settle import drop_and_collect

aioredis = pytest.importorskip("redis.asyncio")

from statekeep.stores import RedisStore  # noqa: E402
from statekeep.stores._redis import LAYOUT_VERSION, redact_url  # noqa: E402


@pytest.fixture
def rs(redis_server: RedisServer) -> Iterator[RedisStore]:
    store = RedisStore(redis_server.url, prefix=unique_name("sk") + ":")
    yield store
    store.close()


def raw(server: RedisServer, *command: Any) -> Any:
    """Run one command on a client of its own (not the store's)."""

    async def go() -> Any:
        client = aioredis.Redis.from_url(server.url)
        try:
            return await client.execute_command(*command)
        finally:
            await client.aclose()

    return asyncio.run(go())


def own_server(**kwargs: Any) -> RedisServer:
    try:
        return servers.start_redis(**kwargs)
    except servers.ServerMissing as exc:
        servers.need(exc)
        raise


# -- writes ------------------------------------------------------------------------------


async def test_a_different_entry_in_another_key_order_is_still_a_conflict(rs: RedisStore) -> None:
    from statekeep import StateConflictError

    await rs.awrite("a", [{"seq": 0, "a": 1, "b": 2}], None, create=True)
    with pytest.raises(StateConflictError, match="seq 0"):
        await rs.awrite("a", [{"b": 3, "a": 1, "seq": 0}, {"seq": 1}], None)
    assert (await rs.aread("a")).entries == [{"seq": 0, "a": 1, "b": 2}]


def test_writes_go_on_after_the_server_forgets_its_scripts(redis_server: RedisServer, rs: RedisStore) -> None:
    rs.write("a", entries(0, 1), snapshot(), create=True)
    assert len(rs.list()) == 1
    raw(redis_server, "SCRIPT", "FLUSH")
    rs.write("a", entries(1, 1), snapshot(turn=1))
    assert len(rs.list()) == 1
    assert rs.read("a") == Record(entries(0, 2), snapshot(turn=1))


async def test_a_big_write_goes_in_whole(rs: RedisStore) -> None:
    # More entries than one Lua unpack() takes at once.
    await rs.awrite("big", entries(0, 2500), snapshot(), create=True)
    await rs.awrite("big", entries(1000, 4000), None)  # 1500 skipped, 2500 new
    assert (await rs.aread("big")).entries == entries(0, 5000)


# -- a server of its own -----------------------------------------------------------------


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = own_server()
    yield server
    server.remove()


# -- key prefixes ------------------------------------------------------------------------


@pytest.mark.parametrize("glob", ["*", "?", "[]", "[a-z]", "\\", "*?[]"])
def test_glob_characters_in_a_prefix_see_only_their_own_states(redis_server: RedisServer, glob: str) -> None:
    base = unique_name("g")
    prefixes = [f"{base}{glob}:", f"{base}a:", f"{base}:", f"{base}{glob}{glob}:", base]
    stores = [RedisStore(redis_server.url, prefix=p) for p in prefixes]
    try:
        for n, store in enumerate(stores):
            store.write(f"s{n}", entries(0, 1), snapshot(f"t{n}"), create=True)
        for n, store in enumerate(stores):
            assert [r.id for r in store.list()] == [f"s{n}"], prefixes[n]
            assert [store.read(f"s{m}") is not None for m in range(len(stores))] == [
                m == n for m in range(len(stores))
            ]
    finally:
        for store in stores:
            store.close()


def test_delete_removes_every_key_of_the_state(redis_server: RedisServer, rs: RedisStore) -> None:
    rs.write("a", entries(0, 3), snapshot(), create=True)
    rs.write("b", entries(0, 1), snapshot(), create=True)
    rs.delete("a")
    keys = sorted(raw(redis_server, "KEYS", rs.prefix.replace("*", "\\*") + "*"))
    p = rs.prefix.encode()
    indexes = [k for k in keys if k.startswith(p + b"ix:") and k not in (p + b"ix:rows", p + b"ix:expiry")]
    assert [k for k in keys if k not in indexes] == [
        p + b"entries:b",
        p + b"ix:rows",
        p + b"layout",
        p + b"state:b",
    ]
    assert p + b"ix:all" in indexes
    for index in indexes:  # b's entries only
        assert [m[18:] for m in raw(redis_server, "ZRANGE", index, 0, -1)] == [b"b"]
    assert raw(redis_server, "HKEYS", p + b"ix:rows") == [b"b"]


def test_prefix_must_be_text(redis_server: RedisServer) -> None:
    with pytest.raises(TypeError, match="prefix must be a str"):
        RedisStore(redis_server.url, prefix=b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lone surrogate"):
        RedisStore(redis_server.url, prefix="\udcff")


def test_newer_layout_is_refused(redis_server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    raw(redis_server, "SET", prefix + "layout", str(LAYOUT_VERSION + 1))
    store = RedisStore(redis_server.url, prefix=prefix)
    try:
        with pytest.raises(
            UnsupportedFormatError, match=f"layout version {LAYOUT_VERSION + 1}, made by a newer statekeep"
        ):
            store.read("a")
    finally:
        store.close()


def test_a_foreign_layout_key_is_refused(redis_server: RedisServer) -> None:
    prefix = unique_name("sk") + ":"
    raw(redis_server, "SET", prefix + "layout", "something else")
    store = RedisStore(redis_server.url, prefix=prefix)
    try:
        with pytest.raises(CorruptStateError, match="not a statekeep layout version"):
            store.read("a")
    finally:
        store.close()


def test_corrupt_entry_is_reported_with_its_seq(redis_server: RedisServer, rs: RedisStore) -> None:
    rs.write("a", entries(0, 3), snapshot(), create=True)
    raw(redis_server, "LSET", rs.prefix + "entries:a", 1, b"{nope")
    with pytest.raises(CorruptStateError, match="seq 1"):
        rs.read("a")


# -- the durability warning --------------------------------------------------------------


def first_use_warnings(url: str) -> list[str]:
    store = RedisStore(url, prefix=unique_name("sk") + ":")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store.write("a", [], None, create=True)
            store.read("a")  # once only
    finally:
        store.close()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_no_warning_for_a_durable_server(redis_server: RedisServer) -> None:
    fresh = own_server()  # appendonly yes, appendfsync always; not checked yet by this process
    try:
        assert first_use_warnings(fresh.url) == []
    finally:
        fresh.remove()


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        (("--appendfsync", "everysec"), "appendonly=yes, appendfsync=everysec"),
        (("--appendonly", "no"), "appendonly=no, appendfsync=always"),
    ],
)
def test_warning_names_the_weak_settings(extra: tuple[str, ...], shown: str) -> None:
    server = own_server(extra=extra)
    try:
        caught = first_use_warnings(server.url)
        assert len(caught) == 1, caught
        assert shown in caught[0] and "'appendonly yes' and 'appendfsync always'" in caught[0]
        assert first_use_warnings(server.url) == []  # once per server
    finally:
        server.remove()


def test_warning_when_config_is_disabled() -> None:
    server = own_server(extra=("--rename-command", "CONFIG", ""))
    try:
        caught = first_use_warnings(server.url)
        assert len(caught) == 1 and "could not check the durability settings" in caught[0], caught
        assert "'appendonly yes' and 'appendfsync always'" in caught[0]
    finally:
        server.remove()


# -- passwords ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:s3%40cret@h/1", "rediss://user:***@h/1"),
        ("redis://:pa/ss?x#y@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://h:6379/0?password=s3cret&db=1", "redis://h:6379/0?password=***&db=1"),
        ("unix:///run/redis.sock?password=s3cret", "unix:///run/redis.sock?password=***"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_password_is_in_no_repr_or_error(redis_server: RedisServer) -> None:
    secret = redis_server.password
    assert secret
    good = RedisStore(redis_server.url, prefix=unique_name("sk") + ":")
    try:
        assert secret not in repr(good) and "***" in repr(good)
        good.write("a", [], None, create=True)
    finally:
        good.close()
    failures = [
        RedisStore(redis_server.url.replace(secret, secret + "x")),  # wrong password
        RedisStore(f"redis://:{secret}@127.0.0.1:{servers.free_port()}/0"),  # nobody there
        RedisStore(f"redis://127.0.0.1:{redis_server.port}/0?password={secret}y"),
    ]
    servers.fail_without_secret(failures, secret)


# -- the client --------------------------------------------------------------------------


def test_a_client_of_your_own_is_used_and_left_open(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    store = RedisStore(client=client, prefix=unique_name("sk") + ":")
    store.write("a", entries(0, 1), snapshot(), create=True)
    assert store.read("a") == Record(entries(0, 1), snapshot())
    store.close()

    async def ping_then_close() -> Any:
        try:
            return await client.ping()
        finally:
            await client.aclose()

    assert run_sync(ping_then_close(), "ping") is True


def test_a_closed_store_closes_its_client(rs: RedisStore) -> None:
    rs.write("a", [], None, create=True)
    closers = len(owner().closers)
    rs.close()
    assert len(owner().closers) == closers - 1


def test_a_store_with_your_client_is_dropped_without_warning(own_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(own_redis.url)
    stores = [RedisStore(client=client)]
    stores[0].write("a", [], None, create=True)
    assert drop_and_collect(stores) == []  # the client is yours: the store neither closes it nor warns
    assert run_sync(client.ping(), "ping") is True
    run_sync(client.aclose(), "aclose")


# -- keys of another type, eviction ------------------------------------------------------------


@pytest.mark.parametrize("which", ["state", "entries", "index", "rows", "expiry"])
def test_a_key_of_the_wrong_type_fails_the_write_before_anything_is_written(
    redis_server: RedisServer, rs: RedisStore, which: str
) -> None:
    rs.write("a", entries(0, 1), snapshot(), create=True)
    names = {
        "state": "state:a",
        "entries": "entries:a",
        "index": "ix:all",
        "rows": "ix:rows",
        "expiry": "ix:expiry",
    }
    key = names[which]
    dump = raw(redis_server, "DUMP", rs.prefix + key)
    raw(redis_server, "DEL", rs.prefix + key)
    raw(redis_server, "SET", rs.prefix + key, "something else")
    before = {k: raw(redis_server, "DUMP", rs.prefix + k) for k in names.values()}
    with pytest.raises(CorruptStateError, match=f"{key}.*holds a string.*nothing of the write"):
        rs.write("a", entries(1, 2), snapshot(turn=2))
    assert {k: raw(redis_server, "DUMP", rs.prefix + k) for k in before} == before
    raw(redis_server, "DEL", rs.prefix + key)
    if dump is not None:  # the expiry index is empty without expiries
        raw(redis_server, "RESTORE", rs.prefix + key, 0, dump, "REPLACE")
    assert rs.read("a") == Record(entries(0, 1), snapshot())


def test_a_policy_that_evicts_any_key_is_warned_about() -> None:
    server = own_server(extra=("--maxmemory-policy", "allkeys-lru"))
    try:
        caught = first_use_warnings(server.url)
        assert len(caught) == 1, caught
        assert "maxmemory-policy allkeys-lru" in caught[0] and "noeviction" in caught[0]
    finally:
        server.remove()


def test_a_volatile_policy_is_warned_about_when_statekeep_keys_have_a_ttl() -> None:
    server = own_server(extra=("--maxmemory-policy", "volatile-lru"))
    try:
        prefix = unique_name("sk") + ":"
        raw(server, "SET", prefix + "layout", str(LAYOUT_VERSION), "EX", 3600)
        store = RedisStore(server.url, prefix=prefix)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                store.list()
        finally:
            store.close()
        [message] = [str(w.message) for w in caught]
        assert "maxmemory-policy volatile-lru, and they have a TTL" in message
    finally:
        server.remove()


def test_a_volatile_policy_is_warned_about_when_a_states_keys_have_a_ttl() -> None:
    server = own_server(extra=("--maxmemory-policy", "volatile-lru"))
    try:
        prefix = unique_name("sk") + ":"
        raw(server, "SET", prefix + "layout", str(LAYOUT_VERSION))  # no TTL here,
        raw(server, "ZADD", prefix + "ix:all", 0, "0" * 18 + "a")
        raw(server, "HSET", prefix + "state:a", "next", 0)
        raw(server, "EXPIRE", prefix + "state:a", 3600)  # but on a State's key
        store = RedisStore(server.url, prefix=prefix)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                store.list()
        finally:
            store.close()
        assert any("maxmemory-policy volatile-lru, and they have a TTL" in str(w.message) for w in caught)
    finally:
        server.remove()


def test_a_volatile_policy_without_ttls_is_no_warning() -> None:
    server = own_server(extra=("--maxmemory-policy", "volatile-lru"))
    try:
        assert first_use_warnings(server.url) == []
    finally:
        server.remove()


# -- TLS ------------------------------------------------------------------------------------------


def _certificates(folder: Path, names: dict[str, str]) -> None:
    """A CA (ca.pem), and for each name a key and a certificate it signed for that
    subjectAltName (``{"wrong": "DNS:wrong.example"}`` gives wrong.key, wrong.pem)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
            "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    for name, san in names.items():
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr")  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext")  # fmt: skip


@pytest.mark.parametrize(("name", "san"), [("wrong", "DNS:wrong.example"), ("right", "IP:127.0.0.1")])
def test_rediss_checks_the_server_host_name(tmp_path: Path, name: str, san: str) -> None:
    if shutil.which("openssl") is None:
        servers.need(
            servers.ServerMissing(
                "the openssl command (Debian package openssl) makes this test's certificates"
            )
        )
    _certificates(tmp_path, {name: san})
    port = servers.free_port()
    tls = ("--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tmp_path / f"{name}.pem"),
           "--tls-key-file", str(tmp_path / f"{name}.key"), "--tls-ca-cert-file", str(tmp_path / "ca.pem"),
           "--tls-auth-clients", "no")  # fmt: skip
    server = servers.RedisServer(servers._scratch("statekeep-redis-tls-"), port, None, tls)
    try:
        server.start()
        store = RedisStore(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={tmp_path / 'ca.pem'}")
        try:
            if name == "wrong":  # signed by the trusted CA, but for another host
                with pytest.raises(ConnectionError, match=r"not valid for '127\.0\.0\.1'"):
                    store.list()
            else:
                store.write("a", entries(0, 1), snapshot(), create=True)
                assert store.read("a") == Record(entries(0, 1), snapshot())
        finally:
            store.close()
    finally:
        server.remove()
