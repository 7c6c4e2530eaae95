"""What bench_budget observes from outside a store, through public seams only: each
thread's CPU time (``pthread_getcpuclockid``), the FileStore's calls through its ``OsIO``
(``io=``), the statements a SQLiteStore runs (a trace callback on the connections it opens
with ``sqlite3.connect``) and, under ``strace -f -c``, every system call.

Nothing here names a store's private function: a seam that is gone shows as "n/a".
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    from statekeep.stores import OsIO
except ImportError:  # pragma: no cover - the seam moved: FileStore rows say n/a
    OsIO = None  # type: ignore[assignment,misc]

# -- CPU time per thread ---------------------------------------------------------------------


def role(name: str) -> str:
    """Which part of a write a thread does, from its name."""
    if name == "MainThread":
        return "caller"
    if name == "statekeep-loop":
        return "owner loop"
    if name.startswith("statekeep-"):
        return "statekeep workers"
    if name.startswith("asyncio_"):
        return "to_thread workers"
    return "other"


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Each live thread's role and CPU seconds so far."""
    out = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):
            continue  # ended meanwhile, or no per-thread clocks here
        out[thread.ident] = (role(thread.name), seconds)
    return out


def cpu_by_role(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> Counter[str]:
    """CPU seconds per role between two :func:`thread_cpu` samples (a thread started
    meanwhile counts whole; one that ended meanwhile is lost: the process total has it)."""
    out: Counter[str] = Counter()
    for ident, (name, seconds) in after.items():
        out[name] += seconds - before.get(ident, (name, 0.0))[1]
    return out


class CPUWindow:
    """CPU per thread role and for the whole process over a timed loop."""

    def __enter__(self) -> CPUWindow:
        self.threads, self.process = thread_cpu(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.roles = cpu_by_role(self.threads, thread_cpu())
        self.roles["all threads"] = time.process_time() - self.process


# -- the FileStore's OsIO calls ---------------------------------------------------------------


class Recorder:
    """Per OsIO method: calls and wall time, by thread role. Only the innermost calls count
    (``write_all`` loops over ``write``: the writes count, not the loop)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds: Counter[tuple[str, str]] = Counter()  # (role, method)
        self._local = threading.local()
        self.on = False

    def run(self, method: str, call: Callable[[], Any]) -> Any:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth, local.inner = depth + 1, False
        start = time.perf_counter()
        try:
            return call()
        finally:
            elapsed = time.perf_counter() - start
            innermost = not local.inner
            local.depth, local.inner = depth, True
            if innermost and self.on:
                self.calls[method] += 1
                self.seconds[(role(threading.current_thread().name), method)] += elapsed


def recording_io(recorder: Recorder, *, sync: bool = True) -> Any:
    """An OsIO whose every public method (whatever OsIO has now) goes through ``recorder``;
    without ``sync`` its ``fsync`` does nothing. None if the seam is gone."""
    if OsIO is None:
        return None

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "fsync" and not sync:
                return recorder.run(name, lambda: None)
            return recorder.run(name, lambda: method(self, *args, **kwargs))

        return call

    names = [n for n in dir(OsIO) if not n.startswith("_") and callable(getattr(OsIO, n))]
    cls = type("RecordingIO", (OsIO,), {n: wrap(n, getattr(OsIO, n)) for n in names})
    return cls()


def no_sync_io() -> Any:
    """An OsIO whose fsync does nothing (None if the seam is gone)."""
    if OsIO is None:
        return None
    return type("NoSyncIO", (OsIO,), {"fsync": lambda self, fd: None})()


# -- a SQLiteStore's statements -------------------------------------------------------------------


class Connections:
    """The connections ``sqlite3.connect`` opens while :meth:`watching` (a SQLiteStore's
    own: it opens them lazily), each traced: :attr:`statements` counts what they run."""

    def __init__(self) -> None:
        self.opened: list[sqlite3.Connection] = []
        self.statements: list[str] = []
        self.on = False

    def _trace(self, sql: str) -> None:
        if self.on:
            self.statements.append(sql)

    @contextlib.contextmanager
    def watching(self, *, trace: bool = True) -> Iterator[Connections]:
        """Catch the connections opened meanwhile (traced unless ``trace`` is False)."""
        real = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = real(*args, **kwargs)
            if trace:
                conn.set_trace_callback(self._trace)
            self.opened.append(conn)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        try:
            yield self
        finally:
            sqlite3.connect = real

    def synchronous_off(self) -> bool:
        """PRAGMA synchronous=OFF on every connection opened (none: False)."""
        for conn in self.opened:
            conn.execute("PRAGMA synchronous = OFF")
        return bool(self.opened)

    def synchronous(self) -> set[int]:
        """The synchronous level of each connection caught that is still open."""
        levels = set()
        for conn in self.opened:
            try:
                levels.add(conn.execute("PRAGMA synchronous").fetchone()[0])
            except sqlite3.ProgrammingError:  # closed
                pass
        return levels


def statement_kinds(statements: list[str]) -> str:
    """``BEGIN x1, INSERT x3, ...``: each statement's first words, counted, in order."""
    kinds: Counter[str] = Counter()
    for sql in statements:
        words = sql.split()
        head = " ".join(words[:2]) if words[:1] == ["PRAGMA"] else " ".join(words[:1])
        kinds[re.sub(r"\s*=.*", "", head).upper()] += 1
    return ", ".join(f"{k} x{n}" for k, n in kinds.items())


# -- strace ---------------------------------------------------------------------------------------


def strace_run(args: list[str], out: Path) -> Counter[str] | None:
    """System calls of ``python <args>`` (all its threads) by name, from ``strace -f -c``
    (its table written to ``out``); None if strace is not on PATH."""
    if shutil.which("strace") is None:
        return None
    cmd = ["strace", "-f", "-c", "-o", str(out), sys.executable, *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return parse_strace(out.read_text())


def parse_strace(text: str) -> Counter[str]:
    """Calls per system call from ``strace -c``'s table (the errors column may be empty)."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0].replace(".", "").isdigit() and fields[-1] != "total":
            out[fields[-1]] += int(fields[3])
    return out


def strace_split(per_write: Counter[str]) -> dict[str, float]:
    """futex, epoll and the rest, and the total, per write."""
    futex = per_write["futex"]
    epoll = sum(v for k, v in per_write.items() if k.startswith("epoll"))
    total = sum(per_write.values())
    return {"futex": futex, "epoll": epoll, "other": total - futex - epoll, "total": total}
