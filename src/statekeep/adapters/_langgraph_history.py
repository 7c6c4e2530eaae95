"""How a LangGraph thread is kept as one statekeep State (pure: no I/O).

The history holds five kinds of entries, each with ``kind`` and ``seq``, and all but the
last with ``at`` (ISO 8601, UTC):

- ``lg.checkpoint``: ``ns``, ``id``, ``parent`` (id or None), ``run`` (the metadata's
  ``run_id`` or None), ``checkpoint`` (the checkpoint without its channel values),
  ``metadata``, and its channel values: in format 1 ``values`` (channel -> value), every
  value of the checkpoint; in format 2 each value is stored once per version, and a list
  that grows as what it appends (``values``, ``refs``, ``deltas`` and ``from``: see
  :mod:`._langgraph_values`);
- ``lg.values`` (format 2, written by a rewrite): the values of a checkpoint dropped
  since, that a kept one refers to;
- ``lg.writes``: ``ns``, ``checkpoint`` (its id), ``task``, ``path`` and ``writes``, a list
  of ``[idx, channel, value]``;
- ``lg.drop``: ``drop``, a list of ``[ns, id]``: those checkpoints and their writes are gone;
- ``lg.prune``: ``keep``, a list of ``[ns, id]``: every other checkpoint held so far is gone;
- ``lg.tip``: ``tip``, a random token. Every write ends with one, and the snapshot keeps a
  copy; the next write sends it again first, which proves that write extends the history
  its snapshot was built from: the store skips it where it still is, and refuses the write
  (a conflict, so the writer reads again) when another history took its place, as when the
  thread was deleted and written again to the same length. A tip, not the last entry
  itself, since that may be a big checkpoint.

Values are the serializer's typed bytes, kept losslessly as ``[type, base64]``.
The snapshot holds the listing keys and, under ``langgraph``, ``format``, ``heads``: per
namespace, ``[seq, id]`` of the newest checkpoint, so the newest checkpoint, its writes
and the values it refers to are read from that seq on, not from the start. ``seq`` is that
of its first entry, of its first writes or of the first entry its values need, whichever
comes first: LangGraph may store a step's writes before the checkpoint
they belong to (its writes and checkpoints are saved in the background, concurrently), so
``early`` keeps, per namespace, where the writes of a checkpoint newer than the newest
one start. Format 2 adds ``gen`` (a token that changes when the history is rewritten),
``known`` and ``bytes`` (see :mod:`._langgraph_values`). A statekeep that knows only
format 1 refuses a format 2 thread (its reads would start too late to find the values).

``life`` (:data:`LIFE`) is the thread's life token: a random id made by the write that
creates the thread's State, carried by every later write and by both moves of a rewrite
(so, unlike the State's incarnation, it survives ``prune`` and ``delete_for_runs``), new
again once the thread is deleted and written again. It is the incarnation part of the
thread's tool call keys (:mod:`._langgraph_keys`). A thread created by a statekeep that
wrote none has none, and never gets one (its keys must not change under a call in doubt).
"""

from __future__ import annotations

import base64
import bisect
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.errors import CorruptStateError
from ._langgraph_values import channels, needs, remap, value_of

#: The snapshot key that marks a State as a LangGraph thread, and its format.
MARK = "langgraph"
FORMAT = 2
#: The snapshot key (under :data:`MARK`) of the thread's life token (see the module).
LIFE = "life"
#: The label every thread's State carries, so that listings can find the threads.
LABELS = {"framework": "langgraph"}

Blob = tuple[str, bytes]
#: (task_id, idx) -> (task_id, channel, value as stored ``[type, base64]``, task_path), as
#: InMemorySaver keeps them.
Writes = dict[tuple[str, int], tuple[str, str, Any, str]]
Heads = dict[str, list[Any]]  # ns -> [seq, checkpoint id]
Early = dict[str, dict[str, int]]  # ns -> id of a checkpoint not stored yet -> seq of its first writes


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def pack(blob: Blob) -> list[str]:
    kind, data = blob
    return [kind, base64.b64encode(data).decode("ascii")]


def unpack(value: Any) -> Blob:
    kind, data = value
    return kind, base64.b64decode(data)


def checkpoint_entry(
    ns: str, checkpoint_id: str, parent: str | None, run: str | None, checkpoint: Blob, metadata: Blob,
    parts: Mapping[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """An ``lg.checkpoint`` entry; ``parts``: its values as :func:`._langgraph_values.encode`
    makes them."""
    return {
        "kind": "lg.checkpoint",
        "at": now_iso(),
        "ns": ns,
        "id": checkpoint_id,
        "parent": parent,
        "run": run,
        "checkpoint": pack(checkpoint),
        "metadata": pack(metadata),
        **parts,
    }


def writes_entry(
    ns: str, checkpoint_id: str, task_id: str, task_path: str, writes: Iterable[tuple[int, str, Blob]]
) -> dict[str, Any]:
    return {
        "kind": "lg.writes",
        "at": now_iso(),
        "ns": ns,
        "checkpoint": checkpoint_id,
        "task": task_id,
        "path": task_path,
        "writes": [[idx, channel, pack(blob)] for idx, channel, blob in writes],
    }


def tip_entry(seq: int) -> dict[str, Any]:
    return {"kind": "lg.tip", "seq": seq, "tip": uuid.uuid4().hex}


def proof(snapshot: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What a write after ``snapshot`` sends first: its tip, if it is the last entry (a
    thread written without tips has none, and its writes prove nothing)."""
    if snapshot is None:
        return []
    tip = snapshot[MARK].get("tip")
    return [dict(tip)] if isinstance(tip, Mapping) and tip.get("seq") == snapshot["seq"] else []


def write_indexes(writes: Sequence[tuple[str, Any]]) -> list[int]:
    """LangGraph's index of each write: its position, or the special channel's negative index."""
    return [WRITES_IDX_MAP.get(channel, idx) for idx, (channel, _) in enumerate(writes)]


@dataclass
class Stored:
    """One checkpoint as the history holds it."""

    ns: str
    id: str
    seq: int  # the seq of its first entry
    entry: dict[str, Any]  # its last lg.checkpoint entry


@dataclass
class Thread:
    """A thread's checkpoints and pending writes, folded from (part of) its history."""

    checkpoints: dict[str, dict[str, Stored]] = field(default_factory=dict)  # ns -> id -> Stored
    writes: dict[tuple[str, str], Writes] = field(default_factory=dict)  # (ns, id) -> Writes
    writes_from: dict[tuple[str, str], int] = field(default_factory=dict)  # (ns, id) -> first writes' seq
    held: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> entry holding values

    @classmethod
    def fold(cls, entries: Iterable[Mapping[str, Any]], only: tuple[str, str] | None = None) -> Thread:
        """The thread ``entries`` hold; with ``only`` (``(ns, id)``), that checkpoint and its
        writes alone, beside the entries holding the values it may refer to (what reading
        one checkpoint needs: the other checkpoints and their writes are not folded)."""
        thread = cls()
        for entry in entries:
            if only is not None:
                kind = entry.get("kind")
                if kind == "lg.tip":
                    continue
                if kind == "lg.writes" and (entry.get("ns"), entry.get("checkpoint")) != only:
                    continue
                seq = entry.get("seq")
                if (
                    kind == "lg.checkpoint"
                    and (entry.get("ns"), entry.get("id")) != only
                    and type(seq) is int
                ):
                    thread.held[seq] = entry if isinstance(entry, dict) else dict(entry)
                    continue
            thread.apply(entry)
        return thread

    def apply(self, entry: Mapping[str, Any]) -> None:
        kind = entry.get("kind")
        try:
            if kind == "lg.checkpoint":
                ns, cid = entry["ns"], entry["id"]
                held = self.checkpoints.setdefault(ns, {})
                first = held[cid].seq if cid in held else entry["seq"]
                held[cid] = Stored(ns, cid, first, dict(entry))
                self.held[entry["seq"]] = held[cid].entry
            elif kind == "lg.values":
                self.held[entry["seq"]] = dict(entry)
            elif kind == "lg.writes":
                self._put_writes(entry)
            elif kind == "lg.drop":
                for ns, cid in entry["drop"]:
                    self.checkpoints.get(ns, {}).pop(cid, None)
                    self.writes.pop((ns, cid), None)
                    self.writes_from.pop((ns, cid), None)
            elif kind == "lg.prune":
                keep = {(ns, cid) for ns, cid in entry["keep"]}
                for ns, held in self.checkpoints.items():
                    for cid in [cid for cid in held if (ns, cid) not in keep]:
                        del held[cid]
                for key in [key for key in self.writes if key not in keep]:
                    del self.writes[key]
                    self.writes_from.pop(key, None)
            # Other kinds are not the adapter's: a LangGraph thread never holds them.
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStateError(f"seq {entry.get('seq')}: a damaged {kind} entry ({exc!r})") from None

    def _put_writes(self, entry: Mapping[str, Any]) -> None:
        # InMemorySaver's upsert: a regular write (idx >= 0) never replaces one already held
        # for its (task_id, idx); a special channel's (negative idx) always does.
        task, path = entry["task"], entry["path"]
        key = (entry["ns"], entry["checkpoint"])
        self.writes_from.setdefault(key, entry["seq"])
        held = self.writes.setdefault(key, {})
        for idx, channel, value in entry["writes"]:
            key = (task, idx)
            if idx >= 0 and key in held:
                continue
            held[key] = (task, channel, value, path)  # unpacked when asked for

    def values(self, serde: SerializerProtocol, stored: Stored) -> dict[str, Any]:
        """The checkpoint's channel values, rebuilt from the entries they refer to."""
        entry = stored.entry
        return {channel: self.value(serde, entry, channel) for channel in channels(entry)}

    def value(self, serde: SerializerProtocol, entry: Mapping[str, Any], channel: str) -> Any:
        try:
            return value_of(serde, self.held, entry, channel)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStateError(
                f"seq {entry.get('seq')}: a damaged value of {channel!r} ({exc!r})"
            ) from None

    def get(self, ns: str, checkpoint_id: str) -> Stored | None:
        return self.checkpoints.get(ns, {}).get(checkpoint_id)

    def pending(self, ns: str, checkpoint_id: str) -> list[tuple[str, str, Blob]]:
        """The checkpoint's pending writes in LangGraph's order (``writes_sort_key``)."""
        held = self.writes.get((ns, checkpoint_id), {})
        order = sorted(held, key=lambda key: writes_sort_key(held[key][3], *key))
        return [(held[key][0], held[key][1], unpack(held[key][2])) for key in order]

    def heads(self) -> Heads:
        """Per namespace, ``[seq, id]`` of the newest checkpoint (the greatest id, as
        LangGraph's ids sort by time): the seq of its first entry or first writes."""
        out: Heads = {}
        for ns, held in self.checkpoints.items():
            if held:
                newest = max(held)
                stored = held[newest]
                first = min(stored.seq, stored.entry.get("from", stored.seq))
                out[ns] = [min(first, self.writes_from.get((ns, newest), first)), newest]
        return out

    def early(self) -> Early:
        """Where the writes of each checkpoint not stored yet, and newer than the newest, start."""
        heads = self.heads()
        out: Early = {}
        for (ns, cid), seq in self.writes_from.items():
            if cid not in self.checkpoints.get(ns, {}) and (ns not in heads or cid > heads[ns][1]):
                out.setdefault(ns, {})[cid] = seq
        return out

    def newest_first(self, ns: str) -> list[Stored]:
        return [self.checkpoints[ns][cid] for cid in sorted(self.checkpoints.get(ns, {}), reverse=True)]

    def materialized(self) -> list[dict[str, Any]]:
        """Entries that rebuild exactly the live checkpoints and writes (a copy without what
        was dropped or pruned), each with the ``seq`` it had here (None for writes):
        :func:`renumbered` gives them their place in another history. The values a live
        checkpoint refers to are kept too: in ``lg.values`` entries where their checkpoint
        is gone."""
        live = {id(stored.entry) for held in self.checkpoints.values() for stored in held.values()}
        wanted: set[int] = set()
        todo = [stored.entry["seq"] for held in self.checkpoints.values() for stored in held.values()]
        while todo:
            seq = todo.pop()
            if seq in wanted:
                continue
            wanted.add(seq)
            entry = self.held.get(seq)
            if entry is None:
                raise CorruptStateError(f"a value refers to seq {seq}, which the history does not hold")
            todo += needs(entry)
        out: list[tuple[float, dict[str, Any]]] = []
        for seq in sorted(wanted):
            entry = self.held[seq]
            if id(entry) in live:
                out.append((seq, dict(entry)))
            else:
                kept: dict[str, Any] = {
                    key: entry[key] for key in ("values", "refs", "deltas") if key in entry
                }
                out.append(
                    (seq, {"kind": "lg.values", "at": entry.get("at") or now_iso(), "seq": seq, **kept})
                )
        for (ns, cid), held_writes in self.writes.items():
            groups: dict[tuple[str, str], list[tuple[int, str, Blob]]] = {}
            for (task, idx), (_, channel, packed, path) in held_writes.items():
                groups.setdefault((task, path), []).append((idx, channel, unpack(packed)))
            start = self.writes_from.get((ns, cid), 0)
            for (task, path), writes in groups.items():
                out.append((start + 0.5, dict(writes_entry(ns, cid, task, path, writes), seq=None)))
        out.sort(key=lambda item: item[0])
        return [body for _, body in out]


def renumbered(bodies: Sequence[Mapping[str, Any]], first: int) -> list[dict[str, Any]]:
    """``bodies`` from :meth:`Thread.materialized`, without seqs, their references moved to
    where they land when written from seq ``first`` on."""
    new_seq: dict[int, int] = {}
    for at, body in enumerate(bodies, first):
        if body.get("seq") is not None:
            new_seq[body["seq"]] = at
    olds = sorted(new_seq)

    def first_kept(seq: int) -> int:
        index = bisect.bisect_left(olds, seq)
        return new_seq[olds[index]] if index < len(olds) else first

    out: list[dict[str, Any]] = []
    for body in bodies:
        moved = remap(body, new_seq, first_kept)
        moved.pop("seq", None)
        out.append(moved)
    return out


def advance(
    heads: Heads, early: Early, bodies: Sequence[Mapping[str, Any]], first_seq: int
) -> tuple[Heads, Early]:
    """``heads`` and ``early`` after appending ``bodies`` from ``first_seq`` (what
    :meth:`Thread.heads` and :meth:`Thread.early` give, without reading the history)."""
    heads = {ns: list(head) for ns, head in heads.items()}
    early = {ns: dict(starts) for ns, starts in early.items()}
    for seq, body in enumerate(bodies, first_seq):
        if body["kind"] not in ("lg.writes", "lg.checkpoint"):
            continue
        ns = body["ns"]
        head = heads.get(ns)
        if body["kind"] == "lg.writes":
            if head is None or body["checkpoint"] > head[1]:
                early.setdefault(ns, {}).setdefault(body["checkpoint"], seq)
        elif body["kind"] == "lg.checkpoint" and (head is None or body["id"] > head[1]):
            cid = body["id"]
            starts = early.pop(ns, {})
            heads[ns] = [min(seq, starts.get(cid, seq), body.get("from", seq)), cid]
            if later := {other: at for other, at in starts.items() if other > cid}:
                early[ns] = later
    return heads, early


def thread_heads(snapshot: Mapping[str, Any]) -> Heads:
    return dict(snapshot[MARK]["heads"])


def thread_early(snapshot: Mapping[str, Any]) -> Early:
    return dict(snapshot[MARK].get("early") or {})


def is_thread(snapshot: Mapping[str, Any] | None) -> bool:
    return isinstance(snapshot, Mapping) and isinstance(snapshot.get(MARK), Mapping)


def snapshot_for(
    thread_id: str,
    old: Mapping[str, Any] | None,
    tip: dict[str, Any],
    heads: Heads,
    early: Early,
    added: int,
    more: Mapping[str, Any],
) -> dict[str, Any]:
    """The snapshot after a write that ends with ``tip``: the listing keys (``task`` is the
    thread id, ``turn`` counts the checkpoints written), the heads and the tip. The life
    token is ``old``'s (none if it has none), or, for a new thread, ``more``'s."""
    now = now_iso()
    labels = dict(old.get("labels") or {}) if old else {}
    labels.update(LABELS)
    mark: dict[str, Any] = {"format": FORMAT, "heads": heads, "early": early, "tip": tip, **more}
    mark.pop(LIFE, None)
    life = old[MARK].get(LIFE) if old else more.get(LIFE)
    if life is not None:
        mark[LIFE] = life
    return {
        "task": thread_id,
        "created_at": old["created_at"] if old else now,
        "updated_at": now,
        "turn": (old["turn"] if old else 0) + added,
        "stopped_by": None,
        "finished": False,
        "seq": tip["seq"],
        "labels": labels,
        MARK: mark,
    }


def not_a_thread(state_id: str, thread_id: str) -> ValueError:
    return ValueError(
        f"State {state_id!r} exists and is not a LangGraph thread, so thread {thread_id!r} "
        "cannot be kept there; use another thread id or another store"
    )
