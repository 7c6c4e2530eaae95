"""The error family part of the Store contract: the same exception types from every store.

A built-in store (``statekeep_messages``) must raise statekeep's own types exactly; a store
of your own passes if its errors are of the built-in parents (``LookupError``,
``ValueError``) that the family keeps, since ``except LookupError`` code must keep working.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from .._core.errors import (
    CorruptStateError,
    StateConflictError,
    StateExistsError,
    StatekeepError,
    StateNotFoundError,
    UnsupportedFormatError,
)
from .._core.records import Record
from .._run.history import FORMAT_VERSION
from .._run.state import State
from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio


async def _load(api: Api, state_id: str) -> State:
    return await api.store.aload(state_id) if api.mode == "async" else api.store.load(state_id)


async def _save(api: Api, state: State) -> None:
    if api.mode == "async":
        await api.store.asave(state)
    else:
        api.store.save(state)


class ErrorFamilyContract:
    """Mixed into :class:`StoreContract`: which exception each situation raises."""

    statekeep_messages: ClassVar[bool]
    supports_delete: ClassVar[bool]
    checks_data: ClassVar[bool]

    def family(self, error: BaseException, kind: type[Exception], builtin: type[Exception]) -> None:
        """``error`` is ``kind`` (for statekeep's own stores), and always a ``builtin``."""
        assert isinstance(error, builtin), f"{type(error).__name__} is not a {builtin.__name__}"
        if self.statekeep_messages:
            assert type(error) is kind and isinstance(error, StatekeepError)

    @asyncio_test
    async def test_an_unknown_id_is_state_not_found_on_write_and_load(self, api: Api) -> None:
        with pytest.raises(LookupError) as info:
            await api.write("ghost", entries(0, 1), snapshot())
        self.family(info.value, StateNotFoundError, LookupError)
        written = str(info.value)
        with pytest.raises(StateNotFoundError) as loaded:
            await _load(api, "ghost")
        if self.statekeep_messages:
            assert str(loaded.value) == written  # one message for a missing State

    @asyncio_test
    async def test_create_on_an_existing_id_is_state_exists(self, api: Api) -> None:
        await api.write("a", entries(0, 1), snapshot(), create=True)
        with pytest.raises(ValueError) as info:
            await api.write("a", entries(0, 1), snapshot(), create=True)
        self.family(info.value, StateExistsError, ValueError)
        with pytest.raises(ValueError) as saved:
            await _save(api, State("t", id="a"))
        self.family(saved.value, StateExistsError, ValueError)

    @asyncio_test
    async def test_saving_a_deleted_state_is_state_not_found(self, api: Api) -> None:
        if not self.supports_delete:
            pytest.skip(f"{type(self).__name__}.supports_delete is False")
        state = State("t", id="gone")
        await _save(api, state)
        await api.delete("gone")
        state.add_user("more")
        with pytest.raises(LookupError) as info:
            await _save(api, state)
        self.family(info.value, StateNotFoundError, LookupError)

    @asyncio_test
    async def test_a_conflict_is_state_conflict(self, api: Api) -> None:
        await api.write("a", entries(0, 1), snapshot(), create=True)
        with pytest.raises(StateConflictError):
            await api.write("a", entries(0, 1, other=True), snapshot())

    @asyncio_test
    async def test_a_newer_history_format_is_unsupported_format(self, api: Api) -> None:
        task = {"seq": 0, "kind": "task", "at": "2026-01-01T00:00:00+00:00", "text": "t"}
        await api.write("newer", [task], snapshot() | {"v": FORMAT_VERSION + 1, "seq": 0}, create=True)
        with pytest.raises(UnsupportedFormatError, match="upgrade statekeep"):
            await _load(api, "newer")

    @asyncio_test
    async def test_a_damaged_history_is_corrupt_state(self, api: Api) -> None:
        await api.write(
            "odd", [{"seq": 0, "kind": "hologram"}], snapshot() | {"v": FORMAT_VERSION}, create=True
        )
        with pytest.raises(CorruptStateError, match="damaged"):
            await _load(api, "odd")

    @asyncio_test
    async def test_an_entry_with_a_reserved_key_is_refused_and_nothing_written(self, api: Api) -> None:
        if not self.checks_data:
            pytest.skip("this store does not check the data it is given")
        await api.write("a", entries(0, 1), snapshot(), create=True)
        for key in ("sk.crc", "sk.v", "sk.anything"):
            bad = entries(1, 1)[0] | {key: 1}
            with pytest.raises(ValueError, match=f"'{key}'.*statekeep's own.*nothing was written"):
                await api.write("a", [bad], snapshot(turn=1))
            with pytest.raises(ValueError, match=f"'{key}'"):
                await api.write("b", [entries(0, 1)[0] | {key: 1}], snapshot(), create=True)
        assert await api.read("a") == Record(entries(0, 1), snapshot())
        assert await api.read("b") is None
        nested = entries(1, 1)[0] | {"data": {"sk.crc": 1}}  # only top-level keys are reserved
        await api.write("a", [nested], snapshot(turn=1))
        assert (await api.read("a")).entries[-1] == nested  # type: ignore[union-attr]
