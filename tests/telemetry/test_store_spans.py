"""Each store operation is a span (``statekeep.<operation>``) with what it did (backend,
namespace, entries, bytes, batch size), on every built-in store through both APIs, recorded
by the SDK's in-memory exporter; never a State's content, nor its id unless asked."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from statekeep import FileStore, MemoryStore, SQLiteStore, State, StateExistsError, Store
from statekeep.testing import entries, snapshot
from tests.support import otel
from tests.support.stores import servers

#: Every built-in store, made with the given options.
MAKERS: dict[str, Callable[..., Store]] = {
    "memory": lambda tmp_path, **o: MemoryStore(**o),
    "file": lambda tmp_path, **o: FileStore(tmp_path / "store", **o),
    "sqlite": lambda tmp_path, **o: SQLiteStore(tmp_path / "store.db", **o),
    "postgres": lambda tmp_path, **o: servers().postgres_store(tmp_path, **o),
    "redis": lambda tmp_path, **o: servers().redis_store(tmp_path, **o),
}
BACKENDS = {
    "memory": "MemoryStore",
    "file": "FileStore",
    "sqlite": "SQLiteStore",
    "postgres": "PostgresStore",
    "redis": "RedisStore",
}
SECRET = "the-secret-task-text"
SECRET_ID = "private-run-4711"


@pytest.fixture(params=sorted(MAKERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, tmp_path: Path, **options: Any) -> Store:
    return MAKERS[kind](tmp_path, **options)


def a_state() -> State:
    state = State(SECRET, id=SECRET_ID)
    state.add_user(SECRET + " from the user")
    state.compact(SECRET + " in a summary")
    return state


def every_operation(store: Store, mode: str) -> None:
    """Save, load, read, list, fork, trim, gc and delete, through the sync or async API."""
    state = a_state()
    if mode == "sync":
        store.save(state)
        store.load(state.id)
        store.read(state.id)
        store.list()
        store.fork(state.id, new_id="forked")
        store.trim(state.id, before=2)
        store.gc()
        store.delete("forked")
        return

    async def run() -> None:
        await store.asave(state)
        await store.aload(state.id)
        await store.aread(state.id)
        await store.alist()
        await store.afork(state.id, new_id="forked")
        await store.atrim(state.id, before=2)
        await store.agc()
        await store.adelete("forked")

    asyncio.run(run())


def edges(recorded: otel.Recorded) -> list[tuple[str, str]]:
    """(parent's name, span's name) for each span recorded, sorted."""
    spans = recorded.spans()
    names = {s.context.span_id: s.name for s in spans}
    return sorted((names.get(s.parent.span_id, "?") if s.parent else "-", s.name) for s in spans)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_operation_is_a_span_under_the_callers(
    kind: str, mode: str, tmp_path: Path, recorded: otel.Recorded
) -> None:
    store = make(kind, tmp_path)
    try:
        with trace.get_tracer("test").start_as_current_span("caller"):
            every_operation(store, mode)
    finally:
        store.close()
    found = edges(recorded)
    top = sorted(name for parent, name in found if parent == "caller")
    assert top == [
        f"statekeep.{op}" for op in sorted(["save", "load", "read", "list", "fork", "trim", "gc", "delete"])
    ]
    below = collections.Counter((p, n) for p, n in found if p not in ("caller", "-"))
    # A save writes, a load reads, a fork reads its source and writes the fork (sync or async):
    # the spans made on statekeep's loop keep the caller's span as their ancestor.
    assert below[("statekeep.save", "statekeep.write")] == 1
    assert below[("statekeep.load", "statekeep.read")] == 1
    assert below[("statekeep.fork", "statekeep.read")] == 1
    assert set(below) <= {
        ("statekeep.save", "statekeep.write"),
        ("statekeep.load", "statekeep.read"),
        ("statekeep.fork", "statekeep.read"),
        ("statekeep.fork", "statekeep.write"),
    }
    spans = {s.name: s for s in recorded.spans("statekeep.")}  # the last of each name
    for span in recorded.spans("statekeep."):
        assert span.attributes["statekeep.backend"] == BACKENDS[kind]
        assert span.attributes["statekeep.namespace"] == "default"
        assert span.attributes["statekeep.operation"] == span.name.removeprefix("statekeep.")
        assert span.status.status_code is StatusCode.UNSET
        assert "statekeep.state.id" not in span.attributes
    saved = next(
        s
        for s in recorded.spans("statekeep.write")
        if s.parent and s.parent.span_id == spans["statekeep.save"].context.span_id
    )
    assert saved.attributes["statekeep.entries"] == 3  # the task, the user message, the compaction
    assert saved.attributes["statekeep.bytes"] > len(SECRET) * 3
    assert spans["statekeep.read"].attributes["statekeep.entries"] >= 1
    assert spans["statekeep.gc"].attributes["statekeep.states"] == 0
    assert otel.content_in(recorded, SECRET, SECRET_ID) == []


def test_telemetry_false_records_nothing(kind: str, tmp_path: Path, recorded: otel.Recorded) -> None:
    store = make(kind, tmp_path, telemetry=False)
    try:
        every_operation(store, "sync")
        memory = store.memory("notes")
        memory.put("k", {"v": 1})  # agent memory: the store's sibling, made as it is
        item = memory.get("k")
        assert item is not None and item.value == {"v": 1}
    finally:
        store.close()
    assert recorded.spans() == []
    assert recorded.points("statekeep.operation.duration") == []


def test_trace_ids_puts_the_state_id_on_spans(kind: str, tmp_path: Path, recorded: otel.Recorded) -> None:
    store = make(kind, tmp_path, trace_ids=True)
    try:
        store.save(a_state())
        store.read(SECRET_ID)
        store.list()
    finally:
        store.close()
    ids = {s.name: s.attributes.get("statekeep.state.id") for s in recorded.spans()}
    assert ids == {
        "statekeep.write": SECRET_ID,
        "statekeep.save": SECRET_ID,
        "statekeep.read": SECRET_ID,
        "statekeep.list": None,  # no one State
    }
    assert otel.content_in(recorded, SECRET) == []  # the id, never the content


def test_a_provider_set_after_the_store_was_made_is_used_from_then_on(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    try:
        state = a_state()
        store.save(state)  # no provider: recorded nowhere, and no harm
        recorded = otel.install()
        state.add_user("again")
        store.save(state)
    finally:
        store.close()
    assert sorted(s.name for s in recorded.spans()) == ["statekeep.save", "statekeep.write"]
    assert [p.count for p in recorded.points("statekeep.operation.duration")] == [1, 1]


def test_the_api_alone_records_nothing(tmp_path: Path) -> None:
    """OpenTelemetry imported, no SDK, no provider (the API's no-op default): nothing is made."""
    from statekeep._runtime import telemetry

    store = MemoryStore()
    store.save(a_state())
    assert trace.get_tracer_provider().__class__.__name__ == "ProxyTracerProvider"
    assert telemetry.active() is None
    trace.set_tracer_provider(trace.NoOpTracerProvider())  # set, but a no-op one: the same
    assert telemetry.active() is None
    store.close()


def test_an_error_is_recorded_with_its_type_only(kind: str, tmp_path: Path, recorded: otel.Recorded) -> None:
    store = make(kind, tmp_path)
    entry = {"seq": 0, "kind": "task", "text": SECRET, "at": "2026-01-01T00:00:00+00:00"}
    try:
        store.write(SECRET_ID, [entry], {"task": SECRET}, create=True)
        with pytest.raises(StateExistsError):
            store.write(SECRET_ID, [entry], {"task": SECRET}, create=True)
        with pytest.raises(StateExistsError):
            asyncio.run(store.awrite(SECRET_ID, [entry], {"task": SECRET}, create=True))
    finally:
        store.close()
    failed = [s for s in recorded.spans() if s.status.status_code is StatusCode.ERROR]
    assert [(s.name, s.attributes["error.type"]) for s in failed] == [
        ("statekeep.write", "StateExistsError"),
        ("statekeep.write", "StateExistsError"),
    ]
    assert all(
        s.events == () or not s.events for s in failed
    )  # no exception event: its message may quote data
    errors = recorded.points("statekeep.errors")
    assert [(p.attributes["error.type"], p.value) for p in errors] == [("StateExistsError", 2)]
    assert otel.content_in(recorded, SECRET, SECRET_ID) == []


def test_the_metrics_add_up_to_the_spans(kind: str, tmp_path: Path, recorded: otel.Recorded) -> None:
    store = make(kind, tmp_path)
    try:
        every_operation(store, "async")
    finally:
        store.close()
    spans = recorded.spans("statekeep.")
    durations = {
        p.attributes["statekeep.operation"]: p.count for p in recorded.points("statekeep.operation.duration")
    }
    assert durations == collections.Counter(s.attributes["statekeep.operation"] for s in spans)
    for metric, attribute in (
        ("statekeep.entries", "statekeep.entries"),
        ("statekeep.bytes", "statekeep.bytes"),
    ):
        by_op = {p.attributes["statekeep.operation"]: p.value for p in recorded.points(metric)}
        summed: collections.Counter[str] = collections.Counter()
        for s in spans:
            summed[s.attributes["statekeep.operation"]] += s.attributes.get(attribute, 0)
        assert by_op == {op: n for op, n in summed.items() if n}
    for point in recorded.points("statekeep.operation.duration"):
        assert point.attributes["statekeep.backend"] == BACKENDS[kind]
        assert point.sum >= 0


@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres", "redis"])
def test_group_commit_batch_sizes(kind: str, tmp_path: Path, recorded: otel.Recorded) -> None:
    """Writes committed together each carry their batch's size; the histogram counts each."""
    store = make(kind, tmp_path)
    states = [State(f"task {i}", id=f"s{i}") for i in range(8)]

    async def run() -> None:
        for state in states:
            await store.asave(state)
        for state in states:
            state.add_user("more")
        await asyncio.gather(*(store.asave(state) for state in states))

    try:
        asyncio.run(run())
    finally:
        store.close()
    appends = recorded.spans("statekeep.write")[-8:]
    sizes = [s.attributes.get("statekeep.batch.size") for s in appends]
    assert all(isinstance(n, int) and 1 <= n <= 8 for n in sizes), sizes
    # Each batch of n writes has n members: the sizes are consistent with some partition of 8.
    assert sum(1 / n for n in sizes) == pytest.approx(round(sum(1 / n for n in sizes)))
    histogram = recorded.points("statekeep.batch.size")
    assert sum(p.count for p in histogram) >= 8


def test_the_api_keeps_its_providers_where_statekeep_reads_them() -> None:
    """statekeep's per-operation check reads the API's globals directly (the cheapest check): an
    OpenTelemetry that moved them must fail here, not record nothing unnoticed."""
    from opentelemetry.metrics import _internal as metrics_globals

    assert trace._TRACER_PROVIDER is None and metrics_globals._METER_PROVIDER is None
    recorded = otel.install()
    assert trace._TRACER_PROVIDER is recorded.tracer_provider
    assert metrics_globals._METER_PROVIDER is recorded.meter_provider


def test_a_sync_step_or_run_inside_a_running_loop_keeps_the_callers_span(recorded: otel.Recorded) -> None:
    """Called inside a running event loop, ``step`` and ``Agent.run`` run on a thread of their
    own: their spans still have the caller's span as parent, one span each."""
    from statekeep import Agent, ScriptedModel

    store = MemoryStore()
    state = State("steps")

    async def inside() -> None:
        with trace.get_tracer("test").start_as_current_span("caller"):
            assert store.step(state, "double", lambda: 21 * 2) == 42
            Agent(ScriptedModel(["done"]), store=store).run(State("run"))

    asyncio.run(inside())
    store.close()
    caller = recorded.spans("caller")[0]
    steps = recorded.spans("statekeep.step")
    runs = recorded.spans("invoke_agent")
    assert len(steps) == 1 and len(runs) == 1
    assert steps[0].parent is not None and steps[0].parent.span_id == caller.context.span_id
    assert runs[0].parent is not None and runs[0].parent.span_id == caller.context.span_id


@pytest.mark.parametrize("telemetry", [True, False])
def test_a_listing_warning_points_at_the_callers_line(telemetry: bool, recorded: otel.Recorded) -> None:
    """A State left out of a listing warns at the line that called list()/alist(), through
    the method's telemetry wrapper, whether it records or not."""
    import warnings

    from tests.support.stores import plant_snapshot

    store = MemoryStore(telemetry=telemetry)
    store.save(State("fine"))
    store.save(State("broken", id="broken"))
    asyncio.run(plant_snapshot(store, "broken", b'{"task": "no times"}'))

    async def alist() -> Any:
        return await store.alist()

    for call in (store.list, lambda: asyncio.run(alist())):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert len(call()) == 1
        left_out = [w for w in caught if "'broken'" in str(w.message)]
        assert len(left_out) == 1 and left_out[0].filename == __file__, [
            (w.filename, w.message) for w in caught
        ]
    store.close()


def test_durations_and_batches_fall_in_buckets_that_tell_them_apart(recorded: otel.Recorded) -> None:
    """The SDK's default buckets (0, 5, 10, ... in milliseconds' scale) would put every
    duration in seconds in one bucket: statekeep advises buckets from 100 µs to 10 s."""
    with MemoryStore() as store:
        store.write("s", entries(0, 1), snapshot(), create=True)
    (point, *_) = recorded.points("statekeep.operation.duration")
    assert point.explicit_bounds[0] == 0.0001 and point.explicit_bounds[-1] == 10.0
    assert sum(point.bucket_counts[:-1]) == point.count  # none beyond 10 s, none lumped at the top


def test_a_provider_named_in_the_environment_is_used_from_the_first_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``OTEL_PYTHON_TRACER_PROVIDER`` names a provider the API loads on its getter's first
    call, which no one may have made: statekeep's first operation is recorded by it."""
    from opentelemetry.sdk.trace import TracerProvider

    from statekeep._runtime import telemetry

    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    monkeypatch.setattr(telemetry, "_api_modules", None)
    with MemoryStore() as store:
        store.write("s", entries(0, 1), snapshot(), create=True)
    assert isinstance(trace._TRACER_PROVIDER, TracerProvider)  # loaded by statekeep's first operation


def test_an_api_that_moved_its_globals_is_read_through_its_getters() -> None:
    """Should a future OpenTelemetry API keep its providers elsewhere, statekeep asks its public
    getters (the API's unset proxy reads as no provider) rather than fail every operation."""
    from types import SimpleNamespace

    from statekeep._runtime import otel_api

    tracer_api = SimpleNamespace(get_tracer_provider=lambda: "tracers")
    meter_api = SimpleNamespace(get_meter_provider=lambda: "meters")
    found = otel_api.globals_of(tracer_api, meter_api)
    assert (found[0]._TRACER_PROVIDER, found[1]._METER_PROVIDER) == ("tracers", "meters")
    real = otel_api.globals_of(trace, __import__("opentelemetry.metrics._internal").metrics._internal)
    assert real[0] is trace  # the pinned API keeps them where statekeep reads them directly


def test_a_failing_exporter_never_fails_the_store(recorded: otel.Recorded) -> None:
    """Telemetry is best effort: an SDK or exporter that raises is warned about once; the
    operation's result stands."""

    class Broken:
        def on_start(self, span: object, parent_context: object = None) -> None:
            raise RuntimeError("exporter down")

        def on_end(self, span: object) -> None:
            raise RuntimeError("exporter down")

        def shutdown(self) -> None: ...

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

    recorded.tracer_provider.add_span_processor(Broken())  # type: ignore[arg-type]
    with MemoryStore() as store, pytest.warns(RuntimeWarning, match="exporter down"):
        store.write("s", entries(0, 1), snapshot(), create=True)
        assert store.read("s") is not None
