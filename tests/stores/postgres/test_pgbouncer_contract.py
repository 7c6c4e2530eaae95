"""The kit's store contract (statekeep.testing.StoreContract) for a PostgresStore behind PgBouncer
in transaction mode (``pooler="transaction"``), through the sync and the async API: writes and
group commit, reads, listings, leases, gc, fork, namespaces, memory, rekey, trim, blobs and the
migrations of a fresh schema, each transaction on whichever of the pooler's server connections
is free. The shared PgBouncer (tests/support/servers.py) keeps PGBOUNCER_POOL_SIZE server
connections, fewer than the client connections the tests open (several stores at once, each a
pool of up to 10). The normal run takes each test once (see :func:`ci_subset`); ``./dev test
--soak`` all of them."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from statekeep import Store
from tests.store.test_conformance import BuiltinContract
from tests.support import servers
from tests.support.stores import namespace

pytest.importorskip("asyncpg")

MODULE = "tests/stores/postgres/test_pgbouncer_contract.py"


class TestPostgresThroughPgBouncer(BuiltinContract):
    model_examples, model_steps = (15, 20) if os.environ.get("STATEKEEP_SOAK") == "1" else (5, 15)

    server_clock = True
    supports_leases = supports_protection = True

    def make_store(self, tmp_path: Path) -> Store:
        return servers.pgbouncer_store(schema=namespace(tmp_path))

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return servers.pgbouncer_store(schema=namespace(tmp_path), **options)

    async def server_now(self, store: Store) -> datetime:
        import asyncpg

        conn = await asyncpg.connect(servers.shared_pgbouncer().dsn, statement_cache_size=0)
        try:
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
        finally:
            await conn.close()
        return now.astimezone(UTC)


def ci_subset(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, dropped) of ``items``: outside the soak, of this module's tests each one once (its
    first parametrisation through the async API, else its first; not its trio twin), which
    still covers every feature of the contract (the test modules beside it run the same
    PostgresStore directly through every API); under STATEKEEP_SOAK=1, all of them."""
    if os.environ.get("STATEKEEP_SOAK") == "1":
        return items, []
    mine = [item for item in items if item.nodeid.startswith(f"{MODULE}::")]
    if not mine:
        return items, []
    chosen: dict[str, pytest.Item] = {}
    for item in mine:
        name = item.name.partition("[")[0]
        if name.endswith("_under_trio"):
            continue
        if name not in chosen or ("async" in item.name and "async" not in chosen[name].name):
            chosen[name] = item
    keep = set(map(id, chosen.values()))
    kept = [item for item in items if id(item) in keep or not item.nodeid.startswith(f"{MODULE}::")]
    dropped = [item for item in mine if id(item) not in keep]
    return kept, dropped
