"""A real LangGraph graph compiled with ``store=StatekeepMemoryStore(...)`` learns something
in one process; a second graph in a new process recalls it from the same store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import BACKENDS, backend_url, child_result, require_installed


def in_child(url: str, user: str, phase: str, api: str) -> dict[str, Any]:
    return child_result("tests.support.children.langgraph_memory_child", url, user, phase, api)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
def test_a_graph_in_a_new_process_recalls_what_another_graph_stored(backend: str, tmp_path: Path) -> None:
    require_installed("langgraph", "1.2.22")
    url = backend_url(backend, tmp_path)
    user = "user:42 ü"  # ':' and a space and a non-ASCII letter in a namespace label
    in_child(url, user, "learn", "sync")  # a put, then a compare-and-set update
    recalled = in_child(url, user, "recall", "async")["recalled"]
    assert recalled == [
        {"ns": ["memories", user], "key": "food", "value": {"text": "likes lentil soup", "times": 2}}
    ]
