"""How each entry of a State is shown (the CLI's timeline, the viewer): plainly, or as the
framework whose adapter wrote the State lays it out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import shown_adk as _shown_adk
from . import shown_alpine as _shown_alpine
from . import shown_langgraph as _shown_langgraph
from . import shown_openai as _shown_openai
from .shown import Shown, framework_of


def reader(snapshot: object) -> Callable[[dict[str, Any]], Shown]:
    """How to show each entry of the State whose snapshot is ``snapshot``."""
    summarise: dict[str, Callable[[dict[str, Any]], Shown]] = {
        "langgraph": _shown_langgraph.shown,
        "openai-agents": _shown_openai.shown,
        "alpineagents": _shown_alpine.shown,
        "adk": _shown_adk.shown,
    }
    framework = framework_of(snapshot)
    if framework is None:
        return plain
    show = summarise[framework]

    def safely(entry: dict[str, Any]) -> Shown:
        try:
            return show(entry)
        except Exception:  # an entry of an unexpected shape: shown as it is stored
            return Shown(entry)

    return safely


def plain(entry: dict[str, Any]) -> Shown:
    """An entry of statekeep's own history: described by the renderers, except a compaction,
    which says in words what the model sees in place of the entries it replaced."""
    if entry.get("kind") == "compaction":
        through, summary = entry.get("through"), entry.get("summary")
        line = f"for the model, replaces the messages of seq 0 to {through} with: {summary}"
        return Shown(entry, line)
    return Shown(entry)
