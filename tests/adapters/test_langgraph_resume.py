"""A real LangGraph graph stops at an interrupt, its process exits, and a new process
resumes it through a fresh StatekeepSaver on the same store (sync and async APIs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeep import open_store
from tests.support.frameworks import BACKENDS, backend_url, child_result, require_installed

THREAD = "user:42/plan #1"  # ':' and '/' and a space: escaped into the State id, shown as is
INTERRUPTED = {
    "state": {"topic": "the report", "steps": ["draft the report"]},
    "interrupts": [{"question": "approve the draft of the report?"}],
    "next": ["approve"],
}
FINISHED = {
    "state": {
        "topic": "the report",
        "steps": ["draft the report", "approved", "published after 'ship it'"],
        "approval": "ship it",
    },
    "interrupts": [],
    "next": [],
}


def in_child(url: str, phase: str, api: str) -> dict[str, Any]:
    return child_result("tests.support.children.langgraph_child", url, THREAD, phase, api)


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
def test_a_new_process_resumes_the_interrupted_graph(backend: str, api: str, tmp_path: Path) -> None:
    require_installed("langgraph", "1.2.22")
    url = backend_url(backend, tmp_path)
    assert in_child(url, "start", api) == INTERRUPTED
    assert in_child(url, "resume", api) == FINISHED
    from statekeep.adapters.langgraph import StatekeepSaver

    with open_store(url) as store:
        (row,) = StatekeepSaver(store).store.list()  # the threads' namespace
        assert row.task == THREAD and row.labels == {"framework": "langgraph"}
        assert row.id == "user_3a42_2fplan_20_231"


@pytest.mark.parametrize("api", ["sync", "async"])
def test_memory_resumes_in_process_through_a_fresh_saver(api: str) -> None:
    """A MemoryStore lives in one process only: the two phases run in this one, each
    through a saver and graph of its own."""
    require_installed("langgraph", "1.2.22")
    from statekeep import MemoryStore
    from tests.support.children import langgraph_child

    with MemoryStore() as store:
        assert langgraph_child.run(store, THREAD, "start", api) == INTERRUPTED
        assert langgraph_child.run(store, THREAD, "resume", api) == FINISHED
