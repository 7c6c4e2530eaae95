"""How a LangGraph thread stores its channel values: each version once (pure: no I/O).

A checkpoint entry (format 2) holds, for each channel the checkpoint versions, one of:

- ``values[channel]``: the value whole, ``[type, base64]`` of the serializer's bytes;
- ``refs[channel]``: the seq of an earlier entry that holds (or rebuilds) that same value:
  the channel's version did not change, so it is not stored again;
- ``deltas[channel]``: ``[base, items]``: the value is a plain list that extends the value
  the entry at seq ``base`` rebuilds for that channel; ``items`` (``[type, base64]`` of the
  list of appended items) are what it adds. A ``messages`` channel grows this way.

and ``from``: the smallest seq whose entry the checkpoint needs (itself, or the start of
the chains it refers to), so the newest checkpoint is read from there on, not from the
beginning. ``lg.values`` entries (written when a thread is rewritten) hold ``values``,
``refs`` and ``deltas`` of checkpoints dropped since, that a kept one still refers to.

A reference is written only while reading from the value's start stays bounded: when more
than ``max(size, SLACK)`` bytes were stored in the thread since the full copy a chain (or a
reference) starts from, where ``size`` is that copy's, the value is stored whole again.
So the bytes stored grow linearly with the thread (each full copy is paid for by at least
as many bytes written before it), and reading the newest value reads at most about twice
its size. LangGraph's own ``DeltaChannel`` stores no value in most checkpoints (its writes
rebuild it) and a ``_DeltaSnapshot`` in some: those pass through as any other value.

The snapshot keeps, per namespace, the last checkpoint written (``id``) and for each of
its channels what the next write needs to refer back (``ch``): ``[version, seq, start,
size, at]``: the version, the seq of the entry that rebuilds it, the seq of its chain's
full copy, that copy's size, and the thread's byte count once that copy was written.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Collection, Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.errors import CorruptStateError

#: Stored bytes since a value's full copy below which a small value is referred to anyway.
SLACK = 64 * 1024
#: What one entry costs beside its values (ids, times, keys), in the thread's byte count.
OVERHEAD = 200

#: ns -> {"id": the checkpoint described, "ch": channel -> [version, seq, start, size, at]}
Known = dict[str, dict[str, Any]]
#: A list stored, as its items' serialized bytes: ``(how many, digest of them all)``.
Items = tuple[int, bytes]
#: A list stored: what :meth:`Lists.put` takes.
Remembered = tuple[tuple[str, str, str], str, Any, int, Items]


def pack_bytes(kind: str, data: bytes) -> list[str]:
    return [kind, base64.b64encode(data).decode("ascii")]


def packed_size(packed: Any) -> int:
    return len(packed[1]) if isinstance(packed, list) and len(packed) == 2 else 0


def body_size(body: Mapping[str, Any]) -> int:
    """What an entry adds to the thread's byte count (about its stored size)."""
    size = OVERHEAD
    for key in ("values", "deltas"):
        for held in (body.get(key) or {}).values():
            size += packed_size(held[1] if key == "deltas" else held)
    for write in body.get("writes") or ():
        size += packed_size(write[2])
    size += packed_size(body.get("checkpoint")) + packed_size(body.get("metadata"))
    return size


class Lists:
    """The newest plain-list value this saver stored per (State, namespace, channel), as
    :data:`Items` (a digest of its items' serialized bytes, taken when it was stored: an
    item edited in place since, or an equal item of another type, does not match), to
    tell whether the next one extends it. Bounded; safe to share between threads."""

    SIZE = 256

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, str], tuple[str, Any, int, Items]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> tuple[str, Any, int, Items] | None:
        return self._held.get(key)

    def put(self, key: tuple[str, str, str], gen: str, version: Any, seq: int, items: Items) -> None:
        with self._lock:
            self._held.pop(key, None)
            if len(self._held) >= self.SIZE:
                del self._held[next(iter(self._held))]
            self._held[key] = (gen, version, seq, items)

    def forget(self, state_id: str) -> None:
        with self._lock:
            for key in [key for key in self._held if key[0] == state_id]:
                del self._held[key]


def encode(
    serde: SerializerProtocol,
    lists: Lists,
    sid: str,
    gen: str,
    ns: str,
    seq: int,
    checkpoint_id: str,
    parent: str | None,
    values: Mapping[str, Any],
    versions: Mapping[str, Any],
    known: Known,
    at: int,
    updated: Collection[str],
) -> tuple[dict[str, Any], Known, list[Remembered]]:
    """The ``values``/``refs``/``deltas``/``from`` of the entry at ``seq`` of checkpoint
    ``checkpoint_id`` (child of ``parent``) holding ``values`` at ``versions``, and
    ``known`` after it, and what to :meth:`Lists.put` once the entry is written; ``at`` is
    the thread's byte count before the entry.

    A channel is referred to unchanged only when it is not among ``updated`` (the
    ``new_versions`` of LangGraph's ``put``), ``parent`` is the checkpoint ``known``
    describes and the version is the same (LangGraph bumps a channel's version whenever
    a step writes it, so within one line of checkpoints an equal version is an equal
    value; across branches it may not be). A list is stored as what it appends only when
    it starts with the very list this saver stored last for the channel: its items
    serialize to the same bytes, one by one, as that list's did when it was stored."""
    mine = known.get(ns) or {}
    before: dict[str, list[Any]] = dict(mine.get("ch") or {})
    same_line = parent is not None and mine.get("id") == parent
    held: dict[str, list[Any]] = {}
    remember: list[Remembered] = []
    out: dict[str, dict[str, Any]] = {"values": {}, "refs": {}, "deltas": {}}
    starts = [seq]
    for channel, value in values.items():
        if channel not in versions:
            continue
        version = versions[channel]
        prior = before.get(channel)
        near = prior is not None and at - prior[4] <= max(prior[3], SLACK)
        if prior is not None and near and same_line and prior[0] == version and channel not in updated:
            out["refs"][channel] = prior[1]
            held[channel] = prior
            starts.append(prior[2])
            continue
        cached = lists.get((sid, ns, channel)) if type(value) is list else None
        usable = prior is not None and near and cached is not None and cached[:3] == (gen, prior[0], prior[1])
        stored = cached[3][0] if usable and cached is not None else -1
        prefix, digest = _digests(serde, value, stored) if type(value) is list else (None, b"")
        if prior is not None and cached is not None and usable and prefix == cached[3][1]:
            items = pack_bytes(*serde.dumps_typed(value[stored:]))
            out["deltas"][channel] = [prior[1], items]
            held[channel] = [version, seq, prior[2], prior[3], prior[4]]
            starts.append(prior[2])
        else:
            whole = pack_bytes(*serde.dumps_typed(value))
            out["values"][channel] = whole
            held[channel] = [version, seq, seq, len(whole[1]), at + len(whole[1])]
        if type(value) is list:
            remember.append(((sid, ns, channel), gen, version, seq, (len(value), digest)))
    parts: dict[str, Any] = {key: part for key, part in out.items() if part or key == "values"}
    parts["from"] = min(starts)
    return parts, {**known, ns: {"id": checkpoint_id, "ch": held}}, remember


def _digests(serde: SerializerProtocol, value: list[Any], at: int) -> tuple[bytes | None, bytes]:
    """The digest of the serialized bytes of ``value``'s first ``at`` items (None if it
    has fewer), and of all of them."""
    running = hashlib.sha256()
    prefix = None
    for index, item in enumerate(value):
        if index == at:
            prefix = running.digest()
        kind, data = serde.dumps_typed(item)
        running.update(b"%d:%s:%d:" % (len(kind), kind.encode(), len(data)))
        running.update(data)
    whole = running.digest()
    return (whole if at == len(value) else prefix), whole


def holds(entry: Mapping[str, Any], channel: str) -> bool:
    return any(channel in (entry.get(key) or {}) for key in ("values", "refs", "deltas"))


def channels(entry: Mapping[str, Any]) -> list[str]:
    """The channels an entry holds a value for, in the order they were stored."""
    out: dict[str, None] = {}
    for key in ("values", "refs", "deltas"):
        out.update(dict.fromkeys(entry.get(key) or {}))
    return list(out)


def value_of(
    serde: SerializerProtocol,
    entries: Mapping[int, Mapping[str, Any]],
    entry: Mapping[str, Any],
    channel: str,
) -> Any:
    """The value ``entry`` holds for ``channel``, following its references back through
    ``entries`` (seq -> entry)."""
    appended: list[Any] = []
    seen = 0
    while True:
        if channel in (entry.get("values") or {}):
            value = serde.loads_typed(_unpack(entry["values"][channel]))
            break
        if channel in (entry.get("deltas") or {}):
            base, items = entry["deltas"][channel]
            appended.append(items)
            target = base
        elif channel in (entry.get("refs") or {}):
            target = entry["refs"][channel]
        else:
            raise CorruptStateError(f"seq {entry.get('seq')}: holds no value for channel {channel!r}")
        found = entries.get(target)
        seen += 1
        if found is None or target >= entry.get("seq", target + 1) or seen > len(entries):
            raise CorruptStateError(
                f"seq {entry.get('seq')}: channel {channel!r} refers to seq {target}, which the "
                "history does not hold"
            )
        entry = found
    if appended:
        if type(value) is not list:
            raise CorruptStateError(
                f"seq {entry.get('seq')}: channel {channel!r} extends a value that is no list"
            )
        value = list(value)
        for items in reversed(appended):
            value.extend(serde.loads_typed(_unpack(items)))
    return value


def _unpack(value: Any) -> tuple[str, bytes]:
    kind, data = value
    return kind, base64.b64decode(data)


def remap(entry: Mapping[str, Any], new_seq: Mapping[int, int], first_kept: Any) -> dict[str, Any]:
    """``entry`` with its references (and ``from``) moved to the seqs ``new_seq`` gives the
    entries kept; ``first_kept(seq)`` is the new seq of the first kept entry at or after
    ``seq``."""
    out = dict(entry)
    if entry.get("refs"):
        out["refs"] = {channel: new_seq[seq] for channel, seq in entry["refs"].items()}
    if entry.get("deltas"):
        out["deltas"] = {
            channel: [new_seq[base], items] for channel, (base, items) in entry["deltas"].items()
        }
    if "from" in entry:
        out["from"] = first_kept(entry["from"])
    return out


def needs(entry: Mapping[str, Any]) -> list[int]:
    """The seqs ``entry``'s values refer to directly."""
    out = list((entry.get("refs") or {}).values())
    out += [base for base, _ in (entry.get("deltas") or {}).values()]
    return out
