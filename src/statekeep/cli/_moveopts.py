"""The options ``export``, ``import`` and ``copy`` share: the ids and filters that choose
the States to move, ``--rename-prefix`` and ``--memory-scope``, checked as they are parsed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._core.ids import validate_id
from .._core.labels import validate_namespace
from ._common import labels_arg, state_id_arg, text_arg


def ids_arg(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(state_id_arg(ctx, param, value) for value in values)


def prefix_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            validate_id(value)
        except ValueError:
            raise click.BadParameter(f"{value!r} cannot start a State id (A-Z a-z 0-9 _ - only)") from None
    return value


def filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The listing filters that choose the States to move (they combine with AND)."""
    for option in reversed(
        [
            click.option(
                "--status", callback=text_arg, help="finished, running, or why a run stopped (limit, ...)"
            ),
            click.option("--agent", callback=text_arg, help="only States whose last run was by this agent"),
            click.option(
                "--label",
                "labels",
                multiple=True,
                callback=labels_arg,
                help="KEY=VALUE; repeat: all must match",
            ),
            click.option("--prefix", "id_prefix", help="only States whose id starts with this"),
        ]
    ):
        command = option(command)
    return command


def listing_filters(
    status: str | None, agent: str | None, labels: dict[str, str], id_prefix: str | None
) -> dict[str, Any]:
    given = {"status": status, "agent": agent, "labels": labels or None, "id_prefix": id_prefix}
    return {key: value for key, value in given.items() if value is not None}


def scope_arg(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        try:
            validate_namespace(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return values


def memory_scope_option(verb: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--memory-scope SCOPE`` (repeatable): the agent memory scopes to ``verb`` too."""
    return click.option(
        "--memory-scope",
        "scopes",
        multiple=True,
        metavar="SCOPE",
        callback=scope_arg,
        help=f"an agent memory scope to {verb} too; repeat for several (default: 'default' when "
        "the whole store is chosen, none with ids or filters)",
    )


def memory_scopes(given: tuple[str, ...], whole: bool) -> tuple[str, ...]:
    """The scopes given, else the default scope when the whole store is moved."""
    return given or (("default",) if whole else ())
