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
