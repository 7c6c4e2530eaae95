"""A State's save bookkeeping: which store holds it and how much of its history, kept by
``Store.save`` and load (the store seam calls these methods; users never do)."""

from __future__ import annotations

from typing import Any


class Saving:
    """The save bookkeeping :class:`~statekeep._run.state.State` inherits: where the State is
    saved, how much of its history that store has, and whether the store has it at all."""

    _store: object
    _saved: int  # the seq after the last entry the store holds
    _created: bool
    _unsure: bool  # a write failed in a way that may have stored it
    _check_agent: bool  # the first run after a load compares agents

    # What the State gives (see State): its id, its history and its snapshot.
    id: str

    @property
    def history(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def _unbound(self) -> None:
        """Saved nowhere yet."""
        self._store = None
        self._saved = 0
        self._created = False
        self._unsure = False
        self._check_agent = False

    def _unsaved(self, store: object) -> tuple[list[dict[str, Any]], dict[str, Any], bool, bool]:
        """What a save to ``store`` sends: the entries it lacks, the snapshot, ``create``
        (the first save), and whether an earlier create failed after it may have been
        stored. ValueError if the State is saved in another store."""
        if self._store is not None and self._store != store:
            raise ValueError(
                f"State {self.id!r} is saved in {self._store!r}; a State is saved in one store only. "
                "Load it from that store, or make a new State for this one"
            )
        create = not self._created
        start = self._next_seq() - len(self.history)  # above 0 for a trimmed history
        return self.history[max(self._saved - start, 0) :], self.snapshot(), create, create and self._unsure

    def _next_seq(self) -> int:
        """The seq after the last entry (a trimmed history starts above seq 0)."""
        history = self.history
        return history[-1]["seq"] + 1 if history else 0

    def _expected_next(self) -> int | None:
        """A save's ``expect_next``: None before the create, and after a write that may have landed."""
        return None if self._unsure or not self._created else self._saved

    def _mark_saved(self, store: object, sent: int) -> None:
        """``store`` now holds the first ``sent`` entries (and so holds the State)."""
        self._store, self._saved, self._created, self._unsure = store, sent, True, False

    def _mark_failed(self) -> None:
        """A save failed in a way that may have stored it; the next save skips what is stored
        (a failed create is retried as an append first), without ``expect_next``."""
        self._unsure = True

    def _bind_loaded(self, store: object) -> None:
        """The State was just loaded from ``store``, which holds all of it; its first run
        compares agents (:class:`ResumeWarning`)."""
        self._mark_saved(store, self._next_seq())
        self._check_agent = True
