"""The per-State locks: an entry stands for its lock while it has one user, and makes the
asyncio.Lock when a second comes. Whoever comes, by ``locked`` or ``async with lock``,
holds the key alone, in the order they came; a waiter cancelled leaves the others going,
and the map forgets a key nobody uses."""

from __future__ import annotations

import asyncio

import pytest

from statekeep._runtime.statelocks import StateLocks


async def _user(locks: StateLocks, name: str, log: list[str], gate: asyncio.Event, how: str) -> None:
    async def work() -> None:
        log.append(f"{name} in")
        await gate.wait()  # held across a wait: anyone else must queue
        log.append(f"{name} out")

    if how == "locked":
        await locks.locked("k", work())
    else:
        async with locks.lock("k"):
            await work()


@pytest.mark.parametrize("hows", [("locked",) * 4, ("lock",) * 4, ("locked", "lock", "locked", "lock")])
def test_users_of_a_key_hold_it_alone_in_the_order_they_came(hows: tuple[str, ...]) -> None:
    async def main() -> list[str]:
        locks, log, gate = StateLocks(), [], asyncio.Event()
        tasks = []
        for i, how in enumerate(hows):
            tasks.append(asyncio.create_task(_user(locks, f"u{i}", log, gate, how)))
            await asyncio.sleep(0)  # each one comes while the one before holds or waits
        assert log == ["u0 in"] and locks._locks["k"].users == len(hows)
        gate.set()
        await asyncio.gather(*tasks)
        assert locks._locks == {}
        return log

    log = asyncio.run(main())
    assert log == [f"u{i} {step}" for i in range(len(hows)) for step in ("in", "out")]


def test_a_cancelled_waiter_leaves_the_others_going() -> None:
    async def main() -> list[str]:
        locks, log, gate = StateLocks(), [], asyncio.Event()
        first = asyncio.create_task(_user(locks, "a", log, gate, "locked"))
        await asyncio.sleep(0)
        second = asyncio.create_task(_user(locks, "b", log, gate, "lock"))
        third = asyncio.create_task(_user(locks, "c", log, gate, "locked"))
        await asyncio.sleep(0)
        second.cancel()
        await asyncio.sleep(0)
        gate.set()
        await first
        await third
        with pytest.raises(asyncio.CancelledError):
            await second
        assert locks._locks == {}
        return log

    assert asyncio.run(main()) == ["a in", "a out", "c in", "c out"]


def test_a_lone_user_makes_no_lock_and_leaves_nothing_behind() -> None:
    async def main() -> None:
        locks = StateLocks()

        async def work() -> int:
            assert locks._locks["k"].users == 1 and locks._locks["k"].lock is None
            return 7

        assert await locks.locked("k", work()) == 7
        async with locks.lock("k"):
            assert locks._locks["k"].lock is None
        assert locks._locks == {}

    asyncio.run(main())
