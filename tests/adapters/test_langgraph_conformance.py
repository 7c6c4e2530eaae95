"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance) run
against StatekeepSaver on every statekeep backend: every base capability must pass, and so
must the extended ones the adapter implements (copy_thread, delete_for_runs, prune)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.frameworks import BACKENDS, require_installed
from tests.support.stores import STORE_FACTORIES

BASE = {"put", "put_writes", "get_tuple", "list", "delete_thread"}
EXTENDED = {"copy_thread", "delete_for_runs", "prune"}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_conformance_suite_passes_every_capability(backend: str, tmp_path: Path) -> None:
    require_installed("langgraph-checkpoint-conformance", "0.0.2")
    require_installed("langgraph-checkpoint", "4.3.2")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES

    from statekeep.adapters.langgraph import StatekeepSaver

    # The suite's own lists: if a new version adds a capability, this test says so.
    assert {c.value for c in BASE_CAPABILITIES} == BASE
    assert {c.value for c in EXTENDED_CAPABILITIES} == EXTENDED

    store = STORE_FACTORIES[backend](tmp_path)
    savers: list[StatekeepSaver] = []

    @checkpointer_test(name=f"StatekeepSaver on {backend}")
    async def saver() -> AsyncIterator[StatekeepSaver]:
        savers.append(StatekeepSaver(store))  # a fresh saver per capability, on one store
        yield savers[-1]

    try:
        report = await validate(saver)
    finally:
        await store.aclose()
    report.print_report()  # shown with -s: the base and the extended capabilities detected
    results = report.results
    failures = {name: result.failures for name, result in results.items() if result.failures}
    assert report.passed_all_base(), failures
    assert {name for name, result in results.items() if result.detected} == BASE | EXTENDED
    assert report.passed_all(), failures
    assert report.conformance_level() == "FULL"
    assert all(results[name].tests_passed > 0 for name in BASE | EXTENDED)
    assert len(savers) == len(BASE | EXTENDED)
