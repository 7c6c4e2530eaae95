"""No key and no secret in what the protection pieces show: reprs, strs, error messages and
log lines (captured at DEBUG) of Keyring, Redactor, Lease, LeaseHeldError, StaleLeaseError
and DecryptionError, and of the stores and the Agent while they use them.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from statekeep import (
    Agent,
    DecryptionError,
    Keyring,
    Lease,
    LeaseHeldError,
    MemoryStore,
    Redactor,
    Reply,
    StaleLeaseError,
    State,
)
from statekeep._core.leases import check_owner

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
PASSWORD = "pw-Zq8x!secret"
OWNER = f"worker-1 postgresql://admin:{PASSWORD}@db.example/jobs"
VALUE_SECRET = "hunter2-very-secret"
PATTERN_SECRET = "sk-ABCDEFGHIJKLMNOPQRSTUVWX"
PATTERN = r"sk-[A-Za-z0-9]{20,}"


def forms(key: bytes) -> list[str]:
    """The ways a key could be shown: raw, hex, base64 (standard and url-safe)."""
    return [
        key.hex(),
        key.hex().upper(),
        base64.b64encode(key).decode(),
        base64.urlsafe_b64encode(key).decode(),
        repr(key),
        key.decode("latin-1"),
    ]


SECRETS = [*forms(KEY), *forms(OTHER_KEY), PASSWORD, VALUE_SECRET, PATTERN_SECRET, PATTERN]


def assert_clean(*texts: object) -> None:
    for text in texts:
        shown = str(text)
        for secret in SECRETS:
            assert secret not in shown, f"{secret!r} shown in {shown!r}"


@pytest.fixture(autouse=True)
def every_log_line(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test: everything logged at DEBUG or above, by any logger, holds no secret."""
    caplog.set_level(logging.DEBUG)
    logging.getLogger().setLevel(logging.DEBUG)
    yield
    assert_clean(caplog.text, *(r.getMessage() for r in caplog.records))


def ring() -> Keyring:
    return Keyring({"k1": KEY, "k0": OTHER_KEY}, current="k1")


def test_a_keyring_shows_key_ids_only() -> None:
    keys = ring()
    assert repr(keys) == "Keyring(keys=['k0', 'k1'], current='k1')"
    assert_clean(repr(keys), str(keys), vars(keys) if hasattr(keys, "__dict__") else "")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Keyring({"k1": KEY[:31]}, current="k1"),
        lambda: Keyring({"k1": KEY.hex()}, current="k1"),  # type: ignore[dict-item]
        lambda: Keyring({"k1": KEY}, current=KEY.hex()),
        lambda: Keyring({"bad id!": KEY}, current="bad id!"),
        lambda: Keyring({KEY: "k1"}, current="k1"),  # type: ignore[dict-item]  # swapped
        lambda: Keyring({KEY.hex(): "k1"}, current=KEY.hex()),  # type: ignore[dict-item]
        lambda: Keyring({base64.b64encode(KEY).decode(): KEY}, current="k1"),
    ],
)
def test_keyring_errors_show_no_key(make: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as caught:
        make()
    assert_clean(str(caught.value), repr(caught.value))


def test_a_redactor_shows_counts_not_secrets_or_patterns() -> None:
    redactor = Redactor(values=[VALUE_SECRET], patterns=[PATTERN])
    assert_clean(repr(redactor), str(redactor))
    assert "1 secrets" in repr(redactor) and "patterns=1" in repr(redactor)
    masked = redactor.value({"note": f"{VALUE_SECRET} and {PATTERN_SECRET}", "password": "x"})
    assert_clean(masked)


def test_a_lease_hides_a_password_in_its_owner() -> None:
    store = MemoryStore()
    lease = store.acquire("job", OWNER, 30)
    assert lease.owner == OWNER  # kept as given: it is compared by the fence
    assert_clean(repr(lease), str(lease), repr([lease]), f"{lease}")
    assert "db.example" in repr(lease)
    assert_clean(repr(store.current_lease("job")))


def test_lease_errors_hide_a_password_in_an_owner() -> None:
    store = MemoryStore()
    held = store.acquire("job", OWNER, 30)
    with pytest.raises(LeaseHeldError) as taken:
        store.acquire("job", "someone", 30)
    with pytest.raises(LeaseHeldError) as write:
        store.write("job", [], {"task": "t"}, create=True)
    stale = Lease(
        "job", f"other postgresql://u:{PASSWORD}@h/db", held.token - 1, held.expires_at, namespace="default"
    )
    with pytest.raises(StaleLeaseError) as refused:
        store.write("job", [], {"task": "t"}, create=True, lease=stale)
    with pytest.raises(StaleLeaseError) as renewed:
        store.renew(stale)
    with pytest.raises(ValueError) as bad_owner:
        check_owner(OWNER + "\n")
    for caught in (taken, write, refused, renewed, bad_owner):
        assert_clean(str(caught.value), repr(caught.value))
    assert "db.example" in str(taken.value)


def sealed_store() -> tuple[MemoryStore, State]:
    store = MemoryStore(encrypt=ring(), redact=Redactor(values=[VALUE_SECRET], patterns=[PATTERN]))
    state = State("a task", id="s")
    state.add_user(f"my password is {VALUE_SECRET}, my key {PATTERN_SECRET}")
    store.save(state)
    return store, state


def test_decryption_errors_name_the_key_id_and_show_no_key_or_plaintext() -> None:
    store, _ = sealed_store()
    errors: list[DecryptionError] = []
    strangers = MemoryStore(encrypt=Keyring({"k1": bytes(32)}, current="k1"))  # same id, other key
    missing = MemoryStore(encrypt=Keyring({"k7": bytes(32)}, current="k7"))
    clear = MemoryStore()
    for other in (strangers, missing, clear):
        other._spaces, other._space = store._spaces, store._space
        with pytest.raises(DecryptionError) as caught:
            other.read("s")
        errors.append(caught.value)
    line = orjson.loads(store._space.lines["s"][1])
    body = line["sk.sealed"]
    middle = len(body) // 2
    line["sk.sealed"] = body[:middle] + ("A" if body[middle] != "A" else "B") + body[middle + 1 :]
    store._space.lines["s"][1] = orjson.dumps(line) + b"\n"  # one byte of the ciphertext changed
    with pytest.raises(DecryptionError) as broken:
        store.read("s")
    errors.append(broken.value)
    assert "'k1'" in str(errors[0]) and "'k1'" in str(errors[2]) and "'k7'" not in str(errors[1])
    for error in errors:
        assert_clean(str(error), repr(error))
        assert "my password" not in str(error)


def test_a_store_and_its_records_show_no_secret() -> None:
    store, state = sealed_store()
    stored = b"".join(store._space.lines["s"]) + (store._space.snapshots["s"] or b"")
    assert VALUE_SECRET.encode() not in stored and PATTERN_SECRET.encode() not in stored
    assert_clean(repr(store), repr(store._protection.keyring), repr(store._protection.redactor))
    assert VALUE_SECRET in str(state.messages)  # the live State keeps what the user typed


def test_an_agent_under_a_lease_logs_and_raises_no_secret() -> None:
    store, _ = sealed_store()

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        held = store.current_lease("s")
        assert held is not None
        store.release(held)  # taken over by an owner whose name holds a URL password
        store.acquire("s", OWNER, 30)
        return Reply(f"the key is {PATTERN_SECRET}")

    agent = Agent(model, store=store, lease_ttl=30, owner=f"me redis://:{PASSWORD}@cache")
    with pytest.raises(StaleLeaseError) as caught:
        agent.run(store.load("s"))
    assert_clean(str(caught.value), repr(caught.value))
    assert re.search(r"redis://:\*\*\*@cache", str(caught.value))
