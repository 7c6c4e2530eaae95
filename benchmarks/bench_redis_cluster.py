"""RedisStore on a Redis Cluster (3 masters, a replica each) against one Redis, 8 writer processes.

Run from the repository::

    .venv/bin/python benchmarks/bench_redis_cluster.py            # the full run (a minute or so)
    .venv/bin/python benchmarks/bench_redis_cluster.py --quick    # a small run, for the smoke test
    .venv/bin/python benchmarks/bench_redis_cluster.py --json out.json

It starts its own throwaway servers (tests/support/servers.py), every node with ``appendonly
yes`` and ``appendfsync always``: one Redis, and a cluster of 3 masters with one replica each,
all on this machine. 8 writer processes each write its own States in its own namespace
(``w0`` .. ``w7``: the namespaces' hash tags spread them over the cluster's masters); a turn
is one write of 3 entries (800 B, 200 B, 2 KB of text) and the snapshot, durable on return.

Measures (each repetition runs the three side by side, one after another):

- one Redis: the 8 writers' turns/s together (the baseline);
- the cluster: the same against one Redis (the ratio: > 1 means the shards' work in parallel
  paid for the cluster's extra hops);
- the cluster with ``wait_replicas=1``: each write also waits for a replica's acknowledgement
  (``WAIT``), against the cluster without it.

- failover: a master SIGKILLed -> the first write to a namespace it held returns (the store
  resending until the cluster promoted the replica; ``cluster-node-timeout`` 1 s here).

On one machine the shards share its cores and its disk, so the cluster's figure here is a floor:
on separate machines each shard has its own.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import servers  # noqa: E402

import common  # noqa: E402
from common import make_entry, make_snapshot  # noqa: E402

WRITERS = 8


@dataclass
class Config:
    writers: int = WRITERS
    states: int = 2  # per writer
    turns: int = 60  # per State
    reps: int = 3

    def describe(self) -> str:
        return (
            f"{self.writers} writer processes x {self.states} States x {self.turns} turns, a namespace per "
            f"writer; 3 entries/turn (800/200/2048 B text) + snapshot, 1 durable write/turn; "
            f"median of {self.reps} reps"
        )


QUICK = Config(writers=WRITERS, states=1, turns=5, reps=1)
FULL = Config()


def child(url: str, prefix: str, namespace: str, states: int, turns: int, wait: int) -> None:
    """One writer process: its States' turns, one write each; prints its first and last
    write's time (time.monotonic, the same clock in every process) and its writes."""
    from statekeep.stores import RedisStore

    store = RedisStore(url, prefix=prefix, namespace=namespace, wait_replicas=wait)
    began = time.monotonic()
    for turn in range(turns):
        for s in range(states):
            entries = [make_entry(turn * 3 + k) for k in range(3)]
            store.write(f"s{s}", entries, make_snapshot(s, turn), create=turn == 0)
    ended = time.monotonic()
    store.close()
    print(json.dumps({"began": began, "ended": ended, "writes": turns * states}))


def run(url: str, cfg: Config, wait: int, tag: str) -> float:
    """The writers' turns/s together, from the first write to the last."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                url,
                f"b{tag}:",
                f"w{n}",
                str(cfg.states),
                str(cfg.turns),
                str(wait),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for n in range(cfg.writers)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"a writer failed:\n{err.decode(errors='replace')[-3000:]}")
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    span = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return sum(r["writes"] for r in results) / span


def failover(cluster: servers.RedisCluster) -> float:
    """Seconds from SIGKILL of the master of a namespace to the first write there returning
    (the store resends, within its failover_timeout, until the cluster promoted the replica)."""
    from statekeep.stores import RedisStore

    victim = cluster.node_of_slot(cluster.keyslot("bf:{failover}:x"))
    store = RedisStore(cluster.url, prefix="bf:", namespace="failover")
    try:
        store.write("s", [make_entry(0)], make_snapshot(0, 0), create=True)
        victim.kill()
        began = time.monotonic()
        store.write("s", [make_entry(1)], make_snapshot(0, 1))
        return time.monotonic() - began
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    args, cfg, scratch, began = common.start(
        "Redis Cluster vs one Redis, 8 writer processes", __doc__, argv, QUICK, FULL
    )
    one = servers.start_redis()
    cluster = servers.start_redis_cluster()
    samples: dict[str, list[float]] = {"one": [], "cluster": [], "wait": []}
    try:
        for rep in range(cfg.reps):
            samples["one"].append(run(one.url, cfg, 0, f"{rep}o"))
            samples["cluster"].append(run(cluster.url, cfg, 0, f"{rep}c"))
            samples["wait"].append(run(cluster.url, cfg, 1, f"{rep}w"))
        samples["failover"] = [failover(cluster)]
    finally:
        cluster.remove()
        one.remove()
    med = common.Medians(samples)
    ratio = [c / o for c, o in zip(samples["cluster"], samples["one"], strict=True)]
    waited = [w / c for w, c in zip(samples["wait"], samples["cluster"], strict=True)]
    rows = [
        med.row(f"{cfg.writers} writers, one Redis", "one", "turns/s"),
        med.ratio_row(
            f"{cfg.writers} writers, cluster of 3 masters (+1 replica each)",
            "cluster",
            "turns/s",
            "one",
            "one Redis",
        ),
        med.ratio_row(
            f"{cfg.writers} writers, cluster, wait_replicas=1", "wait", "turns/s", "cluster", "cluster"
        ),
    ]
    rows.append(med.row("failover: a master SIGKILLed -> the first write there returns", "failover", "s"))
    rows[1].ratio, rows[2].ratio = statistics.median(ratio), statistics.median(waited)
    common.print_table(rows)
    extra: dict[str, Any] = {"note": "all nodes on one machine: the shards share its cores and disk"}
    common.write_json_if_asked(args, cfg, scratch, time.perf_counter() - began, rows, samples, extra)
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, prefix, namespace, states, turns, wait = sys.argv[2:8]
        child(url, prefix, namespace, int(states), int(turns), int(wait))
        sys.exit(0)
    sys.exit(main())
