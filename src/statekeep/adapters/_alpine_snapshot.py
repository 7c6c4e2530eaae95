"""How an alpineagents State's info becomes a statekeep snapshot, and back (pure, no I/O).

alpineagents hands its store an *info* dict per write (what its listing shows: first message,
times, turn, why it stopped, parent, format version ``"v"``). statekeep listings read their
own keys from the snapshot (``task``, ``created_at``, ``updated_at``, ``turn``,
``stopped_by``, ``finished``, ``parent``, ``labels``), so the snapshot carries both: those
keys, filled from the info, and the info itself, unchanged, under ``"alpineagents"`` with
the original State id. ``task`` is the alpineagents id, which is what ``statekeep list``
shows. Nothing here is a top-level ``"v"`` or ``"seq"``: those are statekeep's own State
format, which this history is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from ._ids import state_id_for

#: The snapshot key holding ``{"id": alpineagents id, "info": the info dict}``.
KEY = "alpineagents"
#: The label every State the adapter writes carries, so its listing skips other States.
LABELS = {"framework": "alpineagents"}


def snapshot_for(alpine_id: str, info: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The statekeep snapshot for one alpineagents write. Times the info lacks (a State
    saved with no history has none) are ``now``, so statekeep can list it."""
    stopped = info.get("stopped")
    kind = stopped.get("kind") if isinstance(stopped, Mapping) else None
    turn = info.get("turn")
    parent = info.get("parent_id")
    return {
        "task": alpine_id,
        "created_at": _time(info.get("created_at"), now),
        "updated_at": _time(info.get("updated_at"), now),
        "turn": turn if type(turn) is int and turn >= 0 else 0,
        "stopped_by": kind if isinstance(kind, str) else None,
        "finished": info.get("finished") is True,
        "parent": state_id_for(parent) if isinstance(parent, str) and parent else None,
        "labels": dict(LABELS),
        KEY: {"id": alpine_id, "info": dict(info)},
    }


def info_of(alpine_id: str, snapshot: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The info dict the adapter stored for ``alpine_id``, or None if the snapshot is not
    one it wrote for that id (another program's State, or no snapshot)."""
    held = snapshot.get(KEY) if snapshot is not None else None
    if not isinstance(held, dict) or held.get("id") != alpine_id or not isinstance(held.get("info"), dict):
        return None
    info: dict[str, Any] = held["info"]
    return info


def alpine_id_of(snapshot: Mapping[str, Any] | None) -> str | None:
    """The alpineagents id a snapshot the adapter wrote carries, else None."""
    held = snapshot.get(KEY) if snapshot is not None else None
    found = held.get("id") if isinstance(held, dict) else None
    return found if isinstance(found, str) else None


def _time(raw: object, now: datetime) -> str:
    """``raw`` if statekeep listings can read it (ISO 8601 with an offset), else ``now``."""
    if isinstance(raw, str):
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            return raw
    return now.astimezone(UTC).isoformat()


# -- lone surrogates -----------------------------------------------------------------


def check_text(alpine_id: str, entries: Sequence[Mapping[str, Any]], info: Mapping[str, Any]) -> None:
    """TypeError naming the first string with a lone surrogate in ``entries`` or ``info``.

    alpineagents accepts such strings (its FileStore writes them as JSON escapes);
    statekeep stores only valid UTF-8 text. Checked before anything is written, in C
    (orjson refuses them) with a walk only to name the place once one is there.
    """
    try:
        orjson.dumps([list(entries), info])
    except (TypeError, orjson.JSONEncodeError):
        pass  # a surrogate, or something statekeep's own checks will name
    else:
        return
    for entry in entries:
        where = _surrogate_in(entry, "")
        if where is not None:
            _refuse(alpine_id, f"history entry seq {entry.get('seq')!r}, at {where}")
    where = _surrogate_in(info, "")
    if where is not None:
        _refuse(alpine_id, f"its info, at {where}")


def _refuse(alpine_id: str, place: str) -> None:
    raise TypeError(
        f"cannot save alpineagents State {alpine_id!r} in statekeep: {place}, holds a lone surrogate, "
        "which is not valid UTF-8 (statekeep stores only valid UTF-8 text; alpineagents' own FileStore "
        "writes it as a JSON escape). Nothing was saved. Fix: replace it before it reaches the State, "
        "e.g. decode bytes with errors='replace' instead of 'surrogateescape', or "
        "text.encode('utf-8', 'replace').decode('utf-8')"
    )


def _surrogate_in(value: object, path: str) -> str | None:
    """Where in ``value`` the first string with a lone surrogate is (a path such as
    ``['content'][0]['text'] (index 3)``), or None."""
    if isinstance(value, str):
        return None if value.isascii() else _bad_char(value, path or "the text")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and not key.isascii() and _bad_char(key, "") is not None:
                return f"{path} the key {key.encode('utf-8', 'backslashreplace').decode()!r}".strip()
            found = _surrogate_in(item, f"{path}[{key!r}]")
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _surrogate_in(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _bad_char(text: str, path: str) -> str | None:
    for i, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return f"{path} (character {i}, U+{ord(char):04X})"
    return None
