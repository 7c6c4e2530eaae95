"""Where the OpenTelemetry API keeps its global providers, read without importing it.

The API keeps them in module globals (``opentelemetry.trace._TRACER_PROVIDER``,
``opentelemetry.metrics._internal._METER_PROVIDER``: None until a provider is set), which
:mod:`.telemetry` reads on every operation: two attribute reads. Private names, so checked
once: should a future API keep them elsewhere, its public getters stand in (slower, correct),
and tests/telemetry checks that the pinned API still keeps them there.
"""

from __future__ import annotations

import os
from typing import Any


def globals_of(trace: Any, metrics: Any) -> tuple[Any, Any]:
    """What to read ``_TRACER_PROVIDER`` and ``_METER_PROVIDER`` from, once both modules are
    imported. A provider named by ``OTEL_PYTHON_TRACER_PROVIDER`` / ``OTEL_PYTHON_METER_PROVIDER``
    is loaded now (the API does so on its getters' first call, which nothing may have made)."""
    for module, name, env in (
        (trace, "tracer", "OTEL_PYTHON_TRACER_PROVIDER"),
        (metrics, "meter", "OTEL_PYTHON_METER_PROVIDER"),
    ):
        if os.environ.get(env):
            _call_getter(module, name)
    if hasattr(trace, "_TRACER_PROVIDER") and hasattr(metrics, "_METER_PROVIDER"):
        return trace, metrics
    return _Globals(trace), _Globals(metrics)


def _call_getter(module: Any, name: str) -> Any:
    getter = getattr(module, f"get_{name}_provider", None)
    try:
        return None if getter is None else getter()
    except Exception:  # a provider named in the environment that fails to load: the API logs it
        return None


class _Globals:
    """An API module whose globals moved: its public getter asked on each look. Unset, it
    gives the API's proxy, which :func:`~.telemetry.active` takes for no provider."""

    def __init__(self, module: Any) -> None:
        self._module = module

    @property
    def _TRACER_PROVIDER(self) -> Any:
        return _call_getter(self._module, "tracer")

    @property
    def _METER_PROVIDER(self) -> Any:
        return _call_getter(self._module, "meter")
