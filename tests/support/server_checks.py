"""Test bodies that the PostgreSQL and Redis tests share: writers in several processes, a
secret kept out of failures, writing on through a server's outage."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.support import REPO
from tests.support.children.server_writer import open_store_in
from tests.support.serverprocs import Server


def run_writers(
    kind: str, where: str, namespace: str, states: list[str], *, workers: int, writes: int, pad: int = 0
) -> int:
    """Run ``workers`` writer processes that each append ``writes`` entries to every State
    (read, then append at the seq read, again on StateConflictError), then check every
    State: seqs dense from 0, each (worker, i) exactly once, each worker's in order.
    The States must exist. Returns how many conflicts the writers met in all."""
    procs = [
        subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "tests.support.children.server_writer",
                    "writer",
                    "--kind",
                    kind,
                    "--where",
                    where,
                ),
                *("--namespace", namespace, "--name", f"w{n}", "--writes", str(writes), "--pad", str(pad)),
                *states,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for n in range(workers)
    ]
    conflicts = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"writer failed:\n{err.decode(errors='replace')}"
        conflicts += json.loads(out.decode().strip().splitlines()[-1])["conflicts"]
    store = open_store_in(kind, where, namespace)
    try:
        for sid in states:
            record = store.read(sid)
            assert record is not None, sid
            assert [e["seq"] for e in record.entries] == list(range(workers * writes)), sid
            seen = [(e["worker"], e["i"]) for e in record.entries]
            assert sorted(seen) == sorted((f"w{n}", i) for n in range(workers) for i in range(writes)), sid
            for n in range(workers):
                mine = [i for w, i in seen if w == f"w{n}"]
                assert mine == sorted(mine), (sid, n)
            assert record.snapshot is not None and record.snapshot["seq"] == workers * writes - 1
    finally:
        store.close()
    return conflicts


def fail_without_secret(stores: list[Any], secret: str) -> None:
    """Each of ``stores`` (meant to fail: wrong password, nobody there, ...) hides ``secret``
    in its repr and fails its first read without it in any exception of the chain. Closes them."""
    for bad in stores:
        try:
            assert secret not in repr(bad)
            with pytest.raises(Exception) as info:
                bad.read("a")
            chain: list[str] = []
            exc: BaseException | None = info.value
            while exc is not None:
                chain.append(f"{type(exc).__name__}: {exc} {exc.args!r}")
                exc = exc.__cause__ or exc.__context__
            assert not any(secret in text for text in chain), chain
        finally:
            bad.close()


async def stream_through_outage(
    make_store: Any, server: Server, secret: str, *, states: int = 4, pad: int = 64 * 1024
) -> dict[str, int]:
    """Write to several States while ``server`` is killed with SIGKILL and restarted.

    Each writer resends its write after a ConnectionError until it is acknowledged.
    Before resending, it reads the State: the write whose outcome was unknown must be
    there whole or not at all. At the end a fresh store must hold every acknowledged
    write, dense, each exactly once. Returns counts of what happened."""
    store = make_store()
    ids = [f"s{n}" for n in range(states)]
    for sid in ids:
        await store.awrite(sid, [], {"seq": -1}, create=True)
    acked = {sid: 0 for sid in ids}
    counts = {"errors": 0, "whole": 0, "absent": 0}
    stop = asyncio.Event()

    def entry(sid: str, seq: int) -> dict[str, Any]:
        return {"seq": seq, "state": sid, "pad": f"{sid}:{seq}:" + "y" * pad}

    async def writer(sid: str) -> None:
        seq, unknown = 0, False
        while not stop.is_set():
            try:
                if unknown:
                    record = await store.aread(sid)
                    assert record is not None
                    n = len(record.entries)
                    assert n in (seq, seq + 1), (sid, seq, n)
                    if n == seq + 1:
                        assert record.entries[seq] == entry(sid, seq)
                    counts["whole" if n == seq + 1 else "absent"] += 1
                    unknown = False
                await store.awrite(sid, [entry(sid, seq)], {"seq": seq})
            except ConnectionError as exc:
                assert secret not in str(exc) and secret not in repr(exc.__cause__)
                counts["errors"] += 1
                unknown = True
                await asyncio.sleep(0.02)
                continue
            seq += 1
            acked[sid] = seq

    async def wait_acks(more: int) -> None:
        target = sum(acked.values()) + more
        deadline = time.monotonic() + 120
        while sum(acked.values()) < target:
            for task in tasks:
                if task.done():
                    task.result()  # a writer's failed check
            assert time.monotonic() < deadline, f"writes did not go on: {acked} {counts}"
            await asyncio.sleep(0.01)

    tasks = [asyncio.create_task(writer(sid)) for sid in ids]
    try:
        await wait_acks(40)
        await asyncio.to_thread(server.kill)
        errors = counts["errors"]
        deadline = time.monotonic() + 60
        while counts["errors"] == errors:  # writes fail while the server is down
            assert time.monotonic() < deadline, "no write failed while the server was down"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.start)
        await wait_acks(40)  # the same store goes on after the outage
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    await store.aclose()

    fresh = make_store()
    try:
        for sid in ids:
            record = await fresh.aread(sid)
            assert record is not None
            assert record.entries == [entry(sid, seq) for seq in range(acked[sid])], sid
            assert record.snapshot == {"seq": acked[sid] - 1}
        await fresh.awrite(ids[0], [entry(ids[0], acked[ids[0]])], None)  # and it goes on
    finally:
        await fresh.aclose()
    return {**counts, "acked": sum(acked.values())}
