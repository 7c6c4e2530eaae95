"""An I/O seam that kills its own process (SIGKILL) at a chosen step, for the tests that
run a FileStore operation in a child and kill it at every step in turn (see the trim and
reseal crash tests)."""

from __future__ import annotations

import os
import signal
from typing import Any

from statekeep.stores._fsio import OsIO

#: The file operations counted as steps.
STEPS = ("open", "write", "fsync", "truncate", "chmod", "rename", "mkdir", "unlink", "rmdir")


class KillingIO(OsIO):
    """:class:`OsIO` that, once ``armed`` is set, sends SIGKILL to its own process before
    the step numbered ``left`` (0 = the first step after arming)."""

    def __init__(self, left: int) -> None:
        super().__init__()
        self.armed = False
        self.left = left

    def _step(self) -> None:
        if self.armed:
            if self.left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            self.left -= 1


def _counted(name: str) -> Any:
    op = getattr(OsIO, name)

    def step(self: KillingIO, *args: Any, **kwargs: Any) -> Any:
        self._step()
        return op(self, *args, **kwargs)

    return step


for _name in STEPS:
    setattr(KillingIO, _name, _counted(_name))
