"""The PostgresStore tests' store: one on a fresh schema of the throwaway server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import PostgresServer, unique_name

pytest.importorskip("asyncpg")

from statekeep.stores import PostgresStore


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_server.dsn, schema=unique_name("sk"))
    yield store
    store.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The store contract through PgBouncer (test_pgbouncer_contract.py) runs whole under
    ``./dev test --soak`` (STATEKEEP_SOAK=1); in the normal run, each of its tests once."""
    from tests.stores.postgres.test_pgbouncer_contract import ci_subset

    kept, dropped = ci_subset(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
