"""The test side of tests/support/children/lease_worker.py: start a worker process and talk to it.

Every wait for a reply has a deadline; missing it fails the test with the worker's stderr
(it never decides anything by time). A worker can be paused (SIGSTOP) and resumed
(SIGCONT) between commands, or sent a command whose reply is collected later.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from tests.support import REPO
from tests.support.serverprocs import _die_with_parent

REPLY_TIMEOUT = 60.0  # a watchdog against a hung worker, never reached when things work


class WorkerError(Exception):
    """The worker's command raised ``error`` (the exception's class name) with ``message``."""

    def __init__(self, name: str, error: str, message: str) -> None:
        super().__init__(f"{name}: {error}: {message}")
        self.error = error
        self.message = message


class Worker:
    """One ``python -m tests.support.children.lease_worker`` process, run under ``prefix`` (e.g.
    ``ip netns exec NS``) if given."""

    def __init__(self, name: str, prefix: Sequence[str] = ()) -> None:
        self.name = name
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  # closed by stop()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.support.children.lease_worker"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            preexec_fn=_die_with_parent,
        )
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.sent: list[str] = []
        self.started = False  # its first line, {"ready": PID}, read (by the first reply())
        threading.Thread(target=self._read, name=f"worker-{name}", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)  # the worker's stdout closed: it ended

    def _tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    def send(self, op: str, **args: Any) -> None:
        """Send a command without waiting for its reply (collect it with :meth:`reply`)."""
        assert self.proc.stdin is not None
        self.sent.append(op)
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        self.proc.stdin.flush()

    def reply(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        """The next reply, in the order the commands were sent."""
        if not self.started:  # workers started together import statekeep in parallel
            self.started = True
            # The worker runs as this very process (``ip netns exec`` execs it): signals
            # go through Popen, which never signals a pid it has reaped.
            assert self.reply(timeout)["ready"] == self.proc.pid
        try:
            got = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"worker {self.name} gave no reply within {timeout:.0f} s (commands sent: {self.sent});"
                f" stderr:\n{self._tail()}"
            ) from None
        if got is None:
            raise AssertionError(
                f"worker {self.name} ended ({self.proc.wait()}) without a reply; stderr:\n{self._tail()}"
            )
        return got

    def has_reply(self) -> bool:
        """Has a reply arrived (without waiting)?"""
        return not self.replies.empty()

    def result(self) -> Any:
        """The next reply's value; WorkerError if the command raised."""
        got = self.reply()
        if not got["ok"]:
            raise WorkerError(self.name, got["error"], got["message"])
        return got["value"]

    def call(self, op: str, **args: Any) -> Any:
        """Run one command and return its value; WorkerError if it raised."""
        self.send(op, **args)
        return self.result()

    def refused(self, op: str, **args: Any) -> str:
        """Run one command that must raise; its exception's class name."""
        self.send(op, **args)
        got = self.reply()
        assert not got["ok"], f"worker {self.name}: {op} {args} was not refused: {got}"
        return str(got["error"])

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill the worker (SIGKILL ends a paused one too) and reap it; again is a no-op."""
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if not self.stderr.closed:
            self.stderr.close()


def wait_lease_gone(worker: Worker, state: str, timeout: float = REPLY_TIMEOUT) -> None:
    """Poll the store's own clock, through ``worker``, until ``state`` has no live lease."""
    deadline = time.monotonic() + timeout
    while worker.call("current_lease", state=state) is not None:
        assert time.monotonic() < deadline, f"the lease on {state} did not expire within {timeout:.0f} s"
        time.sleep(0.02)  # between polls: the store's clock decides, not this pause
