"""A real LangGraph graph compiled with ``store=StatekeepMemoryStore(...)`` learns something
in one process; a second graph in a new process recalls it from the same store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import BACKENDS, REPO, backend_url, require_installed


def in_child(url: str, user: str, phase: str, api: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.children.langgraph_memory_child", url, user, phase, api],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


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
