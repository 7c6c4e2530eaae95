"""The contract of range reads: ``read(state_id, since=N)`` returns the entries with seq >= N
and the snapshot (issue 11), through the sync and the async API."""

from __future__ import annotations

from typing import Any

import pytest

from ._helpers import Api, entries, snapshot

asyncio_test = pytest.mark.asyncio


class RangeContract:
    """Mixed into :class:`~statekeep.testing.StoreContract`."""

    async def _history(self, api: Api, count: int, sid: str = "r1") -> list[dict[str, Any]]:
        written = entries(0, count)
        await api.write(sid, written[: count // 2], snapshot(turn=1), create=True)
        await api.write(sid, written[count // 2 :], snapshot(turn=2))
        return written

    @asyncio_test
    @pytest.mark.parametrize("since", [0, 1, 7, 11, 12])
    async def test_read_since_returns_the_entries_from_that_seq(self, api: Api, since: int) -> None:
        written = await self._history(api, 12)
        record = await api.read("r1", since=since)
        assert record is not None
        assert record.entries == written[since:]
        assert record.snapshot == snapshot(turn=2)

    @asyncio_test
    async def test_read_since_zero_is_the_whole_read(self, api: Api) -> None:
        await self._history(api, 5)
        assert await api.read("r1", since=0) == await api.read("r1")

    @asyncio_test
    @pytest.mark.parametrize("since", [13, 1000, 2**63, 2**70])
    async def test_read_past_the_end_has_no_entries_and_the_snapshot(self, api: Api, since: int) -> None:
        await self._history(api, 12)
        record = await api.read("r1", since=since)
        assert record is not None
        assert record.entries == []
        assert record.snapshot == snapshot(turn=2)

    @asyncio_test
    async def test_read_since_follows_a_growing_history(self, api: Api) -> None:
        # What `show --follow` does: read from the seq after the last one seen, again and again.
        await api.write("r1", entries(0, 3), snapshot(turn=1), create=True)
        seen = 0
        got: list[dict[str, Any]] = []
        for turn in range(2, 6):
            record = await api.read("r1", since=seen)
            assert record is not None
            got += record.entries
            seen = len(got)
            await api.write("r1", entries(seen, turn), snapshot(turn=turn))
        record = await api.read("r1", since=seen)
        assert record is not None
        got += record.entries
        assert got == entries(0, len(got)) and len(got) == 3 + 2 + 3 + 4 + 5

    @asyncio_test
    async def test_read_since_of_a_state_without_entries_or_snapshot(self, api: Api) -> None:
        await api.write("empty", [], None, create=True)
        record = await api.read("empty", since=3)
        assert record is not None
        assert record.entries == [] and record.snapshot is None

    @asyncio_test
    async def test_read_since_of_an_unknown_id_is_none(self, api: Api) -> None:
        assert await api.read("nobody", since=4) is None

    @asyncio_test
    @pytest.mark.parametrize(
        ("bad", "kind"), [(-1, ValueError), (1.0, TypeError), ("2", TypeError), (True, TypeError)]
    )
    async def test_a_bad_since_is_refused(self, api: Api, bad: Any, kind: type[Exception]) -> None:
        written = await self._history(api, 4)
        with pytest.raises(kind, match="since"):
            await api.read("r1", since=bad)
        record = await api.read("r1")
        assert record is not None and record.entries == written

    @asyncio_test
    async def test_read_since_sees_a_re_sent_write_once(self, api: Api) -> None:
        written = await self._history(api, 6)
        await api.write("r1", written[3:], snapshot(turn=3))  # all already stored: skipped
        record = await api.read("r1", since=2)
        assert record is not None
        assert record.entries == written[2:]
        assert record.snapshot == snapshot(turn=3)
