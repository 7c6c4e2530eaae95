"""What a copy or an import did (:class:`CopyReport`), State by State."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["copied", "extended", "updated", "same"]


@dataclass
class CopyReport:
    """What a copy did, per State: ``copied`` (new in the destination), ``extended`` (the
    rest of a history written), ``updated`` (the same history: its snapshot replaced by the
    source's), ``same`` (already there: skipped), ``failed`` (id ->
    why: a conflict, a failed check, a State the source could not read; those States were
    not changed), ``gone`` (States
    the walk of the whole source found that were expired, or deleted, by the time they were
    read: skipped) and ``missing``
    (ids asked for that the source does not hold)."""

    copied: int = 0
    extended: int = 0
    updated: int = 0
    same: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    gone: int = 0
    #: Per agent memory scope copied, what was done to its keys.
    memory: dict[str, CopyReport] = field(default_factory=dict)
    #: The ids in ``failed`` because their history differs in the destination (a conflict).
    differ: list[str] = field(default_factory=list)
    #: An import's file: the States its export left out (name -> why), as its trailer says.
    left_out: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: Outcome) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)

    def __str__(self) -> str:
        text = f"{self.copied} copied, {self.extended} extended"
        if self.updated:
            text += f", {self.updated} updated (snapshot only)"
        text += f", {self.same} already there (skipped)"
        if self.failed:
            text += f", {len(self.failed)} failed"
        if self.missing:
            text += f", {len(self.missing)} not in the source"
        if self.gone:
            text += f", {self.gone} expired or deleted meanwhile (skipped)"
        if self.left_out:
            lacks = len(self.left_out)
            text += f"; the file lacks {lacks} State{'' if lacks == 1 else 's'} its export left out"
        for scope, kept in self.memory.items():
            if kept.copied or kept.extended or kept.updated or kept.same or kept.failed:
                text += f"; memory {scope!r}: {kept}"
        return text
