"""The history vocabulary (the on-disk format of a State) and its replay, pure and linear.

Every entry is a JSON object with ``seq`` (dense from 0), ``kind`` and ``at`` (ISO 8601,
UTC). Format version :data:`FORMAT_VERSION`; the kinds and their keys (optional ones in
brackets, where absent and ``null`` are the same, standing for what follows ``=``):

=============== ==========================================================================
kind            keys
=============== ==========================================================================
task            ``text``, [``parent``], [``call_id``] — always seq 0: what the State is for;
                a subagent's names the State that spawned it and the tool call that did
base            ``task``: {``text``, ``at``, [``parent``], [``call_id``]}, ``trimmed``, ``turn``,
                ``data``, ``answered``, ``open_calls``, [``last_agent``], [``stopped_by``],
                [``answer``], [``waiting``], [``steps``] — in place of the task, the first entry of a
                trimmed history (``store.trim``), at any seq: what the entries up to its seq,
                removed, had made (:mod:`statekeep._run.base`)
user            ``text`` — a message from the user
run_start       ``agent``: {``name``, ``model``, ``system_sha256``, ``tools``: sorted names},
                [``trace``]: {``trace_id``, ``span_id``} — the run's OpenTelemetry span (hex), which
                a later run's span links to (older statekeeps ignore it, as any unknown key)
model_request   ``model`` — a request sent to the model, waiting for its reply
model_reply     [``text`` = ""], [``tool_calls`` = []]: [{``id``, ``name``, ``args``}],
                [``usage``], [``stop_reason``]
model_error     ``message`` — closes a request that got no reply
tool_result     ``call_id``, ``name``, ``output``, ``is_error``, ``outcome``: done | error | unknown,
                [``reconciled``] — true: the result is what the tool's ``reconcile`` found
stop            ``by``: finish | limit | the condition that stopped the run; [``answer``]
data            ``key``, and ``value`` unless [``deleted``] is true — application data
error           ``message`` — the run ended with an exception
compaction      ``summary``, ``through`` — for the model, the messages of the entries up to
                seq ``through`` are replaced by ``summary`` (the latest compaction wins)
tool_resume     ``call_id``, ``name``, ``by``: reconcile | idempotent | approved — a pending
                call runs now, after a pause: found not run by its tool's ``reconcile``, or
                in doubt and idempotent (each of those is one more attempt), or approved
approval_wait   ``call_ids`` — pending calls that wait for a person's approval before they run;
                the run stops (``stopped_by`` "approval"): :mod:`statekeep._run.replay_approvals`
approval        ``call_id``, ``approved``, [``note``] — a person's decision on a waiting call
step_start      ``name``, ``key``, [``attempt`` = 1], [``call_id``] — a durable step starts (saved
                before its function runs); ``call_id``: the pending tool call it runs in
step_end        ``name``, ``output``, ``is_error``, ``outcome``: done | error | unknown,
                [``reconciled``], [``call_id``] — a started step's end (a base's ``steps``
                carries each step's record: :mod:`statekeep._run.replay_steps`)
=============== ==========================================================================

Every other key is required and must not be ``null``, except the JSON values a writer
gives, where ``null`` is a value: ``args``, ``output``, ``answer`` and a data ``value``.
Unknown keys (on an entry, a tool call or a run_start agent) are kept in the entry as
written and ignored by everything derived from it.

:class:`Replay` applies entries one at a time, checking that each can follow what came
before, and keeps everything the read side needs up to date, so rebuilding a State is
linear in the length of its history: a compaction drops the messages it replaces by moving
a start index (found by bisection), and the list the model gets is built again only when it
is read after a compaction.

A compaction's ``through`` is an int below its own seq, at least the ``through`` of the
compaction before it, at or after the first entry, and never inside a model reply's tool
calls (after the reply and before the last of their results): the model APIs refuse a tool
result whose call they were not shown. It follows only when no model request or tool call
waits.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime
from typing import Any

from .._core.frozen import FrozenDict, freeze
from .replay_approvals import ApprovalWaits
from .replay_calls import ResumedCalls
from .replay_steps import StepReplay

#: Version 2 (statekeep 0.2) added the task entry's ``parent`` and ``call_id`` and the
#: snapshot's ``agent``, ``parent``, ``labels``, ``expires_at`` and ``forked_from``; version 1
#: histories read as they are. A statekeep that knows only version 1 refuses version 2
#: States (it would drop their labels on its next save). Version 3 (statekeep 0.3) added the
#: ``compaction`` and ``base`` kinds: a statekeep that knows only version 2 refuses version 3
#: States rather than show the model what a compaction replaced. (Blob references are the
#: stores' own business: each store's format or schema version keeps older statekeeps out.)
#: Version 4 (statekeep 0.4) added what keeps tools from running twice: the kinds in
#: ``_KIND_VERSION`` with 4 (``tool_resume``, ...) and a tool result's ``reconciled``; a
#: statekeep that knows only version 3 refuses version 4 States rather than run again a
#: tool that was resumed or waits for approval.
FORMAT_VERSION = 4
#: The kinds a history needs each version for: a State holding none of them is stamped with
#: the lowest version that reads it (2), so a statekeep that knows only version 2 still loads
#: it; one with a compaction or a base is stamped 3 and refused there.
_KIND_VERSION = {
    "compaction": 3,
    "base": 3,
    "tool_resume": 4,
    "approval_wait": 4,
    "approval": 4,
    "step_start": 4,
    "step_end": 4,
}
#: The version a history of the other kinds is stamped with.
BASE_FORMAT_VERSION = 2
KINDS = (
    "task",
    "user",
    "run_start",
    "model_request",
    "model_reply",
    "model_error",
    "tool_result",
    "stop",
    "data",
    "error",
    "compaction",
    "base",
    "tool_resume",
    "approval_wait",
    "approval",
    "step_start",
    "step_end",
)
OUTCOMES = ("done", "error", "unknown")
AGENT_KEYS = ("name", "model", "system_sha256", "tools")

# Keys each kind must have, with the types they must hold (never null).
_STR, _BOOL, _LIST, _DICT = (str,), (bool,), (list,), (dict,)
_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    "task": {"text": _STR},
    "user": {"text": _STR},
    "run_start": {"agent": _DICT},
    "model_request": {"model": _STR},
    "model_reply": {},
    "model_error": {"message": _STR},
    "tool_result": {"call_id": _STR, "name": _STR, "is_error": _BOOL, "outcome": _STR},
    "stop": {"by": _STR},
    "data": {"key": _STR},
    "error": {"message": _STR},
    "compaction": {"summary": _STR, "through": (int,)},
    "tool_resume": {"call_id": _STR, "name": _STR, "by": _STR},
    "approval_wait": {"call_ids": _LIST},
    "approval": {"call_id": _STR, "approved": _BOOL},
    "step_start": {"name": _STR, "key": _STR},
    "step_end": {"name": _STR, "is_error": _BOOL, "outcome": _STR},
    "base": {
        "task": _DICT,
        "trimmed": (int,),
        "turn": (int,),
        "data": _DICT,
        "answered": _LIST,
        "open_calls": _LIST,
    },
}
# Keys a kind may have, with the types they hold when present: absent and null are the same.
_OPTIONAL: dict[str, dict[str, tuple[type, ...]]] = {
    "task": {"parent": _STR, "call_id": _STR},
    "run_start": {"trace": _DICT},
    "base": {"last_agent": _DICT, "stopped_by": _STR, "waiting": _STR, "steps": _LIST},
    "model_reply": {"text": _STR, "tool_calls": _LIST, "usage": _DICT, "stop_reason": _STR},
    "tool_result": {"reconciled": _BOOL},
    "approval": {"note": _STR},
    "step_start": {"attempt": (int,), "call_id": _STR},
    "step_end": {"reconciled": _BOOL, "call_id": _STR},
}


def _json_type(value: Any) -> str:
    """What ``value`` is, in JSON's words, for messages about a damaged entry."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def now() -> str:
    """The current time as the ISO 8601 UTC string history entries carry."""
    return datetime.now(UTC).isoformat()


#: What the model reads in place of the messages a compaction replaced: this, then the summary.
SUMMARY_INTRO = "A summary of the earlier conversation, in place of its messages:\n\n"


def summary_message(summary: str) -> dict[str, Any]:
    """The message the model gets in place of the messages a compaction replaced: a ``user``
    message that says it is a summary of the earlier conversation."""
    return {"role": "user", "content": SUMMARY_INTRO + summary}


class Replay(ApprovalWaits, ResumedCalls, StepReplay):
    """What a history says so far, updated entry by entry. The kinds of format 4 replay in
    mixins of their own (:mod:`statekeep._run.replay_calls`, ...)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.start = 0  # the seq of entries[0]: above 0 for a trimmed history (its base)
        #: The task entry, or a base's ``task`` (``text``, ``at``, [``parent``], [``call_id``]).
        self.task_entry: dict[str, Any] = {}
        #: The lowest format version that reads the history so far (see :data:`FORMAT_VERSION`).
        self.version = BASE_FORMAT_VERSION
        self.turn = 0
        self.pending_request: dict[str, Any] | None = None
        self.pending_calls: dict[str, dict[str, Any]] = {}  # call id -> call, in order
        ResumedCalls.__init__(self)
        ApprovalWaits.__init__(self)
        StepReplay.__init__(self)
        self.answered: set[str] = set()
        self.finished = False
        self.answer: Any = None
        self.stopped_by: str | None = None
        self._values: dict[str, Any] = {}  # key -> deep-frozen value
        self._data_view: FrozenDict | None = FrozenDict()
        self.last_agent: dict[str, Any] | None = None
        # The messages of the entries, with the seq of each; those before _start are replaced
        # by the latest compaction's summary (through: its ``through``).
        self._said: list[dict[str, Any]] = []
        self._said_at: list[int] = []
        self._start = 0
        self._summary: dict[str, Any] | None = None
        self.through: int | None = None
        self._view: list[dict[str, Any]] | None = []  # what the model sees; None: build it again
        # Seqs after which tool calls waited for results: [_busy_from[i], _busy_to[i]) each,
        # and from _busy_now on while some still wait (a compaction cannot end inside one).
        self._busy_from: list[int] = []
        self._busy_to: list[int] = []
        self._busy_now: int | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The messages the model sees: the latest compaction's summary, if any, then the
        messages of the entries after its ``through``."""
        if self._view is None:
            head = [] if self._summary is None else [self._summary]
            self._view = head + self._said[self._start :]
        return self._view

    @property
    def data(self) -> FrozenDict:
        """The application data, deep-frozen; built again only after it changes."""
        if self._data_view is None:
            self._data_view = FrozenDict(self._values)
        return self._data_view

    @property
    def next_seq(self) -> int:
        """The seq the next entry must have."""
        return self.start + len(self.entries)

    def apply(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` if it can follow the history; else ValueError saying why."""
        seq, kind = entry.get("seq"), entry.get("kind")
        if kind == "base" and not self.entries and type(seq) is int and seq >= 0:
            self.start = seq  # a trimmed history starts at its base
        if seq != self.next_seq or type(seq) is not int:
            raise ValueError(f"entry has seq {seq!r}, expected {self.next_seq}")
        if kind not in _REQUIRED:
            raise ValueError(f"seq {seq}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        if not isinstance(entry.get("at"), str):
            raise ValueError(f"seq {seq}: {kind} entry has no 'at' time")
        for key, types in _REQUIRED[kind].items():
            if not isinstance(entry.get(key), types):
                got = "has none" if key not in entry else f"has {_json_type(entry[key])}"
                raise ValueError(
                    f"seq {seq}: {kind} entry needs {key!r} of type {types[0].__name__}; it {got}"
                )
        for key, types in _OPTIONAL.get(kind, {}).items():
            value = entry.get(key)
            if value is not None and not isinstance(value, types):
                raise ValueError(
                    f"seq {seq}: {kind} entry's {key!r} must be null or of type {types[0].__name__}; "
                    f"it has {_json_type(value)}"
                )
        if (kind in ("task", "base")) != (not self.entries) or (kind == "task" and seq != 0):
            raise ValueError(
                f"seq {seq}: a history starts with one task entry, at seq 0 (or, trimmed, one base entry)"
            )
        if self.finished:
            raise ValueError(f"seq {seq}: the State is finished; nothing can follow its stop entry")
        getattr(self, "_" + kind)(entry)
        self.entries.append(entry)
        if kind in _KIND_VERSION:
            self.version = max(self.version, _KIND_VERSION[kind])
        if self.pending_calls and self._busy_now is None:
            self._busy_now = seq
        elif not self.pending_calls and self._busy_now is not None:
            self._busy_from.append(self._busy_now)
            self._busy_to.append(seq)
            self._busy_now = None

    def _say(self, seq: int, message: dict[str, Any]) -> None:
        self._said.append(message)
        self._said_at.append(seq)
        if self._view is not None:
            self._view.append(message)

    # -- one method per kind: check, then update --------------------------------------

    def _task(self, e: dict[str, Any]) -> None:
        self.task_entry = e
        self._say(e["seq"], {"role": "user", "content": e["text"]})

    def _base(self, e: dict[str, Any]) -> None:
        # What the removed entries made; their messages are the latest compaction's summary.
        seq, task = e["seq"], e["task"]
        if not isinstance(task.get("text"), str) or not isinstance(task.get("at"), str):
            raise ValueError(f"seq {seq}: a base entry's task needs a str 'text' and 'at'")
        if e["trimmed"] != seq + 1 or e["turn"] < 0:
            raise ValueError(f"seq {seq}: a base entry stands for {seq + 1} entries and a turn >= 0")
        calls = {}
        for call in e["open_calls"]:
            if not (isinstance(call, dict) and isinstance(call.get("id"), str) and "args" in call):
                raise ValueError(f"seq {seq}: a base entry's open calls need an 'id', 'name' and 'args'")
            calls[call["id"]] = {"id": call["id"], "name": call.get("name"), "args": call["args"]}
        try:
            "".join(e["answered"])  # (every one a str: checked at C speed, the list may be long)
        except TypeError:
            raise ValueError(f"seq {seq}: a base entry's answered call ids must be strs") from None
        agent = e.get("last_agent")
        if agent is not None and any(agent.get(key) is None for key in AGENT_KEYS):
            raise ValueError(f"seq {seq}: a base entry's last agent needs {', '.join(AGENT_KEYS)}")
        self.task_entry = task
        self.turn = e["turn"]
        self.pending_calls = calls
        self.answered = set(e["answered"])
        waiting = e.get("waiting")
        self.pending_request = None if waiting is None else {"kind": "model_request", "model": waiting}
        self.last_agent = None if agent is None else {key: agent[key] for key in AGENT_KEYS}
        self.stopped_by = e.get("stopped_by")
        self.answer = e.get("answer")
        self.finished = self.stopped_by == "finish"
        self._values = {key: freeze(value) for key, value in e["data"].items()}
        self._data_view = None
        self._base_steps(e.get("steps"))

    def _user(self, e: dict[str, Any]) -> None:
        self._idle(e, "a user message")
        self._say(e["seq"], {"role": "user", "content": e["text"]})

    def _run_start(self, e: dict[str, Any]) -> None:
        self.check_run_start(e["seq"])  # calls waiting on approval may be pending
        agent = e["agent"]
        for key in AGENT_KEYS:
            if agent.get(key) is None:
                got = f"{key!r}: null" if key in agent else f"no {key!r}"
                raise ValueError(
                    f"seq {e['seq']}: run_start agent has {got}; it needs {', '.join(AGENT_KEYS)}"
                )
        self.last_agent = {key: agent[key] for key in AGENT_KEYS}  # other keys are ignored
        self.stopped_by = None
        self.answer = None

    def _model_request(self, e: dict[str, Any]) -> None:
        self._idle(e, "a model request")
        self.pending_request = e

    def _model_reply(self, e: dict[str, Any]) -> None:
        if self.pending_request is None:
            raise ValueError(f"seq {e['seq']}: a model reply with no request waiting for it")
        calls = {}
        for call in e.get("tool_calls") or ():
            if not (
                isinstance(call, dict)
                and isinstance(call.get("id"), str)
                and isinstance(call.get("name"), str)
            ):
                raise ValueError(f"seq {e['seq']}: each tool call needs a str 'id' and 'name' and 'args'")
            if "args" not in call:
                raise ValueError(f"seq {e['seq']}: tool call {call['id']!r} has no 'args'")
            if call["id"] in calls or call["id"] in self.answered:
                raise ValueError(f"seq {e['seq']}: tool call id {call['id']!r} is used twice")
            calls[call["id"]] = {"id": call["id"], "name": call["name"], "args": call["args"]}
        waiting = self._reply_approval(e, calls)
        self.pending_request = None
        self.pending_calls = calls
        self._wait_from_reply(e, waiting)
        self.turn += 1
        message: dict[str, Any] = {"role": "assistant", "content": e.get("text") or ""}
        if calls:
            message["tool_calls"] = list(calls.values())
        self._say(e["seq"], message)

    def _model_error(self, e: dict[str, Any]) -> None:
        if self.pending_request is None:
            raise ValueError(f"seq {e['seq']}: a model error with no request waiting")
        self.pending_request = None

    def _tool_result(self, e: dict[str, Any]) -> None:
        call = self.pending_calls.pop(e["call_id"], None)
        if call is None:
            why = "was answered already" if e["call_id"] in self.answered else "is not a pending call"
            raise ValueError(f"seq {e['seq']}: a result for tool call {e['call_id']!r}, which {why}")
        if e["outcome"] not in OUTCOMES:
            raise ValueError(f"seq {e['seq']}: outcome {e['outcome']!r} is not one of {', '.join(OUTCOMES)}")
        if "output" not in e:
            raise ValueError(f"seq {e['seq']}: tool_result entry needs 'output'")
        self.answered.add(e["call_id"])
        self._call_closed(e["call_id"])
        self._say(
            e["seq"],
            {
                "role": "tool",
                "tool_call_id": e["call_id"],
                "name": e["name"],
                "content": e["output"],
                "is_error": e["is_error"],
            },
        )

    def _stop(self, e: dict[str, Any]) -> None:
        self._idle(e, "a stop")
        self.stopped_by = e["by"]
        self.answer = e.get("answer")
        self.finished = e["by"] == "finish"

    def _data(self, e: dict[str, Any]) -> None:
        if e.get("deleted") is True:
            self._values.pop(e["key"], None)
        elif "value" in e:
            self._values[e["key"]] = freeze(e["value"])
        else:
            raise ValueError(f"seq {e['seq']}: a data entry needs 'value' or 'deleted': true")
        self._data_view = None

    def _error(self, e: dict[str, Any]) -> None:
        self.stopped_by = "error"

    def _compaction(self, e: dict[str, Any]) -> None:
        seq, through = e["seq"], e["through"]
        self._idle(e, "a compaction")
        if not e["summary"].strip():
            raise ValueError(
                f"seq {seq}: a compaction's summary is empty; give the text that replaces the messages"
            )
        problem = self.through_problem(through, seq)
        if problem is not None:
            raise ValueError(f"seq {seq}: {problem}")
        self._start = bisect_right(self._said_at, through, lo=self._start)
        self._summary = summary_message(e["summary"])
        self.through = through
        self._view = None
        if self._start > 32 and 2 * self._start > len(self._said):  # free what no one reads again
            del self._said[: self._start], self._said_at[: self._start]
            self._start = 0

    def through_problem(self, through: object, seq: int) -> str | None:
        """Why a compaction at ``seq`` cannot end at ``through``, or None if it can."""
        if type(through) is not int:
            return f"'through' must be an int, the seq of an entry of this State; it is {_json_type(through)}"
        first = self.entries[0]["seq"] if self.entries else 0
        if not first <= through < seq:
            return (
                f"through={through} is not the seq of an entry before this compaction "
                f"(the State has seqs {first} to {seq - 1})"
            )
        if self.through is not None and through < self.through:
            return (
                f"through={through} is below the latest compaction's through={self.through}: a "
                f"compaction replaces at least what the one before it did (use {self.through} or more)"
            )
        start, end = self._busy_around(through)
        if start is None:
            return None
        low = first if self.through is None else self.through + 1  # what replaces more
        safe = [str(at) for at in (start - 1, end) if at is not None and low <= at < seq]
        until = "whose results are not all recorded" if end is None else f"answered up to seq {end}"
        return (
            f"through={through} would separate the tool calls of the model reply at seq {start} "
            f"({until}) from their results, and the model APIs refuse a tool result whose call "
            f"they were not shown; use through={' or through='.join(safe) if safe else '(none yet)'}"
        )

    def _busy_around(self, seq: int) -> tuple[int | None, int | None]:
        """The tool-call stretch ``seq`` falls in: (the reply's seq, the last result's seq, or
        None while results are missing), or (None, None) if it falls in none."""
        if self._busy_now is not None and seq >= self._busy_now:
            return self._busy_now, None
        i = bisect_right(self._busy_from, seq) - 1
        if i >= 0 and seq < self._busy_to[i]:
            return self._busy_from[i], self._busy_to[i]
        return None, None

    def cut(self, keep: int) -> tuple[int, list[dict[str, Any]]] | None:
        """Where a compaction that keeps the latest ``keep`` messages as they are (more if
        one would split a reply's tool calls from their results) would end: its ``through``
        and the messages it replaces (the summary before them, if any). None if it would
        replace no message that the model sees now."""
        if not self.entries:
            return None
        kept = len(self._said) - self._start
        through = (
            self.entries[-1]["seq"]
            if keep <= 0
            else (self._said_at[len(self._said) - keep] - 1 if keep < kept else -1)
        )
        start, _ = self._busy_around(through)
        while start is not None:
            through = start - 1
            start, _ = self._busy_around(through)
        if through < self.entries[0]["seq"] or (self.through is not None and through <= self.through):
            return None
        upto = bisect_right(self._said_at, through, lo=self._start)
        if upto == self._start:
            return None
        head = [] if self._summary is None else [self._summary]
        return through, head + self._said[self._start : upto]

    def _idle(self, e: dict[str, Any], what: str) -> None:
        self.check_idle(what, e["seq"])

    def check_idle(self, what: str, seq: int) -> None:
        """Refuse ``what`` (at ``seq``) while the model or tools owe an answer."""
        if self.pending_request is not None:
            raise ValueError(f"seq {seq}: {what} while a model request waits for its reply")
        if self.pending_calls:
            ids = ", ".join(self.pending_calls)
            raise ValueError(f"seq {seq}: {what} while tool calls wait for results: {ids}")
