"""OpenTelemetry: a span and metrics for each store operation, when a provider is set.

Nothing here imports OpenTelemetry. :func:`active` looks at the modules already imported: a
process that never imported ``opentelemetry.trace`` has no tracer provider set, and one whose
global providers are unset (the API's default, which records nothing) or the API's no-op
ones gets None, so an operation then costs two dict lookups and a compare. The providers are
looked up on every operation, so a provider set after the store was made is used from the
next operation on; the tracer and instruments made for a pair of providers are kept until
that pair changes.

An operation's span is made in the caller's thread and made current there (in the caller's
context); the owner loop runs the operation in a copy of that context (see
:meth:`~statekeep._runtime.bridge.Owner.start`), so spans begun on the loop (a fork's writes,
a save's write) have it as their parent, and it has the caller's span as its own. Its
attributes never hold State content; the State id only for a store made with
``trace_ids=True``. An error sets the span's status and ``error.type`` (the exception's class
name; never its message, which may quote data).
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
import warnings
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from . import otel_api

F = TypeVar("F", bound=Callable[..., Any])

#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "statekeep"
#: Histogram buckets (an advice the SDK takes unless a View says otherwise): the SDK's default
#: ones (0, 5, 10, 25, ... 10000) suit milliseconds; durations are in seconds, from a MemoryStore's
#: tens of µs to a server's seconds, and batches count writes, one to hundreds.
DURATION_BUCKETS = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0
]  # fmt: skip
BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
#: Set when recording failed once (an SDK or exporter raising): warned once, never raised.
_failed = False


class Tools:
    """The tracer and instruments of one pair of global providers (either may be None)."""

    __slots__ = (
        "batch",
        "bytes",
        "context",
        "duration",
        "entries",
        "errors",
        "link",
        "span_kind",
        "status",
        "trace",
        "tracer",
    )

    def __init__(self, trace: Any, tracer_provider: Any, meter_provider: Any) -> None:
        # The package's version, read where it is already imported (not imported from here: a layer below it).
        version = getattr(sys.modules.get("statekeep"), "__version__", None)
        self.trace = trace
        self.tracer = None
        if trace is not None and tracer_provider is not None:
            from opentelemetry import context  # imported by opentelemetry.trace already

            self.context = context
            self.tracer = tracer_provider.get_tracer(SCOPE, version)
            self.link = trace.Link
            self.span_kind = trace.SpanKind
            self.status = (trace.Status, trace.StatusCode.ERROR)
        self.duration = None
        if meter_provider is not None:
            meter = meter_provider.get_meter(SCOPE, version)
            self.duration = meter.create_histogram(
                "statekeep.operation.duration",
                unit="s",
                description="How long a store operation took.",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )
            self.bytes = meter.create_counter(
                "statekeep.bytes", unit="By", description="Encoded bytes of entries and snapshots written."
            )
            self.entries = meter.create_counter(
                "statekeep.entries", unit="{entry}", description="History entries written and read."
            )
            self.batch = meter.create_histogram(
                "statekeep.batch.size",
                unit="{write}",
                description="Writes committed together (group commit) with each write.",
                explicit_bucket_boundaries_advisory=BATCH_BUCKETS,
            )
            self.errors = meter.create_counter(
                "statekeep.errors", unit="{error}", description="Store operations that raised, by error type."
            )


#: The API's own providers that record nothing (its proxies are never the globals: listed to be sure).
_NO_OP_TRACERS = ("NoOpTracerProvider", "ProxyTracerProvider")
_NO_OP_METERS = ("NoOpMeterProvider", "_ProxyMeterProvider")
#: The providers last seen, and what :func:`active` made for them.
_cache: tuple[object, object, Tools | None] = (None, None, None)
#: The API's modules that hold the global providers, kept once both are imported (see :func:`_api`).
_TRACE, _METRICS = "opentelemetry.trace", "opentelemetry.metrics._internal"
_api_modules: tuple[Any, Any] | None = None


def _api() -> tuple[Any, Any] | None:
    """The API's two modules (either None while not imported); None while neither is.

    Once both are imported: a provider named by ``OTEL_PYTHON_TRACER_PROVIDER`` /
    ``OTEL_PYTHON_METER_PROVIDER`` is loaded (the API does so on its getters' first call),
    and should a future API keep its globals elsewhere, its public getters stand in."""
    global _api_modules
    trace, metrics = sys.modules.get(_TRACE), sys.modules.get(_METRICS)
    if trace is None and metrics is None:
        return None
    if trace is not None and metrics is not None:
        _api_modules = otel_api.globals_of(trace, metrics)
    return trace, metrics


def active() -> Tools | None:
    """What to record an operation with now, or None: no provider set, or only no-op ones.

    Reads the API's globals (``_TRACER_PROVIDER``, ``_METER_PROVIDER``: None until a provider
    is set) from its modules, imported by someone else or not at all (then no provider can
    be set). tests/telemetry checks that the API still keeps them there."""
    api = _api_modules or _api()
    if api is None:
        return None
    tracers = getattr(api[0], "_TRACER_PROVIDER", None)
    meters = getattr(api[1], "_METER_PROVIDER", None)
    if tracers is None and meters is None:
        return None
    cached = _cache
    if cached[0] is tracers and cached[1] is meters:
        return cached[2]
    return _refresh(tracers, meters)


def _refresh(tracers: Any, meters: Any) -> Tools | None:
    global _cache
    tracing = None if tracers is None or type(tracers).__name__ in _NO_OP_TRACERS else tracers
    metering = None if meters is None or type(meters).__name__ in _NO_OP_METERS else meters
    tools = (
        None if tracing is None and metering is None else Tools(sys.modules.get(_TRACE), tracing, metering)
    )
    _cache = (tracers, meters, tools)
    return tools


#: The operation being recorded in this context (None: none, or telemetry is off).
recording: ContextVar[Op | None] = ContextVar("statekeep_recording", default=None)


class Op:
    """One store operation being recorded: its span (made current) and what it measured."""

    __slots__ = (
        "attrs",
        "batch",
        "bytes",
        "entries",
        "name",
        "span",
        "started",
        "states",
        "store",
        "tokens",
        "tools",
        "twin",
    )

    def __init__(self, tools: Tools, store: Any, name: str, state_id: str | None) -> None:
        self.tools, self.store, self.name = tools, store, name
        self.entries: int | None = None
        self.bytes: int | None = None
        self.batch: int | None = None
        self.states: int | None = None
        self.twin = False  # a sync method's: its async twin, run for it, records nothing more
        self.attrs: dict[str, Any] = {
            "statekeep.operation": name,
            "statekeep.backend": type(store).__name__,
            "statekeep.namespace": store.namespace,
        }
        self.span = None
        attached = None
        if tools.tracer is not None:
            attrs = self.attrs
            if state_id is not None and store._trace_ids:
                attrs = {**attrs, "statekeep.state.id": state_id}
            self.span = span = tools.tracer.start_span(f"statekeep.{name}", attributes=attrs)
            attached = tools.context.attach(tools.trace.set_span_in_context(span))
        self.tokens = (recording.set(self), attached)  # last: nothing above raises with it set
        self.started = time.perf_counter()

    def wrote(self, lines: tuple[bytes, ...], snapshot: bytes | None) -> None:
        """Note a prepared write: its entries and encoded bytes."""
        self.entries = len(lines)
        self.bytes = sum(map(len, lines)) + (len(snapshot) if snapshot is not None else 0)

    def end(self, error: BaseException | None) -> None:
        try:
            self._end(error)
        except Exception as exc:  # telemetry never fails a store operation
            _failing(exc)

    def _end(self, error: BaseException | None) -> None:
        took = time.perf_counter() - self.started
        tools, attrs = self.tools, self.attrs
        error_type = None if error is None else type(error).__qualname__
        span = self.span
        if span is not None:
            measured = {
                "statekeep.entries": self.entries,
                "statekeep.bytes": self.bytes,
                "statekeep.batch.size": self.batch,
                "statekeep.states": self.states,
            }
            span.set_attributes({k: v for k, v in measured.items() if v is not None})
            if error_type is not None:
                span.set_attribute("error.type", error_type)
                status, code = tools.status
                span.set_status(status(code, error_type))
            span.end()
            _reset(lambda: tools.context.detach(self.tokens[1]))
        _reset(lambda: recording.reset(self.tokens[0]))
        if tools.duration is None:
            return
        if error_type is not None:
            attrs = {**attrs, "error.type": error_type}
            tools.errors.add(1, attrs)
        tools.duration.record(took, attrs)
        if self.entries:
            tools.entries.add(self.entries, attrs)
        if self.bytes:
            tools.bytes.add(self.bytes, attrs)
        if self.batch is not None:
            tools.batch.record(self.batch, attrs)


def start(store: Any, name: str, state_id: str | None) -> Op | None:
    """An :class:`Op` for ``store``'s operation ``name`` (a store with telemetry on), or None
    when nothing records it. Every recorded operation starts here: once the API's modules
    are imported, with no provider set, it costs two attribute reads."""
    api = _api_modules
    if api is not None:
        if api[0]._TRACER_PROVIDER is None and api[1]._METER_PROVIDER is None:
            return None
    elif _api() is None:
        return None
    tools = active()
    if tools is None:
        return None
    try:
        return Op(tools, store, name, state_id)
    except Exception as exc:  # telemetry never fails a store operation
        _failing(exc)
        return None


def _failing(exc: Exception) -> None:
    global _failed
    if not _failed:
        _failed = True
        warnings.warn(
            f"statekeep telemetry: recording an operation failed ({type(exc).__name__}: {exc}); "
            "the operation went on, and recording goes on where it can",
            RuntimeWarning,
            stacklevel=4,
        )


def _measured(measure: Measure, op: Op, result: Any) -> None:
    try:
        measure(op, result)
    except Exception as exc:  # a result of a shape not foreseen: the operation succeeded anyway
        _failing(exc)


def _reset(undo: Callable[[], object]) -> None:
    """Undo a context change; an operation ended in another context than it began in (a task
    abandoned with its loop, ended by the garbage collector) has nothing to undo there."""
    try:
        undo()
    except ValueError:
        pass


def end(op: Op | None, error: BaseException | None) -> None:
    """End ``op`` (None: nothing), ``error`` the exception it raised, or None."""
    if op is not None:
        op.end(error)


def note_batch(op: Op | None, size: int) -> None:
    """Note the size of the group-commit batch the write of ``op`` went in."""
    if op is not None:
        op.batch = size


#: How an operation's arguments name its State, and what its result says.
IdOf = Callable[[tuple[Any, ...], dict[str, Any]], str | None]
Measure = Callable[["Op", Any], None]


def first_id(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    found = args[0] if args else kwargs.get("state_id")
    return found if isinstance(found, str) else None


def state_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    found = getattr(args[0] if args else kwargs.get("state"), "id", None)
    return found if isinstance(found, str) else None


def no_id(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    return None


def traced(name: str, method: F, id_of: IdOf = first_id, measure: Measure | None = None) -> F:
    """``method`` (a store's public method, sync or async), recorded as operation ``name``
    when telemetry is on; as it was otherwise. A sync method whose async twin it runs (a
    sync ``fork`` runs ``afork``) records one operation, not two."""
    twin = "a" + name

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def arecorded(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer = recording.get()
            if outer is not None and outer.twin and outer.store is self and outer.name == name:
                outer.twin = False
                return await method(self, *args, **kwargs)
            op = start(self, name, id_of(args, kwargs)) if self._telemetry else None
            if op is None:
                return await method(self, *args, **kwargs)
            try:
                result = await method(self, *args, **kwargs)
            except BaseException as exc:
                op.end(exc)
                raise
            if measure is not None:
                _measured(measure, op, result)
            op.end(None)
            return result

        return arecorded  # type: ignore[return-value]

    @functools.wraps(method)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        op = start(self, name, id_of(args, kwargs)) if self._telemetry else None
        if op is None:
            return method(self, *args, **kwargs)
        op.twin = getattr(type(self), twin, None) is not None
        try:
            result = method(self, *args, **kwargs)
        except BaseException as exc:
            op.end(exc)
            raise
        if measure is not None:
            _measured(measure, op, result)
        op.end(None)
        return result

    return recorded  # type: ignore[return-value]


def read_entries(op: Op, record: Any) -> None:
    op.entries = 0 if record is None else len(record.entries)


def states(op: Op, result: Any) -> None:
    op.states = len(result) if isinstance(result, list) else int(result)
