"""Public names report their public path: ``statekeep.State``, not ``statekeep._run.state.State``.

Reprs, tracebacks, the API reference and pickles then name the path users import from, and
the private tree can move without breaking any of them (as anyio's ``fix_package_names``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def publish(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` of every class and function in ``names`` to ``module``."""
    for name in names:
        obj = namespace.get(name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__")):
            obj.__module__ = module
