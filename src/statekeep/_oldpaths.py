"""The module paths of statekeep 0.1 that moved (``statekeep._errors``, ``statekeep._state``,
``statekeep.web.app``, ...), importable for one more release as aliases of where their code lives now.

Pickles name a class by its module: one made by 0.1 names ``statekeep._errors.StateConflictError``
and must still load. Importing an old path gives the new module itself (one module object, so
``isinstance`` and ``except`` agree) and a :class:`DeprecationWarning` naming the new place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: Old path (below ``statekeep.``) -> new path.
MOVED = {
    "_errors": "_core.errors", "_ids": "_core.ids", "_codec": "_core.codec", "_frozen": "_core.frozen",
    "_records": "_core.records", "_labels": "_core.labels", "_query": "_core.query", "_ranges": "_core.ranges",
    "_writes": "_core.writes", "_jsontext": "_core.jsontext", "_redactor": "_core.redactor",
    "_redaction": "_core.passwords",
    "_history": "_run.history", "_state": "_run.state", "_resume": "_run.resume", "_lineage": "_run.lineage",
    "_agentcheck": "_run.resumecheck", "adapters._shown": "_run.shown", "adapters._shown_alpine": "_run.shown_alpine",
    "adapters._shown_langgraph": "_run.shown_langgraph", "adapters._shown_openai": "_run.shown_openai",
    "_bridge": "_runtime.bridge", "_eager": "_runtime.eager", "_elsewhere": "_runtime.elsewhere",
    "_handoff": "_runtime.handoff", "_statelocks": "_runtime.statelocks", "_workers": "_runtime.workers",
    "_batching": "_runtime.batching", "_slot": "_runtime.slot", "_inthread": "_runtime.inthread",
    "_callerloop": "_runtime.callerloop",
    "_leasing": "_leases.api", "_agentlease": "_leases.keepalive",
    "_protection": "_protect.protection", "_sealing": "_protect.sealing", "_rekey": "_protect.rekey",
    "_backend": "_store.backend", "_shims": "_store.shims", "_kv": "_store.agentmemory",
    "_expect": "_store.expect", "_incarnations": "_store.incarnations", "_changes": "_store.changes",
    "_copycheck": "_transfer.copycheck", "_copyreport": "_transfer.copyreport",
    "_exporting": "_transfer.exporting", "_exportfile": "_transfer.exportfile", "_renaming": "_transfer.renaming",
    "_tools": "_agent.tools",
    "_urls": "stores._urls", "_urlquery": "stores._urlquery",
    "_logframe": "stores._file.logformat", "_logtail": "stores._file.logtail",
    "_render": "cli._render", "_demo": "cli._demo", "_clikeys": "cli._keys",
    "web.app": "web._app", "web.children": "web._children", "web.feed": "web._feed", "web.fmt": "web._fmt",
    "web.guard": "web._guard", "web.live": "web._live", "web.pages": "web._pages", "web.render": "web._render",
    "web.server": "web._server", "web.statuses": "web._statuses",
}  # fmt: skip


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("statekeep.") or fullname.removeprefix("statekeep.") not in MOVED:
            return None
        # ``statekeep._store``, ``._leases`` and ``._agent`` are packages now: each one's
        # ``__getattr__`` hands out the old module's classes instead (``._transfer`` had none).
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = "statekeep." + MOVED[spec.name.removeprefix("statekeep.")]
        warnings.warn(
            f"{spec.name} moved to {new} (a private module: import public names from statekeep, "
            "statekeep.stores, statekeep.web or statekeep.testing); "
            "the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias's next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported at its new path. Give it back its own spec,
        so its relative imports and ``importlib.reload`` still see where it lives."""
        own = module.__spec__.loader_state if module.__spec__ is not None else None
        if own is not None:
            module.__spec__ = own


def install() -> None:
    """Put the alias finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
