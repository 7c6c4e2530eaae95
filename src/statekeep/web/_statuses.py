"""The choices of the runs page's status filter: running, finished, and each stop reason seen.

A store has no cheap "distinct stop reasons" query (a FileStore would read every State), so
the app gathers the reasons from what it reads anyway: the one listing each runs page makes
to count its rows' children (every State updated since the page's oldest row was created,
see :mod:`.children`), the page's rows, and every row the runs feed hands out. A reason only
older runs have, which no page has come near, is not offered (``?status=REASON`` in the URL
still filters by it, and the form then offers it).
"""

from __future__ import annotations

from collections.abc import Iterable

from .._core.records import SavedState

MOST = 100  # stop reasons kept at most (a store writing a new reason per run stays bounded)
FIXED = ("running", "finished")


class Statuses:
    """The stop reasons one app has seen (see the module's docstring)."""

    def __init__(self) -> None:
        self.reasons: set[str] = set()

    def note(self, rows: Iterable[SavedState]) -> None:
        """Remember the stop reasons of ``rows``."""
        for row in rows:
            if row.status not in FIXED and len(self.reasons) < MOST:
                self.reasons.add(row.status)

    def choices(self, rows: Iterable[SavedState], asked: str) -> list[str]:
        """The statuses to offer, ``asked`` (the one the page filters by) among them:
        running, finished, then the stop reasons in alphabetical order."""
        self.note(rows)
        reasons = self.reasons | ({asked} if asked and asked not in FIXED else set())
        return [*FIXED, *sorted(reasons)]
