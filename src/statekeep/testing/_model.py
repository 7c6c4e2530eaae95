"""StoreMachine: a Hypothesis state machine that drives a store's sync API and compares every
answer with a plain dict model, for the store a :class:`StoreContract` makes.

The model is ``{state_id: (entries, snapshot)}``. Entries and snapshots are compared byte for
byte after JSON encoding, so a float that came back as an int, a reordered dict or a lost
``-0.0`` sign is a failure too. For a durable store, other instances on the same storage
(as other processes would) write, delete and re-create between the main instance's calls,
and the main instance is re-opened at times.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from .._core.errors import StateConflictError
from .._core.records import SavedState
from .._store.contract import Store
from ._helpers import MakesStores, snapshot

IDS = ("a", "b", "run-3")
ids = st.sampled_from(IDS)

texts = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(list('\u2028\u2029\u0085\r\n\x00"\\{}')),
    max_size=8,
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars,
    # never the key "sk.blob", which marks a stored blob reference (a write holding it is refused)
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(texts.filter(lambda k: k != "sk.blob"), inner, max_size=3)
    ),
    max_leaves=5,
)
# Never the key "seq" (the store owns it) nor "_conflict" (the conflict rule adds it).
# Top-level keys starting with "sk." are reserved (prepare_write refuses them).
bodies = st.dictionaries(
    texts.filter(lambda k: k not in ("seq", "_conflict") and not k.startswith("sk.")), json_values, max_size=3
)

# Listing rows: several spellings of one instant, so ties (broken by id) happen often.
UPDATED = [
    "2026-01-01T00:00:00+00:00",
    "2026-01-01T01:00:00+01:00",
    "2026-01-01T00:00:00Z",
    "2026-03-01T12:30:00.250000+00:00",
    "2025-12-31T23:59:59-05:00",
]
listable = st.builds(
    lambda task, updated, turn, stopped, finished, extra: {
        **snapshot(task, turn=turn, updated=updated),
        "stopped_by": stopped,
        "finished": finished,
        **extra,
    },
    texts,
    st.sampled_from(UPDATED),
    st.integers(0, 2**31),
    st.none() | texts,
    st.booleans(),
    st.dictionaries(st.sampled_from(["memory", "notes"]), json_values, max_size=2),
)
unlistable = bodies | st.builds(lambda s: {**s, "turn": -1}, listable)
snapshots = st.none() | listable | unlistable

Entry = dict[str, Any]


def normal(value: Any) -> Any:
    """What a store gives back for ``value``: its JSON round trip."""
    return orjson.loads(orjson.dumps(value))


def same(a: Any, b: Any) -> bool:
    return orjson.dumps(a) == orjson.dumps(b)


def new_entries(start: int, bodies_: list[Entry]) -> list[Entry]:
    return [{"seq": start + i, **body} for i, body in enumerate(bodies_)]


Rule = TypeVar("Rule", bound=Callable[..., None])


def _can(flag: str) -> Callable[[Rule], Rule]:
    """Run the rule only when the contract's ``flag`` is set."""
    return precondition(lambda self: bool(getattr(self.contract, flag)))


class StoreMachine(RuleBasedStateMachine):
    """The rules every store must follow; ``contract`` makes the store and says what it offers.

    Subclass to add invariants or rules of your own, and name the subclass in
    ``StoreContract.machine``. ``self.folder`` is the example's scratch folder.
    """

    contract: ClassVar[MakesStores]

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, tuple[list[Entry], Entry | None]] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="statekeep-model-"))
        self.store = self.contract.make_store(self.folder)

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------

    def match(self, text: str) -> str | None:
        return text if self.contract.statekeep_messages else None

    def write(self, sid: str, ents: list[Entry], snap: Entry | None, *, create: bool = False) -> None:
        self.store.write(sid, ents, snap, create=create)

    def check_state(self, sid: str, store: Store | None = None) -> None:
        record = (store or self.store).read(sid)
        if sid not in self.model:
            assert record is None, (sid, record)
            return
        ents, snap = self.model[sid]
        assert record is not None, sid
        assert same(record.entries, ents), (sid, record.entries, ents)
        assert same(record.snapshot, snap), (sid, record.snapshot, snap)

    def apply(self, sid: str, ents: list[Entry], snap: Entry | None) -> None:
        """The model's version of an accepted write."""
        stored, old_snap = self.model[sid]
        for entry in ents:
            if entry["seq"] == len(stored):
                stored.append(normal(entry))
        self.model[sid] = (stored, old_snap if snap is None else normal(snap))

    # -- rules ----------------------------------------------------------------------

    @rule(sid=ids, bodies_=st.lists(bodies, max_size=3), snap=snapshots)
    def create(self, sid: str, bodies_: list[Entry], snap: Entry | None) -> None:
        ents = new_entries(0, bodies_)
        if sid in self.model:
            with pytest.raises(ValueError, match=self.match("already exists")) as info:
                self.write(sid, ents, snap, create=True)
            assert not isinstance(info.value, StateConflictError)
            self.check_state(sid)
        else:
            self.write(sid, ents, snap, create=True)
            self.model[sid] = ([normal(e) for e in ents], None if snap is None else normal(snap))

    @rule(sid=ids, start=st.integers(1, 3), snap=snapshots)
    def create_not_from_zero(self, sid: str, start: int, snap: Entry | None) -> None:
        with pytest.raises(ValueError, match=self.match("starts at seq 0")):
            self.write(sid, new_entries(start, [{}]), snap, create=True)
        self.check_state(sid)

    @rule(sid=ids, bodies_=st.lists(bodies, max_size=3), snap=snapshots)
    def append(self, sid: str, bodies_: list[Entry], snap: Entry | None) -> None:
        if sid not in self.model:
            with pytest.raises(LookupError):
                self.write(sid, new_entries(0, bodies_), snap)
            self.check_state(sid)  # still absent: nothing was created
            return
        ents = new_entries(len(self.model[sid][0]), bodies_)
        self.write(sid, ents, snap)
        self.apply(sid, ents, snap)

    @rule(sid=ids, bodies_=st.lists(bodies, min_size=1, max_size=2))
    def append_keeping_snapshot(self, sid: str, bodies_: list[Entry]) -> None:
        if sid not in self.model:
            return
        ents = new_entries(len(self.model[sid][0]), bodies_)
        self.write(sid, ents, None)
        self.apply(sid, ents, None)

    @rule(sid=ids, snap=snapshots)
    def snapshot_only(self, sid: str, snap: Entry | None) -> None:
        if sid not in self.model:
            with pytest.raises(LookupError):
                self.write(sid, [], snap)
            return
        self.write(sid, [], snap)
        self.apply(sid, [], snap)

    @rule(sid=ids, data=st.data(), more=st.lists(bodies, max_size=2), snap=snapshots, reorder=st.booleans())
    def resend(
        self, sid: str, data: st.DataObject, more: list[Entry], snap: Entry | None, reorder: bool
    ) -> None:
        """Send stored entries again (maybe with their keys in another order), maybe with new ones
        after them: the stored ones are skipped, the new ones appended."""
        if sid not in self.model or not self.model[sid][0]:
            return
        stored = self.model[sid][0]
        start = data.draw(st.integers(0, len(stored) - 1), label="start")
        stop = data.draw(st.integers(start + 1, len(stored)), label="stop")
        again = [dict(reversed(e.items())) if reorder else dict(e) for e in stored[start:stop]]
        if stop == len(stored):
            again += new_entries(len(stored), more)
        self.write(sid, again, snap)
        self.apply(sid, again, snap)

    @rule(sid=ids, data=st.data(), more=st.lists(bodies, max_size=2), snap=snapshots)
    def conflict(self, sid: str, data: st.DataObject, more: list[Entry], snap: Entry | None) -> None:
        """A batch where one already-stored seq holds a different entry: StateConflictError and
        nothing of it is stored, not even the snapshot or the new entries after it."""
        if sid not in self.model or not self.model[sid][0]:
            return
        stored = self.model[sid][0]
        i = data.draw(st.integers(0, len(stored) - 1), label="conflicting seq")
        start = data.draw(st.integers(0, i), label="batch start")
        changed = dict(stored[i])
        how = data.draw(st.sampled_from(["add-key", "drop-key", "change-value"]), label="how")
        keys = [k for k in changed if k != "seq"]
        if how == "drop-key" and keys:
            del changed[data.draw(st.sampled_from(keys), label="key")]
        elif how == "change-value" and keys:
            key = data.draw(st.sampled_from(keys), label="key")
            changed[key] = ["not", changed[key]]  # never equal to the old value
        else:
            changed["_conflict"] = data.draw(json_values, label="value")
        batch = [dict(e) for e in stored[start:i]] + [changed] + [dict(e) for e in stored[i + 1 :]]
        batch += new_entries(len(stored), more)
        with pytest.raises(StateConflictError, match=self.match(f"seq {i}")):
            self.write(sid, batch, snap)
        self.check_state(sid)

    @rule(sid=ids, gap=st.integers(1, 3), bodies_=st.lists(bodies, min_size=1, max_size=2), snap=snapshots)
    def gap(self, sid: str, gap: int, bodies_: list[Entry], snap: Entry | None) -> None:
        if sid not in self.model:
            with pytest.raises(LookupError):
                self.write(sid, new_entries(gap, bodies_), snap)
            return
        start = len(self.model[sid][0]) + gap
        with pytest.raises(ValueError, match=self.match("no gap")) as info:
            self.write(sid, new_entries(start, bodies_), snap)
        assert not isinstance(info.value, StateConflictError)
        self.check_state(sid)

    @_can("supports_delete")
    @rule(sid=ids)
    def delete(self, sid: str) -> None:
        self.store.delete(sid)
        self.model.pop(sid, None)

    @rule(sid=st.sampled_from([*IDS, "never-used"]))
    def read(self, sid: str) -> None:
        self.check_state(sid)

    @rule(sid=st.sampled_from([*IDS, "never-used"]), back=st.integers(min_value=-2, max_value=6))
    def read_range(self, sid: str, back: int) -> None:
        """A range read from ``back`` entries before the end (past it when negative)."""
        stored, snap = self.model.get(sid, ([], None))
        since = max(0, len(stored) - back)
        record = self.store.read(sid, since=since)
        if sid not in self.model:
            assert record is None, (sid, record)
            return
        assert record is not None, sid
        assert same(record.entries, stored[since:]), (sid, since, record.entries, stored)
        assert same(record.snapshot, snap), (sid, record.snapshot, snap)

    @_can("supports_list")
    @rule()
    def list_states(self) -> None:
        expected: list[SavedState] = []
        refused = set()
        for sid, (_, snap) in self.model.items():
            if snap is None:
                continue
            try:
                expected.append(SavedState.from_snapshot(sid, snap))
            except ValueError:
                refused.add(sid)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = self.store.list()
        # Newest updated_at first; equal instants (however spelled) in id order.
        assert rows == sorted(expected, key=lambda r: (-r.updated_at.timestamp(), r.id))
        assert all(issubclass(w.category, RuntimeWarning) for w in caught)
        if self.contract.statekeep_messages:
            said = " ".join(str(w.message) for w in caught)
            assert {sid for sid in self.model if f"State {sid!r} left out" in said} == refused
        else:
            assert len(caught) >= len(refused)

    # -- other instances on the same storage (durable stores) ------------------------

    @_can("durable")
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self.contract.make_store(self.folder)

    @_can("durable")
    @rule(sid=ids, bodies_=st.lists(bodies, max_size=2), snap=snapshots)
    def append_from_another_instance(self, sid: str, bodies_: list[Entry], snap: Entry | None) -> None:
        with self.contract.make_store(self.folder) as other:
            if sid not in self.model:
                with pytest.raises(LookupError):
                    other.write(sid, new_entries(0, bodies_), snap)
                return
            ents = new_entries(len(self.model[sid][0]), bodies_)
            other.write(sid, ents, snap)
            StoreMachine.apply(self, sid, ents, snap)
            self.check_state(sid, other)

    @precondition(lambda self: self.contract.durable and self.contract.supports_delete)
    @rule(sid=ids, bodies_=st.lists(bodies, max_size=2), snap=snapshots)
    def recreate_from_another_instance(self, sid: str, bodies_: list[Entry], snap: Entry | None) -> None:
        """Another process resets a run: deletes the State and creates it again."""
        with self.contract.make_store(self.folder) as other:
            other.delete(sid)
            ents = new_entries(0, bodies_)
            other.write(sid, ents, snap, create=True)
        self.model[sid] = ([normal(e) for e in ents], None if snap is None else normal(snap))

    @precondition(lambda self: self.contract.durable and bool(self.model))
    @rule()
    def fresh_instance_sees_the_same(self) -> None:
        with self.contract.make_store(self.folder) as other:
            for sid in IDS:
                self.check_state(sid, other)

    # -- invariants -----------------------------------------------------------------

    @invariant()
    def reads_match_the_model(self) -> None:
        for sid in IDS:
            self.check_state(sid)


def run_machine(machine: type[StoreMachine], examples: int, steps: int) -> None:
    """Run ``machine`` for ``examples`` examples of up to ``steps`` steps each."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
