"""Every sync method and its async twin (``write``/``awrite``, ``list``/``alist``, ...) take
the same parameters: names, kinds, defaults and annotations, and return the same thing (the
async one as a coroutine, or an async iterator where the sync one gives an iterator).

The twins are found, not listed: on every public class (what ``statekeep``,
``statekeep.stores``, ``statekeep.testing``, ``statekeep.web`` and the adapters export),
each public method ``x`` (or dunder ``__x__``) beside an ``ax`` (``__ax__``); and each
public function ``x`` of those modules beside an ``ax``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

import statekeep
import statekeep.stores
import statekeep.testing
import statekeep.web

ADAPTERS = (
    "statekeep.adapters.langgraph",
    "statekeep.adapters.openai_agents",
    "statekeep.adapters.alpineagents",
    "statekeep.adapters.adk",
)

#: Twins whose signatures differ on purpose: ``(owner, sync name) -> why``. None today; a
#: pair listed here that no longer differs fails, so the list stays true.
DIFFER_ON_PURPOSE: dict[tuple[str, str], str] = {}


def _modules() -> list[ModuleType]:
    return [statekeep, statekeep.stores, statekeep.testing, statekeep.web] + [
        importlib.import_module(name) for name in ADAPTERS
    ]


def _twin_names(names: list[str]) -> Iterator[tuple[str, str]]:
    present = set(names)
    for name in names:
        if name.startswith("__") and name.endswith("__"):
            twin = "__a" + name[2:]
        elif not name.startswith("_"):
            twin = "a" + name
        else:
            continue
        if twin in present:
            yield name, twin


def _twins() -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
    """``"owner.x" -> (x, ax)`` for every twin of the public classes and functions."""
    found: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
    seen: set[int] = set()
    for module in _modules():
        exported = {name: getattr(module, name) for name in module.__all__}
        for sync, twin in _twin_names(sorted(exported)):
            if inspect.isfunction(exported[sync]):
                found[f"{module.__name__}.{sync}"] = (exported[sync], exported[twin])
        for cls in exported.values():
            if not inspect.isclass(cls) or id(cls) in seen:
                continue
            seen.add(id(cls))
            for sync, twin in _twin_names(dir(cls)):
                pair = (getattr(cls, sync), getattr(cls, twin))
                if callable(pair[0]) and callable(pair[1]):
                    found[f"{cls.__module__}.{cls.__qualname__}.{sync}"] = pair
    return found


TWINS = _twins()


def _plain(annotation: Any) -> str:
    """An annotation as text, its async spelling made sync (``AsyncIterator`` ->
    ``Iterator``, ``Awaitable[X]`` -> ``X``)."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    text = re.sub(r"\bAsync(Iterator|Iterable|Generator|ContextManager)\b", r"\1", text)
    return re.sub(r"^(?:Awaitable\[(.*)\]|Coroutine\[Any, Any, (.*)\])$", r"\1\2", text)


def _shape(function: Callable[..., Any]) -> list[tuple[str, str, str, str]]:
    signature = inspect.signature(function)
    params = [
        (p.name, p.kind.description, repr(p.default), _plain(p.annotation))
        for p in signature.parameters.values()
    ]
    return [*params, ("return", "", "", _plain(signature.return_annotation))]


def test_the_twins_are_found() -> None:
    """The search finds the pairs the library is known to have (so the test below checks them)."""
    names = set(TWINS)
    for expected in (
        "statekeep.rekey",
        "statekeep.Store.write",
        "statekeep.Store.iter_states",
        "statekeep.Store.__enter__",
        "statekeep.FileStore.acquire",
        "statekeep.Memory.get",
        "statekeep.Agent.run",
        "statekeep.adapters.langgraph.StatekeepSaver.get_tuple",
        "statekeep.adapters.langgraph.StatekeepSaver.list",
        "statekeep.adapters.alpineagents.StatekeepStore.write",
    ):
        assert expected in names, f"{expected} not found among {sorted(names)}"


@pytest.mark.parametrize("name", sorted(TWINS))
def test_twins_take_the_same_parameters(name: str) -> None:
    sync, twin = TWINS[name]
    assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin), (
        f"{name}: its twin {twin.__name__} is not async"
    )
    assert not (inspect.iscoroutinefunction(sync) or inspect.isasyncgenfunction(sync)), (
        f"{name} is async: the twin of {twin.__name__} should be sync"
    )
    owner, _, method = name.rpartition(".")
    why = DIFFER_ON_PURPOSE.get((owner, method))
    if why is not None:
        assert _shape(sync) != _shape(twin), (
            f"{name} and its twin agree now: remove it from DIFFER_ON_PURPOSE"
        )
        return
    assert _shape(twin) == _shape(sync), (
        f"{name}{inspect.signature(sync)} and {twin.__name__}{inspect.signature(twin)} differ"
    )
