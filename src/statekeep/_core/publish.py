"""Public names report their public path: ``statekeep.State``, not ``statekeep._run.state.State``.

Reprs, tracebacks, the API reference and pickles then name the path users import from, and
the private tree can move without breaking any of them (as anyio's ``fix_package_names``).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterable, Mapping


def publish(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` of every class and function in ``names`` to ``module``."""
    for name in names:
        obj = namespace.get(name)
        if isinstance(obj, type):
            _resolve_annotations(obj)
            obj.__module__ = module
        elif callable(obj) and hasattr(obj, "__code__"):
            obj.__module__ = module  # its annotations resolve in its __globals__, unchanged


def _resolve_annotations(cls: type) -> None:
    # ``typing.get_type_hints(cls)`` (pydantic, cattrs, dacite...) resolves a class's string
    # annotations in ``sys.modules[cls.__module__]``: evaluated here first, in the module that
    # wrote them. One it cannot evaluate (a name imported only for type checkers) stays a string.
    own = inspect.get_annotations(cls)
    home = sys.modules.get(cls.__module__)
    if not own or home is None:
        return
    for key, value in own.items():
        if isinstance(value, str):
            with contextlib.suppress(Exception):
                own[key] = eval(value, vars(home), dict(vars(cls)))
    cls.__annotations__ = own
