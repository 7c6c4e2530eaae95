"""A writer process for the Postgres failover tests (run by
:func:`tests.stores.postgres.test_postgres_failover.run_through_failover`):
``python -m tests.support.children.failover_writer --where DSN --schema S --name w0 --writes N``.

It makes its own State (``own-<name>``) and then, ``--writes`` times: appends two entries to
it (seqs ``2i`` and ``2i+1``: a write half applied would show) and appends one entry to the
State ``shared`` all writers append to (read, then append at the seq read, again on
StateConflictError). After each write it prints ``ack <i>`` (flushed): the write was
acknowledged. A write whose connection is lost is resent by the store itself
(``failover_timeout``); any error ends the process with its traceback."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def own_entries(name: str, i: int) -> list[dict[str, Any]]:
    """The two entries of writer ``name``'s write ``i`` to its own State."""
    return [{"seq": 2 * i + part, "worker": name, "i": i, "part": part} for part in (0, 1)]


async def _writer(args: argparse.Namespace) -> dict[str, Any]:
    from statekeep import StateConflictError
    from statekeep.stores import PostgresStore

    # A loaded CI machine may take long over the promotion: more than the 30 s default.
    store = PostgresStore(args.where, schema=args.schema, failover_timeout=120)
    conflicts = 0
    own = f"own-{args.name}"
    try:
        await store.awrite(own, [], {"i": -1}, create=True)
        print("ack -1", flush=True)
        for i in range(args.writes):
            await store.awrite(own, own_entries(args.name, i), {"i": i})
            while True:
                record = await store.aread("shared")
                assert record is not None
                seq = len(record.entries)
                try:
                    await store.awrite("shared", [{"seq": seq, "worker": args.name, "i": i}], {"seq": seq})
                    break
                except StateConflictError:
                    conflicts += 1
            print(f"ack {i}", flush=True)
    finally:
        await store.aclose()
    return {"worker": args.name, "conflicts": conflicts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.children.failover_writer")
    parser.add_argument("--where", required=True, help="a (multi-host) DSN")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--writes", type=int, required=True)
    args = parser.parse_args(argv)
    result = asyncio.run(_writer(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
