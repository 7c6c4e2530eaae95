"""``statekeep show ID --store URL --follow`` (or without --follow) in a subprocess, its stdout and stderr read line
by line as they come, so that a test waits for a line (a generous deadline), never sleeps."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from typing import IO

import pytest

DEADLINE = 60.0


class Follower:
    """The follower process; :meth:`wait_for` / :meth:`wait_for_error` read its lines."""

    def __init__(self, url: str, state_id: str, *extra: str, follow: bool = True) -> None:
        command = ["show", state_id, "--store", url, *(["--follow"] if follow else []), *extra]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "statekeep", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C must raise KeyboardInterrupt in the child, also when this test runs
            # with SIGINT ignored (a shell's background job): Python then installs its handler.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.error_lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        self.stderr_reader = threading.Thread(
            target=self._read, args=(self.proc.stderr, self.error_lines), daemon=True
        )
        self.stderr_reader.start()

    @staticmethod
    def _read(stream: IO[str], lines: queue.Queue[str | None]) -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def wait_for(self, text: str) -> str:
        """The first stdout line (not seen before) holding ``text``; fails at the deadline or the end."""
        return self._wait(self.lines, self.seen, text)

    def wait_for_error(self, text: str) -> str:
        """The first stderr line (not seen before) holding ``text``."""
        return self._wait(self.error_lines, self.errors, text)

    @staticmethod
    def _wait(lines: queue.Queue[str | None], seen: list[str], text: str) -> str:
        while True:
            try:
                line = lines.get(timeout=DEADLINE)
            except queue.Empty:
                pytest.fail(f"no line with {text!r} within {DEADLINE}s; seen: {seen}")
            if line is None:
                lines.put(None)  # the end stays the end for the next reader
                pytest.fail(f"the follow ended before a line with {text!r}; seen: {seen}")
            seen.append(line)
            if text in line:
                return line

    def end(self) -> tuple[int, str, list[str]]:
        """Exit status, all of stderr, and the stdout lines not read yet."""
        status = self.proc.wait(timeout=DEADLINE)
        rest: list[str] = []
        while (line := self.lines.get(timeout=DEADLINE)) is not None:
            rest.append(line)
        self.stderr_reader.join(timeout=DEADLINE)
        while (line := self.error_lines.get(timeout=DEADLINE)) is not None:
            self.errors.append(line)
        return status, "".join(f"{line}\n" for line in self.errors), rest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
