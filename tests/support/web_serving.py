"""Running ``statekeep serve`` in a process of its own for the viewer's tests, and reading
its Server-Sent Events."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

DEADLINE = 60.0  # seconds: generous, a loaded machine is slow; no test waits this long when it passes
SERVING = "statekeep: serving "
#: Every server process started, so that a failed test's is killed (see reap_servers).
STARTED: list[subprocess.Popen[bytes]] = []


def read_line(proc: subprocess.Popen[bytes], deadline: float = DEADLINE) -> str:
    """The next line ``proc`` prints on stdout; AssertionError if none comes in time."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(deadline):
            raise AssertionError(f"no line from {proc.args} in {deadline} s")
    return proc.stdout.readline().decode()


def start_serve(
    *args: str, env: dict[str, str] | None = None, code: str | None = None
) -> subprocess.Popen[bytes]:
    """``statekeep serve ARGS`` (or ``python -c CODE``) with its stdout and stderr piped."""
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "statekeep", "serve", *args]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    STARTED.append(proc)
    return proc


def reap_servers() -> None:
    """Kill the servers a test left running (it failed before stopping them)."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=DEADLINE)


def url_of(proc: subprocess.Popen[bytes]) -> str:
    """The URL the serving line names (fails with the server's stderr if it never comes)."""
    line = read_line(proc)
    if not line.startswith(SERVING):
        proc.kill()
        _, err = proc.communicate(timeout=DEADLINE)
        raise AssertionError(f"no serving line: {line!r}, stderr: {err.decode()}")
    assert line.endswith(" (Ctrl-C to stop)\n"), line
    return line[len(SERVING) :].split(" ")[0]


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> tuple[int, str]:
    """Send ``sig`` and wait: the exit status and what the server printed on stderr."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, err.decode()


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``statekeep serve --port 0 ARGS`` running; its URL. Stopped cleanly at the end."""
    proc = start_serve("--port", "0", *args, env=env)
    try:
        yield url_of(proc)
    finally:
        if proc.poll() is None:
            status, err = stop(proc)
            assert status == 0, err


def events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """The events of a Server-Sent Events response, as (name, JSON data), as they arrive."""
    name, data = "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def until(stream: Iterator[tuple[str, Any]], name: str, **where: Any) -> Any:
    """Read ``stream`` until an event ``name`` whose data has every ``where`` item; its data.
    The client's read timeout bounds the wait."""
    end = time.monotonic() + DEADLINE
    for got, data in stream:
        if got == name and all(data.get(k) == v for k, v in where.items()):
            return data
        assert time.monotonic() < end, f"no {name} {where} event in {DEADLINE} s"
    raise AssertionError(f"the stream ended before a {name} {where} event")


def client(**kwargs: Any) -> httpx.Client:
    return httpx.Client(timeout=httpx.Timeout(DEADLINE), **kwargs)
