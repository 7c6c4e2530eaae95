"""The process the exactly-once crash harness kills (tests/agent/test_exactly_once_crash.py and
the soak): ``python -m tests.support.children.ledger_child``, a fork server.

It imports statekeep once, starts no thread, and reads jobs from stdin, one JSON object a
line: ``{"store": {"kind", "where", "namespace"}, "state_id", "ledger", "fault": [kind, k,
side] | null, "kill_after": seconds | null}``. For each it forks a child that opens the
store and runs the State once (:func:`tests.support.ledger.run_once`) with the fault hook
armed, so the child SIGKILLs itself at that boundary; with ``kill_after`` this process
SIGKILLs the child from outside that long after the fork instead (wherever it is). It then
writes one JSON line: ``{"signal": N | null, "code": N | null}``. A child that finishes
exits 0; one that fails prints its traceback on stderr and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

import statekeep.stores  # noqa: F401  (imported once, before the forks: each child starts at once)
from tests.support.ledger import FaultHook, Ledger, StoreSpec, run_once


def run_job(job: dict[str, Any]) -> int:
    fault = job.get("fault")
    ledger = Ledger(job["ledger"], FaultHook(None if fault is None else (fault[0], fault[1], fault[2])))
    store = StoreSpec(**job["store"]).open()
    try:
        state = run_once(store, job["state_id"], ledger)
    finally:
        store.close()
    return 0 if state.finished else 1


def main() -> None:
    assert threading.active_count() == 1, "a fork server must start no thread before it forks"
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_job(job)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        if job.get("kill_after") is not None:
            time.sleep(job["kill_after"])  # a random instant of the soak, not a synchronisation
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        died = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"signal": died, "code": code}), flush=True)


if __name__ == "__main__":
    main()
