"""A writer for the multi-process tests of the server stores (run by
:func:`tests.support.server_checks.run_writers`):
``python -m tests.support.children.server_writer writer --kind postgres|redis ...``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def open_store_in(kind: str, where: str, namespace: str) -> Any:
    if kind == "postgres":
        from statekeep.stores import PostgresStore

        return PostgresStore(where, schema=namespace)
    from statekeep.stores import RedisStore

    return RedisStore(where, prefix=namespace)


async def _writer(args: argparse.Namespace) -> dict[str, Any]:
    """Append ``args.writes`` entries to each State, each one read-then-append, retried on
    StateConflictError; report how many conflicts it met."""
    from statekeep import StateConflictError

    store = open_store_in(args.kind, args.where, args.namespace)
    conflicts = 0

    async def one_state(sid: str) -> None:
        nonlocal conflicts
        for i in range(args.writes):
            entry = {"worker": args.name, "i": i, "pad": "x" * args.pad}
            while True:
                record = await store.aread(sid)
                assert record is not None
                seq = len(record.entries)
                snapshot = {"last": args.name, "seq": seq}
                try:
                    await store.awrite(sid, [{"seq": seq, **entry}], snapshot)
                    break
                except StateConflictError:
                    conflicts += 1

    try:
        await asyncio.gather(*(one_state(sid) for sid in args.states))
    finally:
        await store.aclose()
    return {"worker": args.name, "conflicts": conflicts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.children.server_writer")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("writer", help="append to States from this process (multi-process tests)")
    w.add_argument("--kind", choices=["postgres", "redis"], required=True)
    w.add_argument("--where", required=True, help="DSN or URL")
    w.add_argument("--namespace", required=True, help="schema or key prefix")
    w.add_argument("--name", required=True)
    w.add_argument("--writes", type=int, required=True)
    w.add_argument("--pad", type=int, default=0)
    w.add_argument("states", nargs="+")
    args = parser.parse_args(argv)
    result = asyncio.run(_writer(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
