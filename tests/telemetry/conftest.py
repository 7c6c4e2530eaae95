"""Each telemetry test starts with no OpenTelemetry provider set; ``otel`` sets the SDK's
in-memory ones (tests/support/otel.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import otel


@pytest.fixture(autouse=True)
def no_provider() -> Iterator[None]:
    otel.reset()
    yield
    otel.reset()


@pytest.fixture
def recorded() -> Iterator[otel.Recorded]:
    got = otel.install()
    yield got
    got.tracer_provider.shutdown()
    got.meter_provider.shutdown()
