"""The ``statekeep`` command: inspect saved runs, move them, and the demo.

Every failure is one line on stderr and an exit status: 0 ok, 1 not found (no store, no
State), 2 bad usage, 3 data error (a damaged State, a file or database that is not a
statekeep store, a store of a newer statekeep), 4 store unreachable (a server that cannot
be reached or refused statekeep), 130 stopped with Ctrl-C (any command). Everything printed comes from stored data with
its control characters escaped, and without passwords.

Each command lives in its own module, registered on :data:`main` when imported here.
"""

from __future__ import annotations

from . import _approvals, _inspect, _manage, _move, _serve, _stats, _trim  # noqa: F401  (they register their commands)
from ._common import DATA_ERROR, INTERRUPTED, NOT_FOUND, OK, UNREACHABLE, USAGE
from ._group import main

__all__ = ["DATA_ERROR", "INTERRUPTED", "NOT_FOUND", "OK", "UNREACHABLE", "USAGE", "main"]
