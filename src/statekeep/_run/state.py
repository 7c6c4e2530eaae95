"""State: one agent run's history, with everything derived from it, ready to save or continue."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from .._core.codec import check, decode
from .._core.ids import new_incarnation, validate_id
from .._core.labels import aware_time, check_labels, check_period, iso
from .approvals import Approvals
from .bookkeeping import Saving
from .calls import KEY_ORIGINS, CallResumption
from .history import AGENT_KEYS, Replay, now
from .resumecheck import warn_if_agent_changed
from .runtrace import check_trace
from .steps import StepRecords


def agent_info(
    name: str, model: str, *, system: str | None = None, tools: Iterable[str] = ()
) -> dict[str, Any]:
    """The ``run_start`` description of an agent: name, model, system prompt hash, tool names."""
    return {
        "name": name,
        "model": model,
        "system_sha256": hashlib.sha256((system or "").encode()).hexdigest(),
        "tools": sorted(tools),
    }


class State(Saving, CallResumption, Approvals, StepRecords):
    """An agent run: an append-only history plus everything derived from it.

    Create one with ``State(task)``, append with the write-side methods (each adds one
    history entry, or raises ValueError if history cannot follow, TypeError for a value
    JSON cannot hold, and then adds nothing), save it with
    ``store.save(state)`` and get it back with ``store.load(state.id)``. Read-side
    properties are kept up to date entry by entry.
    """

    def __init__(
        self,
        task: str,
        *,
        id: str | None = None,
        parent: str | None = None,
        labels: Mapping[str, str] | None = None,
        call_id: str | None = None,
    ) -> None:
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        self._setup(uuid.uuid4().hex if id is None else validate_id(id))
        self._incarnation: str | None = new_incarnation()
        self.labels.update(check_labels(labels))
        lineage: dict[str, Any] = {}
        if parent is not None:
            lineage["parent"] = validate_id(parent)
        if call_id is not None:
            if parent is None:
                raise ValueError("call_id names the parent's tool call that spawned a child: give parent too")
            if not isinstance(call_id, str):
                raise TypeError(f"call_id must be a str, got {type(call_id).__name__}")
            lineage["call_id"] = call_id
        self._append("task", "State()", text=task, **lineage)

    def _setup(self, state_id: str) -> None:
        self.id = state_id
        self._replay = Replay()
        #: Labels saved with the next save: a ``dict[str, str]`` you may change freely; a
        #: bad label is a ValueError naming it at save time, and nothing is written.
        self.labels: dict[str, str] = {}
        self._expires_at: datetime | None = None
        self._forked_from: dict[str, Any] | None = None
        self._incarnation = None  # see ``incarnation``: __init__, fork_state or a load sets it
        self._key_origins: dict[str, tuple[str, str | None]] = {}  # see CallResumption._origin
        self._unbound()

    @classmethod
    def _from_history(cls, state_id: str, entries: Iterable[dict[str, Any]]) -> State:
        """Rebuild a State by replaying ``entries``; ValueError if they cannot be replayed."""
        self = cls.__new__(cls)
        self._setup(state_id)
        for entry in entries:
            self._replay.apply(entry)
        if not self.history:
            raise ValueError("the history is empty: it must start with a task entry")
        return self

    # -- read side ----------------------------------------------------------------------

    @property
    def history(self) -> list[dict[str, Any]]:
        """The entries, in seq order (do not modify them): from the task at seq 0, or, for a
        State trimmed in its store (``store.trim``), from its ``base`` entry."""
        return self._replay.entries

    @property
    def task(self) -> str:
        return str(self._replay.task_entry["text"])

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat so far as the model sees it, provider-neutral: ``user``, ``assistant``
        (with ``tool_calls``) and ``tool`` (with ``tool_call_id``) messages.

        After :meth:`compact`, it starts with a ``user`` message holding the summary (its
        text starts with "A summary of the earlier conversation"), followed by the messages of the entries
        after the compaction's ``through``. :attr:`history` keeps every entry."""
        return self._replay.messages

    @property
    def compacted_through(self) -> int | None:
        """The ``through`` of the latest :meth:`compact`, or None if the State has none."""
        return self._replay.through

    @property
    def turn(self) -> int:
        """How many model replies the State holds."""
        return self._replay.turn

    @property
    def pending_calls(self) -> list[dict[str, Any]]:
        """Tool calls of the last reply that have no result yet."""
        return list(self._replay.pending_calls.values())

    @property
    def waiting_on_model(self) -> bool:
        """A model request was sent and has no reply (or error) yet."""
        return self._replay.pending_request is not None

    @property
    def finished(self) -> bool:
        return self._replay.finished

    @property
    def answer(self) -> Any:
        """The answer of the last stop, or None."""
        return self._replay.answer

    @property
    def stopped_by(self) -> str | None:
        """Why the last run stopped (``finish``, ``limit``, ...), or None while one runs."""
        return self._replay.stopped_by

    @property
    def data(self) -> Mapping[str, Any]:
        """Application data set with :meth:`set_data`, read-only and deep-frozen.

        It is a dict whose dicts and lists refuse changes (TypeError): change data with
        :meth:`set_data` and :meth:`delete_data`, which the history records. It does not
        follow later changes; ``copy.deepcopy(state.data)`` gives a plain copy to edit.
        """
        return self._replay.data

    @property
    def created_at(self) -> str:
        return str(self._replay.task_entry["at"])

    @property
    def updated_at(self) -> str:
        return str(self.history[-1]["at"])

    @property
    def last_agent(self) -> dict[str, Any] | None:
        """The agent of the last ``run_start``, or None."""
        return self._replay.last_agent

    @property
    def parent(self) -> str | None:
        """The id of the State that spawned this one (see :meth:`child`), or None."""
        parent = self._replay.task_entry.get("parent")
        return parent if isinstance(parent, str) else None

    @property
    def call_id(self) -> str | None:
        """The parent's tool call that spawned this State, if it was given."""
        call_id = self._replay.task_entry.get("call_id")
        return call_id if isinstance(call_id, str) else None

    @property
    def incarnation(self) -> str | None:
        """This State's life in its store: a random id (the docs' "Protection" page,
        "Incarnations"); None if its store keeps none, or it was saved before statekeep kept one."""
        return self._incarnation

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """``{"id": ..., "seq": ...}`` for a State made by ``store.fork``, else None."""
        return None if self._forked_from is None else dict(self._forked_from)

    @property
    def expires_at(self) -> datetime | None:
        """When the State expires, as set by :meth:`expire_at` or :meth:`keep_for` (None:
        never, unless the store has a ``retention``)."""
        return self._expires_at

    def expire_at(self, when: datetime | None) -> None:
        """Expire the State at ``when`` (an aware datetime), or never with None; saved by
        the next save. An expired State is gone for every reader, as if deleted, and
        ``store.gc()`` removes it."""
        self._expires_at = None if when is None else aware_time(when, "expire_at(when)")

    def keep_for(self, period: timedelta) -> None:
        """Expire the State ``period`` from now (see :meth:`expire_at`): from this machine's
        clock now, so the expiry is a fixed time, saved as such. (A store's ``retention``
        instead counts from each write, by the clock of the store or its server.)"""
        self._expires_at = datetime.now(UTC) + check_period(period, "keep_for(period)")

    def child(
        self,
        task: str,
        *,
        id: str | None = None,
        labels: Mapping[str, str] | None = None,
        call_id: str | None = None,
    ) -> State:
        """A new State (a subagent's run) whose :attr:`parent` is this one.

        Its first entry records this State's id and, when given, ``call_id``, the tool call
        that spawned it. ``store.list(parent=state.id)`` lists the children once saved.
        """
        return State(task, id=id, parent=self.id, labels=labels, call_id=call_id)

    def snapshot(self) -> dict[str, Any]:
        """The dict a store keeps beside the history, which ``SavedState.from_snapshot`` reads.

        ValueError naming the label if :attr:`labels` holds a bad one.
        """
        labels = check_labels(self.labels, "state.labels")  # checked, never rebound: yours stays yours
        agent = self._replay.last_agent
        return {
            "v": self._replay.version,  # the lowest that reads it: older statekeeps keep loading the rest
            "task": self.task,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "turn": self.turn,
            "stopped_by": self.stopped_by,
            "finished": self.finished,
            "seq": self._replay.next_seq - 1,
            "agent": None if agent is None else agent["name"],
            "parent": self.parent,
            "labels": labels,
            "expires_at": None if self._expires_at is None else iso(self._expires_at),
            "forked_from": self.forked_from,
            **self._saved_origins(),
        }

    def _restore(self, snapshot: Mapping[str, Any] | None) -> None:
        """Take back what a saved snapshot holds beyond the history: labels, an explicit
        expiry, the fork source and the key origins of the calls a fork inherited. Unreadable
        values are dropped (the history is the truth)."""
        if not snapshot:
            return
        labels = snapshot.get("labels")
        try:
            saved = check_labels(labels if isinstance(labels, Mapping) else None)
        except ValueError:
            saved = {}
        self.labels.clear()
        self.labels.update(saved)
        expiry = snapshot.get("expires_at")
        if isinstance(expiry, str) and snapshot.get("expiry") != "retention":
            try:
                self._expires_at = aware_time(expiry, "expires_at")
            except ValueError:
                self._expires_at = None
        forked = snapshot.get("forked_from")
        if isinstance(forked, dict) and isinstance(forked.get("id"), str) and type(forked.get("seq")) is int:
            self._forked_from = {"id": forked["id"], "seq": forked["seq"]}
        self._restore_origins(snapshot.get(KEY_ORIGINS))

    # -- write side ---------------------------------------------------------------------

    def add_user(self, text: str) -> None:
        self._append("user", "State.add_user()", text=text)

    def begin_run(self, agent: Mapping[str, Any], *, trace: Mapping[str, str] | None = None) -> None:
        """Start a run by ``agent`` (see :func:`agent_info`). The first run after a load
        warns with :class:`ResumeWarning` if the agent differs from the last one.
        ``trace``: the run's OpenTelemetry span, ``{"trace_id", "span_id"}`` in lowercase hex
        (32 and 16 digits), kept in the ``run_start`` entry so that a later run of the State
        links its span to this one (:class:`Agent` gives it when a tracer provider is set)."""
        info = self._check_run(agent)
        if trace is None:
            self._append("run_start", "State.begin_run()", agent=info)
        else:
            self._append("run_start", "State.begin_run()", agent=info, trace=check_trace(trace))

    def _check_run(self, agent: Mapping[str, Any]) -> dict[str, Any]:
        """The ``run_start`` agent for ``agent``, once a run can start; adds nothing. The
        first check after a load warns if the agent changed (Agent.run checks early, in the
        caller's thread, so that the warning points at the caller's line)."""
        if self.finished:
            raise ValueError(
                f"State {self.id!r} is finished; a finished State cannot run again. To go on from "
                "it, start a new State and give it what it needs from this one's messages "
                "(state.messages), e.g. with add_user()"
            )
        info = {key: agent[key] for key in AGENT_KEYS if key in agent}
        if set(info) != set(AGENT_KEYS):
            raise ValueError(f"agent needs {', '.join(AGENT_KEYS)}; use statekeep.agent_info(...)")
        info["tools"] = sorted(info["tools"])
        self._replay.check_run_start(self._replay.next_seq)
        if self._check_agent:
            warn_if_agent_changed(self.id, self.last_agent, info)  # may raise under -W error
            self._check_agent = False
        return info

    def request(self, model: str) -> None:
        """Record that a request is being sent to ``model``."""
        self._append("model_request", "State.request()", model=model)

    def add_reply(
        self,
        text: str = "",
        tool_calls: Iterable[Mapping[str, Any]] = (),
        *,
        usage: Mapping[str, Any] | None = None,
        stop_reason: str | None = None,
        awaiting_approval: Iterable[str] = (),
    ) -> None:
        """Record the model's reply to the waiting request. ``awaiting_approval``: the ids of
        its calls that wait for a person's approval (in :attr:`pending_approvals` from here on;
        never repaired as in doubt by a load: they have not run)."""
        calls = [{"id": c["id"], "name": c["name"], "args": c.get("args", {})} for c in tool_calls]
        waiting = list(awaiting_approval)
        self._append(
            "model_reply",
            "State.add_reply()",
            text=text,
            tool_calls=calls,
            usage=dict(usage or {}),
            stop_reason=stop_reason,
            **({"approval": waiting} if waiting else {}),
        )

    def add_model_error(self, message: str) -> None:
        """Close the waiting request: the model gave no reply."""
        self._append("model_error", "State.add_model_error()", message=message)

    def add_tool_result(
        self, call_id: str, output: Any, *, is_error: bool = False, outcome: str | None = None
    ) -> None:
        """Record the result of a pending tool call (outcome ``done``, or ``error`` if
        ``is_error``, unless given). ``output`` must be a JSON value (TypeError otherwise)."""
        where = f"State.add_tool_result({call_id!r})"
        self._tool_result(where, call_id, output, is_error, outcome or ("error" if is_error else "done"))

    def stop(self, by: str, answer: Any = None) -> None:
        """End the current run; ``by`` says why (``limit``, a condition's name, ...)."""
        self._append("stop", f"State.stop({by!r})", by=by, answer=answer)

    def finish(self, answer: Any) -> None:
        """End the run for good with ``answer``; a finished State cannot run again."""
        self._append("stop", "State.finish()", by="finish", answer=answer)

    def set_data(self, key: str, value: Any) -> None:
        """Set application data ``key`` to ``value``, a JSON value (TypeError otherwise)."""
        self._append("data", f"State.set_data({key!r})", key=key, value=value)

    def delete_data(self, key: str) -> None:
        self._append("data", f"State.delete_data({key!r})", key=key, deleted=True)

    def add_error(self, message: str) -> None:
        """Record that the run ended with an exception."""
        self._append("error", "State.add_error()", message=message)

    def compact(self, summary: str, *, through: int | None = None) -> None:
        """Show the model ``summary`` in place of the messages of the entries up to seq
        ``through`` (default: every entry so far), by appending a ``compaction`` entry.

        :attr:`messages` then starts with the summary, followed by the messages after
        ``through``; :attr:`history`, :attr:`task` and :attr:`data` stay as they were, and
        a later compaction replaces this one (its summary should say what this one said:
        :class:`~statekeep.Compactor` hands it the current summary with the messages).
        ``through`` must be the seq of an entry of this State, not below the latest
        compaction's, and not between a model reply with tool calls and the last of their
        results (the model APIs refuse a tool result whose call they were not shown; the
        ValueError names the seqs that would do). It cannot be done while a model request
        or tool call waits. ``summary``: a non-empty str. Nothing is added on an error; like
        every entry, it is durable once a save returns."""
        if not isinstance(summary, str):
            raise TypeError(f"State.compact(): summary must be a str, got {type(summary).__name__}")
        if through is None:
            through = self.history[-1]["seq"]
        self._append("compaction", "State.compact()", summary=summary, through=through)

    def _compaction_point(self, keep: int) -> tuple[int, list[dict[str, Any]]] | None:
        """Where a compaction keeping the latest ``keep`` messages would end and what it
        would replace (see ``Replay.cut``); None when it would replace nothing."""
        return self._replay.cut(keep)

    def _append(self, kind: str, call: str, **fields: Any) -> None:
        """Add an entry holding ``fields``, or raise naming ``call`` (the State method) and
        the key; nothing is added then, so every save can still encode the history."""
        for key, value in fields.items():
            check(value, f"{call} {key}", 1)
        # The history keeps a JSON copy: later changes to the caller's objects never reach
        # it, and it equals what a load gives back (tuples become lists).
        entry = decode(orjson.dumps({"seq": self._replay.next_seq, "kind": kind, "at": now(), **fields}))
        try:
            self._replay.apply(entry)
        except ValueError as exc:
            raise ValueError(f"{call}: {exc}") from None

    def _add_repair(self, entry: dict[str, Any]) -> None:
        """Add an entry that load builds to close an interrupted run (not saved yet)."""
        self._replay.apply(entry)

    # -- identity -----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.id == other.id and self.history == other.history

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"State(id={self.id!r}, task={self.task[:40]!r}, turn={self.turn}, entries={len(self.history)})"
        )
