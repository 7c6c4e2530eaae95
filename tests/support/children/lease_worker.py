"""A worker process the lease tests drive step by step: ``python -m tests.support.children.lease_worker``.

It reads one JSON command per line on stdin and answers each with one JSON line on stdout,
in order, so a test decides exactly what each process does and when (tests/support/workers_driver.py
starts and talks to it). On start it prints ``{"ready": PID}``.

Commands (``op`` plus arguments)::

    open           url, api ("sync" | "async")       open_store(url); one store per worker
    acquire        state, owner, ttl                 -> the lease
    renew          lease, ttl (or null)              -> the renewed lease
    release        lease
    current_lease  state                             -> the lease or null
    write          state, entries, snapshot, lease, create
    append         state, items, lease               read, then write ``items`` after the last
                                                     seq (snapshot {"n": count}) -> seqs written
    read           state                             -> {"entries", "snapshot"} or null
    delete         state, lease
    close

``lease`` is a lease as a reply gave it (a dict), or null for none. A reply is
``{"ok": true, "value": ...}`` or ``{"ok": false, "error": CLASS NAME, "message": ...}``:
an exception of the store is an answer, not a crash, so the test can assert which it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from statekeep import Lease, Store, open_store


def lease_to_json(lease: Any) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "state_id": lease.state_id,
        "owner": lease.owner,
        "token": lease.token,
        "expires_at": lease.expires_at.isoformat(),
        "ttl": lease.ttl.total_seconds(),
        "namespace": lease.namespace,
    }


def lease_from_json(data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    return Lease(
        state_id=data["state_id"],
        owner=data["owner"],
        token=data["token"],
        expires_at=datetime.fromisoformat(data["expires_at"]),
        ttl=timedelta(seconds=data["ttl"]),
        namespace=data["namespace"],
    )


class Worker:
    """The store this process holds and the commands it runs on it."""

    def __init__(self) -> None:
        self.store: Store | None = None
        self.api = "sync"
        self.loop = asyncio.new_event_loop()  # async commands all run on this one loop

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``store.name(...)`` through the API this worker was opened with."""
        assert self.store is not None, "open a store first"
        if self.api == "async":
            method: Callable[..., Awaitable[Any]] = getattr(self.store, "a" + name)
            return self.loop.run_until_complete(method(*args, **kwargs))
        return getattr(self.store, name)(*args, **kwargs)

    def run(self, command: dict[str, Any]) -> Any:
        op = command["op"]
        lease = lease_from_json(command.get("lease"))
        if op == "open":
            self.api = command.get("api", "sync")
            self.store = open_store(command["url"])
            return None
        if op == "acquire":
            return lease_to_json(self.call("acquire", command["state"], command["owner"], command["ttl"]))
        if op == "renew":
            return lease_to_json(self.call("renew", lease, command.get("ttl")))
        if op == "release":
            return self.call("release", lease)
        if op == "current_lease":
            return lease_to_json(self.call("current_lease", command["state"]))
        if op == "write":
            options = {"lease": lease} if lease is not None else {}
            self.call(
                "write",
                command["state"],
                command["entries"],
                command.get("snapshot"),
                create=command.get("create", False),
                **options,
            )
            return None
        if op == "append":
            return self.append(command["state"], command["items"], lease)
        if op == "read":
            record = self.call("read", command["state"])
            return None if record is None else {"entries": record.entries, "snapshot": record.snapshot}
        if op == "delete":
            options = {"lease": lease} if lease is not None else {}
            return self.call("delete", command["state"], **options)
        if op == "close":
            if self.store is not None:
                self.call("close")
            return None
        raise ValueError(f"unknown op {op!r}")

    def append(self, state: str, items: list[dict[str, Any]], lease: Any) -> list[int]:
        """Read the State, then write ``items`` right after its last entry: a write that
        nothing but the lease can refuse."""
        record = self.call("read", state)
        first = 0 if record is None else len(record.entries)
        seqs = list(range(first, first + len(items)))
        options = {"lease": lease} if lease is not None else {}
        ents = [{"seq": seq, **item} for seq, item in zip(seqs, items, strict=True)]
        self.call("write", state, ents, {"n": first + len(items)}, create=record is None, **options)
        return seqs


def main() -> int:
    worker = Worker()
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            reply: dict[str, Any] = {"ok": True, "value": worker.run(command)}
        except Exception as exc:  # the answer to the command, for the test to judge
            reply = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()
        if command["op"] == "close":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
