"""ResumeWarning: a loaded State resumed by an agent other than the one that ran it last.

The warning points at the caller's line (the first frame outside statekeep and the event
loop: asyncio, or trio and anyio), however deep in statekeep or the event loop the check runs.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import os
import sys
import warnings
from types import FrameType
from typing import Any


class ResumeWarning(UserWarning):
    """A State is resumed by an agent that differs from the one that ran it last.

    ``changes`` maps each differing field (``name``, ``model``, ``system_sha256``,
    ``tools``) to ``(saved, current)``.
    """

    def __init__(self, message: str, changes: dict[str, tuple[Any, Any]]) -> None:
        super().__init__(message)
        self.changes = changes


def warn_if_agent_changed(state_id: str, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """Warn with :class:`ResumeWarning`, at the caller's line, if the agent changed."""
    if saved is None:
        return
    changes = {key: (saved.get(key), current[key]) for key in current if saved.get(key) != current[key]}
    if changes:
        listed = "; ".join(
            "system prompt changed" if key == "system_sha256" else f"{key}: {old!r} -> {new!r}"
            for key, (old, new) in changes.items()
        )
        _warn_at_caller(
            ResumeWarning(f"State {state_id!r} is resumed by a different agent ({listed})", changes)
        )


# Frames in these folders are statekeep's (the whole package: this module is one folder down)
# or the event loop's, never the caller's line.
_PACKAGE = os.path.dirname(os.path.dirname(__file__))
_NOT_THE_CALLER = (_PACKAGE + os.sep, os.path.dirname(asyncio.__file__) + os.sep)
#: Event loop packages whose frames are not the caller's either, once loaded (a trio run).
_LOOPS = ("trio", "anyio", "outcome")


def _not_the_caller() -> tuple[str, ...]:
    loops = (sys.modules.get(name) for name in _LOOPS)
    return _NOT_THE_CALLER + tuple(
        os.path.dirname(m.__file__) + os.sep for m in loops if m is not None and m.__file__ is not None
    )


def _warn_at_caller(warning: Warning) -> None:
    """Warn at the first frame outside statekeep and the event loop: the line that called
    statekeep, however deep in statekeep or the event loop the warning arises."""
    not_the_caller = _not_the_caller()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(not_the_caller):
        frame = frame.f_back
    if frame is None:  # no caller's frame on this thread's stack
        warnings.warn(warning, stacklevel=2)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(
        warning,
        type(warning),
        frame.f_code.co_filename,
        frame.f_lineno,
        module_globals.get("__name__", "<string>"),
        module_globals.setdefault("__warningregistry__", {}),
        module_globals if _gives_source(module_globals) else None,
    )


# The loaders of code that has no source file to show: ``python -c``, stdin, the REPL.
_NO_SOURCE = (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter)


def _gives_source(module_globals: dict[str, Any]) -> bool:
    """Whether warn_explicit may ask the module's loader for its source (to show the line
    from a zip, say): the builtin importer, which ``__main__`` has under ``python -c``, on
    stdin and in the REPL, raises ImportError instead of giving it."""
    return module_globals.get("__loader__") not in _NO_SOURCE
