"""The contract of durable steps (issue 25): ``store.step`` / ``astep`` run a function once
per State, its start saved before it runs and its result at once after; a State loaded again
replays recorded steps without running them, in order, and a step left in doubt by a crash
is never run again by accident. Through the sync and the async API. Every store has steps
(they are built on ``save`` and ``load``); ``supports_steps = False`` skips them."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from .._core.context import NotRun, ToolContext
from .._core.errors import StepFailedError, StepInDoubtError
from .._core.keys import idempotency_key
from .._run.state import State
from ._helpers import Api

asyncio_test = pytest.mark.asyncio


class Crash(BaseException):
    """Stands for the process dying while a step's function runs (after its start is saved)."""


class Calls:
    """A step function that counts its calls and returns what it was given."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: Any) -> Any:
        self.count += 1
        return {"args": list(args), "call": self.count}


async def crashing() -> None:
    raise Crash


def started_key(state: State, name: str) -> str:
    """The key step ``name``'s first start recorded (the key it keeps, in every process)."""
    return str(next(e["key"] for e in state.history if e["kind"] == "step_start" and e["name"] == name))


class StepContract:
    """Mixed into :class:`~statekeep.testing.StoreContract`."""

    supports_steps: ClassVar[bool] = True  # store.step / astep (every Store has them)

    async def _step(self, api: Api, state: State, name: Any, fn: Any, *args: Any, **options: Any) -> Any:
        if not self.supports_steps:
            pytest.skip(f"{type(self).__name__}.supports_steps is False")
        if api.mode == "async":
            return await api.store.astep(state, name, fn, *args, **options)
        return api.store.step(state, name, fn, *args, **options)

    async def _in_doubt(self, api: Api, sid: str, name: str = "pay") -> State:
        """A State saved with step ``name`` started and never ended (its function 'crashed'),
        loaded again as a new process would."""
        state = State("steps", id=sid)
        with pytest.raises(Crash):
            await self._step(api, state, name, crashing)
        return await api.load(sid)

    @asyncio_test
    async def test_a_step_runs_once_and_a_loaded_state_replays_its_result(self, api: Api) -> None:
        fn = Calls()
        state = State("steps", id="s1")
        assert await self._step(api, state, "fetch", fn, 1, "a") == {"args": [1, "a"], "call": 1}
        assert await self._step(api, state, "more", fn) == {"args": [], "call": 2}
        again = await api.load("s1")  # saved by the steps themselves
        assert await self._step(api, again, "fetch", fn, 1, "a") == {"args": [1, "a"], "call": 1}
        assert await self._step(api, again, "more", fn) == {"args": [], "call": 2}
        assert fn.count == 2
        assert await self._step(api, again, "new", fn) == {"args": [], "call": 3}
        kinds = [(e["kind"], e.get("name")) for e in (await api.load("s1")).history[1:]]
        assert kinds == [(k, n) for n in ("fetch", "more", "new") for k in ("step_start", "step_end")]
        start = (await api.load("s1")).history[1]
        assert start["key"] == idempotency_key("s1", state.incarnation, "step:fetch")

    @asyncio_test
    async def test_an_async_step_function_is_awaited(self, api: Api) -> None:
        async def double(x: int) -> int:
            return 2 * x

        state = State("steps", id="s1")
        assert await self._step(api, state, "double", double, 21) == 42
        assert await self._step(api, await api.load("s1"), "double", double, 0) == 42

    @asyncio_test
    async def test_a_failed_step_raises_its_recorded_error_again_without_running(self, api: Api) -> None:
        fn = Calls()

        def fails() -> None:
            fn()
            raise KeyError("no such item")

        state = State("steps", id="s1")
        with pytest.raises(StepFailedError) as first:
            await self._step(api, state, "look", fails)
        assert isinstance(first.value.__cause__, KeyError)
        with pytest.raises(StepFailedError, match="KeyError: 'no such item'") as again:
            await self._step(api, await api.load("s1"), "look", fails)
        assert again.value.output == "KeyError: 'no such item'" and again.value.name == "look"
        assert fn.count == 1

    @asyncio_test
    async def test_a_step_in_doubt_is_never_run_again_by_accident(self, api: Api) -> None:
        loaded = await self._in_doubt(api, "s1")
        assert loaded.history[-1]["kind"] == "step_start"  # load leaves it open
        fn = Calls()
        for _ in range(2):  # every later call raises it too: recorded unknown, saved
            with pytest.raises(StepInDoubtError) as doubt:
                await self._step(api, loaded, "pay", fn)
            assert doubt.value.key == started_key(loaded, "pay")
            assert doubt.value.name == "pay" and doubt.value.attempt == 1
            loaded = await api.load("s1")
        assert fn.count == 0
        end = loaded.history[-1]
        assert (end["kind"], end["outcome"], end["is_error"]) == ("step_end", "unknown", True)
        with pytest.raises(StepInDoubtError):  # reconcile comes too late once it is unknown
            await self._step(api, loaded, "pay", fn, reconcile=lambda ctx: "paid")

    @asyncio_test
    async def test_reconcile_resolves_a_step_in_doubt(self, api: Api) -> None:
        seen: list[ToolContext] = []

        def found(ctx: ToolContext) -> Any:
            seen.append(ctx)
            return {"paid": ctx.idempotency_key}

        fn = Calls()
        loaded = await self._in_doubt(api, "s1")
        key = started_key(loaded, "pay")
        assert await self._step(api, loaded, "pay", fn, reconcile=found) == {"paid": key}
        assert fn.count == 0 and [(c.name, c.attempt, c.state_id) for c in seen] == [("pay", 1, "s1")]
        end = (await api.load("s1")).history[-1]
        assert (end["kind"], end["outcome"], end["reconciled"]) == ("step_end", "done", True)
        assert await self._step(api, await api.load("s1"), "pay", fn) == {"paid": key}  # recorded

    @asyncio_test
    async def test_reconcile_saying_not_run_runs_the_step_again_with_the_same_key(self, api: Api) -> None:
        keys: list[tuple[str, int]] = []

        async def pay(amount: int, ctx: ToolContext) -> int:
            keys.append((ctx.idempotency_key, ctx.attempt))
            return amount

        loaded = await self._in_doubt(api, "s1")
        assert await self._step(api, loaded, "pay", pay, 5, reconcile=lambda ctx: NotRun) == 5
        assert keys == [(started_key(loaded, "pay"), 2)]
        history = (await api.load("s1")).history
        assert [(e["kind"], e.get("attempt")) for e in history[-2:]] == [
            ("step_start", 2),
            ("step_end", None),
        ]

    @asyncio_test
    async def test_an_idempotent_step_in_doubt_runs_again(self, api: Api) -> None:
        fn = Calls()
        loaded = await self._in_doubt(api, "s1")
        assert await self._step(api, loaded, "pay", fn, 7, idempotent=True) == {"args": [7], "call": 1}
        again = await api.load("s1")
        assert await self._step(api, again, "pay", fn, 7, idempotent=True) == {"args": [7], "call": 1}
        assert fn.count == 1

        def broken(ctx: ToolContext) -> Any:
            raise ConnectionError("ledger down")

        loaded = await self._in_doubt(api, "s2")  # reconcile failing: idempotent runs it again
        assert await self._step(api, loaded, "pay", fn, reconcile=broken, idempotent=True) == {
            "args": [],
            "call": 2,
        }
        loaded = await self._in_doubt(api, "s3")  # and without idempotent it stays in doubt
        with pytest.raises(StepInDoubtError):
            await self._step(api, loaded, "pay", fn, reconcile=broken)
        assert fn.count == 2

    @asyncio_test
    async def test_a_loaded_states_steps_replay_in_their_order(self, api: Api) -> None:
        fn = Calls()
        state = State("steps", id="s1")
        for name in ("a", "b"):
            await self._step(api, state, name, fn)
        with pytest.raises(ValueError, match=r"'a' was recorded already.*unique"):
            await self._step(api, state, "a", fn)
        loaded = await api.load("s1")
        with pytest.raises(ValueError, match=r"step 'b' is called as the 1st step.*recorded step 'a'"):
            await self._step(api, loaded, "b", fn)
        assert await api.load("s1") == loaded and fn.count == 2  # nothing recorded, nothing run

    @asyncio_test
    async def test_a_step_result_must_be_json(self, api: Api) -> None:
        state = State("steps", id="s1")
        with pytest.raises(TypeError, match="JSON"):
            await self._step(api, state, "when", lambda: {1, 2})
        with pytest.raises(StepFailedError, match="cannot be saved"):  # recorded as failed, not done
            await self._step(api, await api.load("s1"), "when", lambda: [1, 2])
        for bad in ((None, "f"), ("", "f"), ("name", "not callable")):
            with pytest.raises(TypeError):
                await self._step(api, state, bad[0], bad[1])

    @asyncio_test
    async def test_a_trimmed_state_keeps_its_steps(self, api: Api) -> None:
        from ._trim import TrimContract

        assert isinstance(self, TrimContract)
        self._needs_trim(api)
        fn = Calls()
        state = State("steps", id="s1")
        await self._step(api, state, "done", fn)
        with pytest.raises(Crash):
            await self._step(api, state, "open", crashing)
        state.compact("the steps so far")
        state.add_user("go on")
        await api.save(state)
        await self._trim(api, "s1", (state.compacted_through or 0) + 1)  # every step entry removed
        loaded = await api.load("s1")
        assert loaded.history[0]["kind"] == "base" and all(
            e["kind"] not in ("step_start", "step_end") for e in loaded.history
        )
        assert await self._step(api, loaded, "done", fn) == {"args": [], "call": 1}
        with pytest.raises(StepInDoubtError):
            await self._step(api, loaded, "open", fn)
        assert fn.count == 1
        assert await self._step(api, loaded, "new", fn) == {"args": [], "call": 2}  # after the two
