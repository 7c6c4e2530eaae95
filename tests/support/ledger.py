"""The exactly-once crash harness: an agent whose tools change an external ledger, a fault hook
that kills its process (SIGKILL) at a chosen save or effect boundary, and the check that the
run's history agrees with the ledger.

The ledger is a SQLite file of its own (not the store): table ``ledger`` holds one row per
effect, keyed by the call's idempotency key (unique), and table ``effects`` one row per time a
tool's effect ran (so a tool run twice shows). Each effect is one SQLite transaction: a kill
leaves it done or not done, never half done. Three tools, one of each kind:

- ``pay`` (``reconcile``: looks the key up): inserts its row; a second insert of the same key
  fails, so a pay run twice shows as an error result;
- ``ship`` (``idempotent``): inserts its row unless the key has one, and returns the row's
  output, as an idempotent service answers a repeated request;
- ``notify`` (neither): inserts its row; after a crash it must be reported as "may or may not
  have run", never run again.

The model (:class:`LedgerModel`) gives the reply for the number of replies the State holds,
so a resumed run, in any process, goes on with the same script.

The fault hook (:class:`FaultHook`): ``("save", k, "before" | "after")`` kills the process
before or after the k-th save of this process's run (0-based), ``("effect", k, side)`` before
or after the k-th ledger effect (after: committed, before the tool returns). Boundaries of
the run, not of the store's I/O (the stores' own crash tests cover those).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeep import Agent, NotRun, Reply, State, Store, ToolContext, idempotency_key, tool
from statekeep._leases.keepalive import LeaseKeeper
from statekeep._run.resume import INTERRUPTED_TOOL

TASK = "Pay, ship and tell the customer"
SYSTEM = "You run the shop's back office."
#: The model's replies, by the number of replies the State holds: two turns of calls, an answer.
SCRIPT = [
    Reply("Paying and shipping.", [
        {"id": "c1", "name": "pay", "args": {"amount": 30}},
        {"id": "c2", "name": "ship", "args": {"item": "book"}},
    ]),
    Reply("Telling them, then the rest.", [
        {"id": "c3", "name": "notify", "args": {"text": "shipped"}},
        {"id": "c4", "name": "pay", "args": {"amount": 5}},
    ]),
    Reply("Done."),
]  # fmt: skip
#: Saves and ledger effects of one run from the start, with no crash: the boundaries.
SAVES, EFFECTS = 12, 4
KINDS = ("save", "effect")
SIDES = ("before", "after")

Fault = tuple[str, int, str]


def all_faults() -> list[Fault]:
    """Every boundary of a run from the start: before and after each save and each effect."""
    return [
        (kind, k, side)
        for kind, count in (("save", SAVES), ("effect", EFFECTS))
        for k in range(count)
        for side in SIDES
    ]


class FaultHook:
    """Kills this process (SIGKILL) at the boundary ``fault`` names; counts them all."""

    def __init__(self, fault: Fault | None = None) -> None:
        self.fault = fault
        self.seen: Counter[str] = Counter()

    def at(self, kind: str, side: str) -> None:
        if self.fault == (kind, self.seen[kind], side):
            os.kill(os.getpid(), signal.SIGKILL)
        if side == "after":
            self.seen[kind] += 1


class Ledger:
    """The external ledger (see the module): a SQLite file, one transaction per effect."""

    def __init__(self, path: Path | str, hook: FaultHook | None = None) -> None:
        self.path = str(path)
        self.hook = hook or FaultHook()
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, call_id TEXT, output TEXT)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS effects "
                "(n INTEGER PRIMARY KEY, key TEXT, call_id TEXT, tool TEXT, attempt INTEGER)"
            )

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        finally:
            db.close()  # an exception before the commit rolls it back

    def effect(self, tool: str, ctx: ToolContext, output: str, *, upsert: bool = False) -> str:
        """Apply one effect of call ``ctx`` (its row keyed by the idempotency key); with
        ``upsert`` an existing row is kept and its output returned. The hook fires around it."""
        self.hook.at("effect", "before")
        with self._db() as db:
            db.execute(
                "INSERT INTO effects (key, call_id, tool, attempt) VALUES (?, ?, ?, ?)",
                (ctx.idempotency_key, ctx.call_id, tool, ctx.attempt),
            )
            verb = "INSERT OR IGNORE" if upsert else "INSERT"
            try:
                db.execute(f"{verb} INTO ledger VALUES (?, ?, ?)", (ctx.idempotency_key, ctx.call_id, output))
            except sqlite3.IntegrityError:
                raise RuntimeError(f"{tool} ran twice: key {ctx.idempotency_key} is in the ledger") from None
            (output,) = db.execute(
                "SELECT output FROM ledger WHERE key = ?", (ctx.idempotency_key,)
            ).fetchone()
        self.hook.at("effect", "after")
        return str(output)

    def lookup(self, key: str) -> str | None:
        with self._db() as db:
            row = db.execute("SELECT output FROM ledger WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def rows(self) -> dict[str, str]:
        """Key -> output, every row of the ledger."""
        with self._db() as db:
            return dict(db.execute("SELECT key, output FROM ledger").fetchall())

    def runs(self) -> dict[str, list[int]]:
        """Call id -> the attempt numbers its effect ran with, in order."""
        found: dict[str, list[int]] = {}
        with self._db() as db:
            for call_id, attempt in db.execute("SELECT call_id, attempt FROM effects ORDER BY n"):
                found.setdefault(call_id, []).append(attempt)
        return found


def make_tools(ledger: Ledger) -> list[Any]:
    """The three tools (see the module), writing to ``ledger``."""

    def found(ctx: ToolContext) -> Any:
        output = ledger.lookup(ctx.idempotency_key)
        return NotRun if output is None else output

    @tool(reconcile=found)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Charge the customer."""
        return ledger.effect("pay", ctx, f"paid {amount} ({ctx.call_id})")

    @tool(idempotent=True)
    def ship(item: str, ctx: ToolContext) -> str:
        """Ship an item."""
        return ledger.effect("ship", ctx, f"shipped {item} ({ctx.call_id})", upsert=True)

    @tool
    def notify(text: str, ctx: ToolContext) -> str:
        """Tell the customer."""
        return ledger.effect("notify", ctx, f"told {text!r} ({ctx.call_id})")

    return [pay, ship, notify]


def ledger_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
    """The model: the scripted reply for the number of replies the State holds (the answer
    again, asked again after its reply was saved and the run's stop was not)."""
    return SCRIPT[min(sum(1 for m in messages if m["role"] == "assistant"), len(SCRIPT) - 1)]


class HookedAgent(Agent):
    """The Agent, with the fault hook around each save."""

    def __init__(self, store: Store, ledger: Ledger) -> None:
        super().__init__(ledger_model, tools=make_tools(ledger), system=SYSTEM, name="shop", store=store)
        self.hook = ledger.hook

    async def _save(self, state: State, keeper: LeaseKeeper | None) -> None:
        self.hook.at("save", "before")
        await super()._save(state, keeper)
        self.hook.at("save", "after")


def run_once(store: Store, state_id: str, ledger: Ledger) -> State:
    """One process's turn: load the State (or start it, if no save of it landed) and run it,
    unless it is finished (killed after its last save)."""
    try:
        state = store.load(state_id)
    except LookupError:
        state = State(TASK, id=state_id)
    if not state.finished:
        HookedAgent(store, ledger).run(state)
    return state


@dataclass
class Verdict:
    """What :func:`check` found, for the harness's figures."""

    reconciled: int = 0  # results recorded from a reconcile
    resumed: Counter[str] = field(default_factory=Counter)  # tool_resume entries, by ``by``
    unknown: int = 0  # plain calls reported "may or may not have run"
    reruns: int = 0  # effects run again (idempotent ones: allowed, absorbed by the ledger)


def check(state: State, ledger: Ledger) -> Verdict:
    """Assert the exactly-once promise on a finished State and its ledger (see the module)."""
    assert state.finished and state.answer == "Done.", state.history[-3:]
    calls = {
        c["id"]: c for e in state.history if e["kind"] == "model_reply" for c in e.get("tool_calls") or ()
    }
    assert sorted(calls) == ["c1", "c2", "c3", "c4"]
    results: dict[str, list[Mapping[str, Any]]] = {}
    verdict = Verdict()
    for e in state.history:
        if e["kind"] == "tool_result":
            results.setdefault(e["call_id"], []).append(e)
            verdict.reconciled += bool(e.get("reconciled"))
        elif e["kind"] == "tool_resume":
            verdict.resumed[e["by"]] += 1
    rows, runs = ledger.rows(), ledger.runs()
    keys = {cid: idempotency_key(state.id, state.incarnation, cid) for cid in calls}
    assert set(rows) <= set(keys.values()), "the ledger holds an effect of no call of the run"
    for cid, call in calls.items():
        assert len(results.get(cid, [])) == 1, f"{cid} has results {results.get(cid)}"
        result = results[cid][0]
        attempts = runs.get(cid, [])
        assert attempts == sorted(set(attempts)), f"{cid} ran with attempts {attempts}"
        verdict.reruns += max(len(attempts) - 1, 0)
        if call["name"] in ("pay", "ship"):
            # Exactly once in the ledger, and the history says what the ledger says.
            assert keys[cid] in rows, f"{call['name']} {cid} is not in the ledger"
            assert (result["outcome"], result["is_error"]) == ("done", False), result
            assert result["output"] == rows[keys[cid]], (result, rows[keys[cid]])
            if call["name"] == "pay":
                assert len(attempts) == 1, f"pay {cid} ran {len(attempts)} times"
        else:
            # Never run twice; in doubt, said so.
            assert len(attempts) <= 1, f"notify {cid} ran {len(attempts)} times"
            if result["outcome"] == "unknown":
                assert result["output"] == INTERRUPTED_TOOL and result["is_error"] is True
                verdict.unknown += 1
            else:
                assert result["outcome"] == "done" and attempts and result["output"] == rows[keys[cid]]
    return verdict


@dataclass(frozen=True)
class StoreSpec:
    """Where a store is, as a child process opens it: ``kind`` and the arguments."""

    kind: str  # file | sqlite | postgres | redis
    where: str  # folder, file, DSN or URL
    namespace: str = ""  # schema or key prefix of the server stores

    def open(self) -> Store:
        from statekeep import FileStore
        from statekeep.stores import PostgresStore, RedisStore, SQLiteStore

        if self.kind == "file":
            return FileStore(self.where)
        if self.kind == "sqlite":
            return SQLiteStore(self.where)
        if self.kind == "postgres":
            return PostgresStore(self.where, schema=self.namespace)
        return RedisStore(self.where, prefix=self.namespace)


class ForkServer:
    """tests/support/children/ledger_child.py, started once: each :meth:`run` forks a child
    of it that runs one job (see that module) and says how it ended."""

    TIMEOUT = 120.0  # a watchdog against a hung child, never reached when things work

    def __init__(self, stderr: Path) -> None:
        from tests.support import REPO

        self.stderr_path = stderr
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.children.ledger_child"],
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def run(self, spec: StoreSpec, state_id: str, ledger: Path, fault: Fault | None = None,
            kill_after: float | None = None) -> dict[str, Any]:  # fmt: skip
        """Run one job in a new child; ``{"signal": 9, ...}`` when it was killed."""
        job = {
            "store": {"kind": spec.kind, "where": spec.where, "namespace": spec.namespace},
            "state_id": state_id,
            "ledger": str(ledger),
            "fault": fault,
            "kill_after": kill_after,
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=self.TIMEOUT)
        except queue.Empty:
            line = ""
        if not line:
            self.proc.kill()
            raise AssertionError(f"the fork server gave no answer; its stderr:\n{self.errors()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def errors(self) -> str:
        return self.stderr_path.read_text()[-4000:]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=self.TIMEOUT)
