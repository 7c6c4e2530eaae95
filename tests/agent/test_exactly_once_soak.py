"""The exactly-once soak: the crash harness of test_exactly_once_crash.py with random kills, at
least :data:`KILLS` per store (File, SQLite, Postgres, Redis: over 300 in all). Runs only under
``./dev test --soak`` (``STATEKEEP_SOAK=1``); ``STATEKEEP_SOAK_SEED`` replays a run's choices.

Each State is run in a chain of children until one finishes: each child is killed at a random
boundary of its own run (the fault hook: a save or a ledger effect, before or after; a resumed
run has fewer, and one past its end is not reached) or from outside at a random instant
(SIGKILL wherever it is: in a store write, a reconcile, the model), and the next child loads
the State and goes on, so kills land in resumed runs too (while they reconcile or run a call
again). Every finished State is checked against its ledger (:func:`tests.support.ledger.check`).
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.agent.test_exactly_once_crash import STORES, store_spec
from tests.support.ledger import ForkServer, Ledger, all_faults, check

KILLS = 80  # per store
MAX_RUNS = 40  # per State: a chain that never finishes is a failure
OUTSIDE = 0.4  # the share of kills sent from outside at a random instant
WITHIN = 0.15  # seconds after the fork that an outside kill picks from

pytestmark = pytest.mark.skipif(
    os.environ.get("STATEKEEP_SOAK") != "1", reason="the soak runs under ./dev test --soak"
)


@pytest.mark.parametrize("kind", STORES)
def test_random_kills_never_run_a_call_twice(kind: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("STATEKEEP_SOAK_SEED") or random.randrange(1 << 32))
    rng = random.Random(f"{seed}-{kind}")
    spec = store_spec(kind, tmp_path)
    store = spec.open()
    server = ForkServer(tmp_path / "children.stderr")
    figures: Counter[str] = Counter()
    faults = all_faults()
    try:
        while figures["kills"] < KILLS:
            sid, ledger_path = f"soak-{figures['states']}", tmp_path / f"ledger-{figures['states']}.db"
            for _ in range(MAX_RUNS):
                if rng.random() < OUTSIDE:
                    how, got = (
                        "outside",
                        server.run(spec, sid, ledger_path, kill_after=rng.uniform(0, WITHIN)),
                    )
                else:
                    how, got = "hook", server.run(spec, sid, ledger_path, fault=rng.choice(faults))
                figures["runs"] += 1
                if got["signal"] == signal.SIGKILL:
                    figures["kills"] += 1
                    figures[f"kills by {how}"] += 1
                    continue
                assert got["code"] == 0, f"seed {seed}: {sid} ended with {got}\n{server.errors()}"
                break
            else:
                pytest.fail(f"seed {seed}: {sid} did not finish in {MAX_RUNS} runs")
            state = store.load(sid)
            verdict = check(state, Ledger(ledger_path))
            figures["states"] += 1
            figures["reconciled results"] += verdict.reconciled
            figures["reported in doubt"] += verdict.unknown
            figures["idempotent re-runs"] += verdict.reruns
            for by, n in verdict.resumed.items():
                figures[f"tool_resume by {by}"] += n
    finally:
        server.close()
        store.close()
    print(f"\nsoak {kind} (seed {seed}): " + ", ".join(f"{k} {v}" for k, v in sorted(figures.items())))
