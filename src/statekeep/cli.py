"""The ``statekeep`` command: inspect saved runs, and the demo."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from .ids import ID_RULE, validate_id
from .records import Record
from .store import Store
from .urls import open_store, redact_url

DEFAULT_STORE = ".statekeep"
_STORE_HELP = "the store: a folder (default ./.statekeep) or a URL such as sqlite:///runs.db"


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"statekeep: {message}", err=True)
    sys.exit(code)


def _open(url: str) -> Store:
    """Open an existing store; the commands that read never create one."""
    try:
        store = open_store(url)
    except (ValueError, ImportError) as exc:
        _fail(str(exc), 2)
    local = getattr(store, "path", None)  # FileStore and SQLiteStore: a folder or a file
    if isinstance(local, Path) and not local.exists():
        _fail(f"no store at {url!r} ({local} does not exist); pass --store or run 'statekeep demo' first")
    return store


def _state_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return validate_id(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a State id: an id is {ID_RULE}") from None


store_option = click.option(
    "--store", "store_url", default=DEFAULT_STORE, show_default=True, help=_STORE_HELP
)


@click.group()
@click.version_option(package_name="statekeep")
def main() -> None:
    """Keep AI agent runs outside the process, and look at them."""


@main.command("list")
@store_option
def list_states(store_url: str) -> None:
    """List saved States, most recently updated first."""
    with _open(store_url) as store:
        rows = store.list()
    if not rows:
        click.echo("no saved States")
        return
    click.echo(f"{'ID':<34} {'UPDATED (UTC)':<19} {'TURN':>4}  {'STATUS':<10} TASK")
    for row in rows:
        status = "finished" if row.finished else (row.stopped_by or "running")
        when = row.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{row.id:<34} {when:<19} {row.turn:>4}  {status:<10} {_short(row.task, 60)}")


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
def show(state_id: str, store_url: str) -> None:
    """Show one State's history as a timeline."""
    with _open(store_url) as store:
        record = store.read(state_id)
    if record is None:
        _fail(f"no State {state_id!r} in {redact_url(store_url)}")
    for line in timeline(state_id, record):
        click.echo(line)


@main.command()
@click.argument("state_id", callback=_state_id)
@store_option
def delete(state_id: str, store_url: str) -> None:
    """Delete one State, history and snapshot."""
    with _open(store_url) as store:
        if store.read(state_id) is None:
            _fail(f"no State {state_id!r} in {redact_url(store_url)}")
        store.delete(state_id)
    click.echo(f"deleted {state_id}")


@main.command()
@click.option(
    "--store", "store_url", default=DEFAULT_STORE, show_default=True, help="folder of the FileStore"
)
def demo(store_url: str) -> None:
    """Run an agent, kill it with SIGKILL mid-tool-call, then load it and finish the run."""
    from .demo import run

    sys.exit(run(store_url))


def timeline(state_id: str, record: Record) -> list[str]:
    """A readable history: one line per entry, long texts shortened."""
    snap = record.snapshot or {}
    lines = [f"State {state_id}: {_short(str(snap.get('task', '')), 100)}"]
    if snap:
        status = "finished" if snap.get("finished") else (snap.get("stopped_by") or "running")
        lines.append(
            f"created {_time(snap.get('created_at'))} · updated {_time(snap.get('updated_at'))} · "
            f"turn {snap.get('turn')} · {status}"
        )
    lines.append("")
    for entry in record.entries:
        kind = str(entry.get("kind", "?"))
        lines.append(
            f"{entry.get('seq', '?'):>5}  {_time(entry.get('at'), clock=True)}  {kind:<13} {_describe(entry)}"
        )
    return lines


def _describe(e: dict[str, Any]) -> str:
    kind = e.get("kind")
    if kind in ("task", "user"):
        return _short(e.get("text", ""))
    if kind == "run_start":
        agent = e.get("agent", {})
        tools = ", ".join(agent.get("tools", [])) or "none"
        return f"agent {agent.get('name')!r} · model {agent.get('model')} · tools: {tools}"
    if kind == "model_request":
        return f"asking {e.get('model')}"
    if kind == "model_reply":
        calls = [f"{c.get('name')}({_args(c.get('args'))}) [{c.get('id')}]" for c in e.get("tool_calls", [])]
        text = _short(e.get("text", ""), 60) if e.get("text") else ""
        return " → ".join(p for p in (f'"{text}"' if text else "", ", ".join(calls)) if p) or "(empty)"
    if kind == "tool_result":
        return f"{e.get('name')} [{e.get('call_id')}] {e.get('outcome')}: {_short(str(e.get('output')), 70)}"
    if kind == "model_error":
        return _short(e.get("message", ""))
    if kind == "stop":
        answer = e.get("answer")
        return f"by {e.get('by')}" + (f": {_short(str(answer), 70)}" if answer is not None else "")
    if kind == "data":
        return (
            f"{e.get('key')} deleted"
            if e.get("deleted")
            else f"{e.get('key')} = {_short(repr(e.get('value')), 60)}"
        )
    if kind == "error":
        return _short(e.get("message", ""))
    return _short(str({k: v for k, v in e.items() if k not in ("seq", "kind", "at")}))


def _args(args: Any) -> str:
    if not isinstance(args, dict):
        return _short(repr(args), 40)
    return _short(", ".join(f"{k}={v!r}" for k, v in args.items()), 50)


def _short(text: str, width: int = 80) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _time(value: Any, *, clock: bool = False) -> str:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return "?"
    return when.strftime("%H:%M:%S.%f")[:-3] if clock else when.strftime("%Y-%m-%d %H:%M:%S")
