"""OpenTelemetry for the tests: the SDK's in-memory span exporter and metric reader set as the
process's global providers, and the globals put back as they were at start-up afterwards.

The API lets a process set each global provider once; the tests reset the globals between
tests as OpenTelemetry's own tests do (``opentelemetry.test.globals_test``), so each test
starts with no provider set, as a program does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_globals
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@dataclass
class Recorded:
    """What the global providers recorded."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        """The spans ended so far whose name starts with ``prefix``, in the order they ended."""
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` collected now (each with ``attributes``)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def clear(self) -> None:
        self.exporter.clear()


def install() -> Recorded:
    """Set an SDK tracer provider (in-memory exporter) and meter provider (in-memory reader)
    as the global ones."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return Recorded(exporter, reader, tracer_provider, meter_provider)


def reset() -> None:
    """Put the global providers back to unset (the API's default: nothing recorded)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_globals._METER_PROVIDER_SET_ONCE = Once()
    metrics_globals._METER_PROVIDER = None


def content_in(recorded: Recorded, *secrets: str) -> list[str]:
    """Every span attribute, event and link attribute and metric attribute that holds one of
    ``secrets`` (empty: none)."""
    found = []
    for span in recorded.spans():
        values = [*span.attributes.items(), *(kv for e in span.events for kv in e.attributes.items())]
        values += [kv for link in span.links for kv in link.attributes.items()]
        values += [("name", span.name), ("status", span.status.description or "")]
        found += [f"{span.name}: {k}={v!r}" for k, v in values if any(s in str(v) for s in secrets)]
    data = recorded.reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for m in scope.metrics:
                for point in m.data.data_points:
                    found += [
                        f"{m.name}: {k}={v!r}"
                        for k, v in point.attributes.items()
                        if any(s in str(v) for s in secrets)
                    ]
    return found
