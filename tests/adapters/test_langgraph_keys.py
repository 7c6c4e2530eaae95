"""statekeep.adapters.langgraph.tool_call_key: a LangGraph tool's idempotency key, from its
ToolRuntime or its config and InjectedToolCallId, the same in a new process resuming the
thread, different per call and per thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from statekeep import MemoryStore, idempotency_key
from statekeep.adapters.langgraph import tool_call_key
from tests.support.children import langgraph_keys_child
from tests.support.frameworks import REPO, backend_url, require_installed

THREAD = "user:42/orders"
EXPECTED = {call_id: idempotency_key(THREAD, None, call_id) for _, call_id in langgraph_keys_child.CALLS}


def in_child(url: str, phase: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.children.langgraph_keys_child", url, THREAD, phase],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_new_process_resuming_the_thread_gives_its_tools_the_same_keys(
    backend: str, tmp_path: Path
) -> None:
    require_installed("langgraph", "1.2.22")
    url = backend_url(backend, tmp_path)
    assert in_child(url, "start") == {}  # stopped before the tools
    assert in_child(url, "resume") == EXPECTED  # both ways of reaching the call id


def test_keys_differ_per_call_and_per_thread() -> None:
    require_installed("langgraph", "1.2.22")
    with MemoryStore() as store:
        here = langgraph_keys_child.run(store, THREAD, "start") or langgraph_keys_child.run(
            store, THREAD, "resume"
        )
        other = langgraph_keys_child.run(store, "another thread", "start") or langgraph_keys_child.run(
            store, "another thread", "resume"
        )
    assert here == EXPECTED
    assert len(set(here.values())) == 2  # per call
    assert set(here.values()).isdisjoint(other.values())  # per thread
    assert other == {c: idempotency_key("another thread", None, c) for c in here}


def test_the_parts_of_a_key() -> None:
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "sub"}}
    key = tool_call_key(config, "call-1")
    assert key == idempotency_key(THREAD, None, "call-1") and key.startswith("sk1_")
    assert (
        tool_call_key(SimpleNamespace(config=config, tool_call_id="call-1")) == key
    )  # a ToolRuntime's fields
    # a thread id that is no str is taken as StatekeepSaver takes it: str(thread_id)
    assert tool_call_key({"configurable": {"thread_id": 42}}, "c") == idempotency_key("42", None, "c")


def test_a_missing_thread_or_call_id_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"no thread id in the config.*thread_id"):
        tool_call_key({"configurable": {}}, "call-1")
    with pytest.raises(TypeError, match="no thread id"):
        tool_call_key(None, "call-1")
    with pytest.raises(TypeError, match=r"no tool call id.*InjectedToolCallId"):
        tool_call_key({"configurable": {"thread_id": "t"}})
    with pytest.raises(TypeError, match="no tool call id"):
        tool_call_key(SimpleNamespace(config={"configurable": {"thread_id": "t"}}, tool_call_id=None))
