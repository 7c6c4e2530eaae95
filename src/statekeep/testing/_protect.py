"""The protection part of the contract: ``redact=`` masks what the store keeps, and
``encrypt=`` seals it, while the API reads back what was written. Raw storage (files,
database pages, a dump) is each store's own test; here a second store on the same storage,
opened without the option, shows what was kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from .._core.errors import DecryptionError, StateConflictError
from .._core.records import Record
from .._core.redactor import Redactor
from .._protect.sealing import Keyring
from .._run.state import State
from .._store.contract import Store
from .._store.expect import takes_expect_next
from ._helpers import Api, entries, snapshot
from ._spaces import MemoryApi

asyncio_test = pytest.mark.asyncio
modes = pytest.mark.parametrize("mode", ["sync", "async"])
SECRET = "hunter2-0f9e8d"
K1, K2 = bytes(range(32)), bytes(range(32, 64))


def ring(current: str = "k1", **keys: bytes) -> Keyring:
    return Keyring(keys or {"k1": K1}, current=current)


class ProtectionContract:
    """Mixed into :class:`StoreContract`; runs when ``supports_protection`` is True.

    ``make_store_with(tmp_path, **options)`` must open the same storage for the same folder
    with ``redact``, ``encrypt`` and ``allow_plaintext`` among the options.
    """

    #: The store takes ``redact=``, ``encrypt=`` and ``allow_plaintext=``.
    supports_protection: ClassVar[bool] = False

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...
        def make_store_with(self, tmp_path: Path, **options: Any) -> Store: ...

    def opened(self, tmp_path: Path, mode: str, **options: Any) -> Api:
        self.needs("supports_protection")
        return Api(self.make_store_with(tmp_path, **options), mode)

    @modes
    @asyncio_test
    async def test_protect_redaction_masks_what_is_kept(self, tmp_path: Path, mode: str) -> None:
        api = self.opened(tmp_path, mode, redact=Redactor(values=[SECRET]))
        clear = self.opened(tmp_path, mode)
        try:
            state = State("a task", id="r")
            state.add_user(f"my password is {SECRET}, keep it")
            state.set_data("creds", {"Api-Key": "sk-live-1", "note": "fine"})
            await api.save(state)
            await api.save(state)  # nothing new: no conflict
            assert SECRET in state.history[1]["text"]  # the live State is unchanged
            kept = await clear.read("r")
            assert kept is not None
            assert kept.entries[1]["text"] == "my password is [REDACTED], keep it"
            assert kept.entries[2]["value"] == {"Api-Key": "[REDACTED]", "note": "fine"}
            assert await api.read("r") == kept
            resent = [{k: v for k, v in e.items()} for e in state.history]
            await api.write("r", resent, None)  # the same batch again: skipped as identical
            loaded = await api.load("r")
            loaded.add_user(f"again {SECRET}")
            await api.save(loaded)
            await api.save(loaded)
            final = await clear.read("r")
            assert final is not None and len(final.entries) == 4
            assert SECRET not in str(final)
        finally:
            await api.store.aclose()
            await clear.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_redaction_judges_memory_keys_by_name(self, tmp_path: Path, mode: str) -> None:
        """A memory key is judged by the key-name rule, as a ``data`` entry's key is."""
        self.needs("supports_protection", "supports_memory")
        api = self.opened(tmp_path, mode, redact=Redactor())
        clear = self.opened(tmp_path, mode)
        try:
            masked = MemoryApi(api.store.memory("s"), mode)
            kept = MemoryApi(clear.store.memory("s"), mode)
            await masked.put("password", "pw")
            await masked.put("API-Key", {"nested": "sk-live-1"})
            await masked.put("color", {"token": "t", "shade": "blue"})
            for memory in (masked, kept):
                got = {k: await memory.get(k) for k in ("password", "API-Key", "color")}
                assert {k: None if i is None else i.value for k, i in got.items()} == {
                    "password": "[REDACTED]",
                    "API-Key": "[REDACTED]",
                    "color": {"token": "[REDACTED]", "shade": "blue"},
                }
            again = await masked.put("password", "pw2", revision=1)  # its revision still holds
            assert again.revision == 2 and (await kept.get("password")).value == "[REDACTED]"  # type: ignore[union-attr]
        finally:
            await api.store.aclose()
            await clear.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_redaction_masks_header_pairs_and_json_text(
        self, tmp_path: Path, mode: str
    ) -> None:
        api = self.opened(tmp_path, mode, redact=Redactor())
        clear = self.opened(tmp_path, mode)
        try:
            state = State("call a tool", id="h")
            headers = [["Authorization", "Bearer x"], ("Accept", "text/plain"), ["cookie", "c=1"]]
            state.set_data("request", {"headers": headers, "note": '["password", "kept"]'})
            state.set_data("arguments", '{"city": "Oslo", "password": "x", "deep": {"apiKey": "k"}}')
            state.set_data("not an object", '{"password": broken')
            await api.save(state)
            kept = await clear.read("h")
            assert kept is not None
            assert kept.entries[1]["value"] == {
                "headers": [
                    ["Authorization", "[REDACTED]"],
                    ["Accept", "text/plain"],
                    ["cookie", "[REDACTED]"],
                ],
                "note": '["password", "kept"]',
            }
            args = json.loads(kept.entries[2]["value"])
            assert args == {"city": "Oslo", "password": "[REDACTED]", "deep": {"apiKey": "[REDACTED]"}}
            assert kept.entries[3]["value"] == '{"password": broken'
            await api.write("h", state.history, None)  # the same batch again: skipped as identical
            loaded = await api.load("h")
            loaded.add_user("more")
            await api.save(loaded)
            await api.save(loaded)
            final = await clear.read("h")
            assert final is not None and final.entries[:4] == kept.entries
            assert len(final.entries) == 5
        finally:
            await api.store.aclose()
            await clear.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_encryption_round_trips(self, tmp_path: Path, mode: str) -> None:
        api = self.opened(tmp_path, mode, encrypt=ring())
        clear = self.opened(tmp_path, mode)
        try:
            await api.write("e", entries(0, 3), snapshot("secret task"), create=True)
            assert await api.read("e") == Record(entries(0, 3), snapshot("secret task"))
            assert await api.read("e", since=2) == Record(entries(2, 1), snapshot("secret task"))
            await api.write("e", entries(1, 3), snapshot("next"))  # overlap compared as plaintext
            with pytest.raises(StateConflictError):
                await api.write("e", entries(3, 1, other=True), None)
            assert await api.read("e") == Record(entries(0, 4), snapshot("next"))
            assert [(r.id, r.task) for r in await api.list()] == [("e", "next")]
            with pytest.raises(DecryptionError, match="'k1'"):
                await clear.read("e")
            state = State("sealed run", id="s")
            state.add_user("hello")
            await api.save(state)
            loaded = await api.load("s")
            loaded.add_user("more")
            await api.save(loaded)
            await api.save(loaded)
            forked = await api.fork("s", new_id="f")
            assert [e["kind"] for e in forked.history] == ["task", "user", "user"]
            assert (await api.load("f")).task == "sealed run"
        finally:
            await api.store.aclose()
            await clear.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_rotation_and_missing_keys(self, tmp_path: Path, mode: str) -> None:
        old = self.opened(tmp_path, mode, encrypt=ring())
        try:
            await old.write("r", entries(0, 2), snapshot("t"), create=True)
        finally:
            await old.store.aclose()
        rotated = self.opened(tmp_path, mode, encrypt=ring("k2", k2=K2, k1=K1))
        try:
            await rotated.write("r", entries(2, 1), snapshot("t2"))
            assert await rotated.read("r") == Record(entries(0, 3), snapshot("t2"))
        finally:
            await rotated.store.aclose()
        only_new = self.opened(tmp_path, mode, encrypt=ring("k2", k2=K2))
        wrong = self.opened(tmp_path, mode, encrypt=ring("k2", k2=K1, k1=K2))  # the ids swapped
        try:
            with pytest.raises(DecryptionError, match="key 'k1', which is not in the keyring"):
                await only_new.read("r")
            with pytest.raises(DecryptionError, match="fails authentication"):
                await wrong.read("r")
        finally:
            await only_new.store.aclose()
            await wrong.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_plaintext_needs_allow_plaintext(self, tmp_path: Path, mode: str) -> None:
        clear = self.opened(tmp_path, mode)
        try:
            await clear.write("p", entries(0, 2), snapshot("plain"), create=True)
        finally:
            await clear.store.aclose()
        strict = self.opened(tmp_path, mode, encrypt=ring())
        lenient = self.opened(tmp_path, mode, encrypt=ring(), allow_plaintext=True)
        try:
            with pytest.raises(DecryptionError, match="allow_plaintext=True"):
                await strict.read("p")
            await lenient.write("p", entries(2, 1), snapshot("mixed"))  # sealed, never plaintext
            assert await lenient.read("p") == Record(entries(0, 3), snapshot("mixed"))
        finally:
            await strict.store.aclose()
            await lenient.store.aclose()

    @modes
    @asyncio_test
    async def test_protect_a_clear_store_never_writes_to_a_sealed_state(
        self, tmp_path: Path, mode: str
    ) -> None:
        sealed = self.opened(tmp_path, mode, encrypt=ring())
        clear = self.opened(tmp_path, mode)
        lenient = self.opened(tmp_path, mode, encrypt=ring(), allow_plaintext=True)
        try:
            state = State("sealed run", id="r")
            state.add_user("hello")
            await sealed.save(state)
            kept = await sealed.read("r")
            assert kept is not None
            plain = entries(len(kept.entries), 1)
            with pytest.raises(DecryptionError, match="'r' is sealed"):
                await clear.write("r", plain, None)
            with pytest.raises(DecryptionError, match="'r' is sealed"):
                await clear.write("r", [], snapshot("plain"))
            if takes_expect_next(clear.store):  # a stale writer's is checked before the seal
                with pytest.raises(StateConflictError, match="but this write expected 9"):
                    await clear.write("r", plain, None, expect_next=9)
            assert await sealed.read("r") == kept
            # Without a snapshot, the State's last entry says it is sealed.
            await sealed.write("e", entries(0, 2), None, create=True)
            with pytest.raises(DecryptionError, match="'e' is sealed"):
                await clear.write("e", entries(2, 1), None)
            assert await sealed.read("e") == Record(entries(0, 2), None)
            # A clear State this store knows, sealed since by another store: refused too.
            await clear.write("w", entries(0, 1), snapshot("plain"), create=True)
            await clear.write("w", entries(1, 1), snapshot("plain"))
            await lenient.write("w", entries(2, 1), snapshot("sealed now"))
            with pytest.raises(DecryptionError, match="'w' is sealed"):
                await clear.write("w", entries(3, 1), snapshot("plain again"))
            assert await lenient.read("w") == Record(entries(0, 3), snapshot("sealed now"))
        finally:
            await sealed.store.aclose()
            await clear.store.aclose()
            await lenient.store.aclose()
