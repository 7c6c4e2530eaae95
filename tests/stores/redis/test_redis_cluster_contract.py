"""The kit's store contract (statekeep.testing.StoreContract) on a Redis Cluster of 3 masters
with a replica each (tests/support/servers.py). Every test gets a key prefix of its own; its
namespaces hash to slots over the masters.

The whole contract (sync and async API, trio twins, about 1,000 tests: 5 minutes on 2 cores) runs under ``./dev test --soak`` (STATEKEEP_SOAK=1). The normal suite runs each
contract test once, through the async API on asyncio, except the model-based machine: every
behaviour of the contract, at a quarter of the cost (the sync API and trio run the same store
code; the single-server Redis contract covers them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from statekeep import Store
from tests.store.test_conformance import BuiltinContract
from tests.support import servers
from tests.support.stores import namespace

pytest.importorskip("redis.asyncio")

SOAK = os.environ.get("STATEKEEP_SOAK") == "1"


class TestRedisClusterStore(BuiltinContract):
    supports_leases = supports_protection = True
    model_examples, model_steps = 5, 15

    server_clock = True

    @pytest.fixture(autouse=True)
    def _ci_subset(self, request: pytest.FixtureRequest) -> Iterator[None]:
        name = request.node.name
        if name.startswith("test_blobs_sealed_and_named_per_namespace"):  # counts blobs across namespaces
            pytest.skip("on a cluster each namespace has its own blobs: test_redis_cluster.py")
        if not SOAK and ("_under_trio" in name or "[sync" in name or "model" in name):
            pytest.skip("the whole contract on a cluster runs under STATEKEEP_SOAK=1 (./dev test --soak)")
        yield

    def make_store(self, tmp_path: Path) -> Store:
        return servers.redis_cluster_store(prefix=namespace(tmp_path) + ":")

    def make_store_with(self, tmp_path: Path, **options: Any) -> Store:
        return servers.redis_cluster_store(prefix=namespace(tmp_path) + ":", **options)

    async def plant_snapshot(self, store: Store, state_id: str, raw: bytes) -> None:
        pytest.skip("planting a snapshot by hand is tested on one Redis server")

    async def server_now(self, store: Store) -> datetime:
        from redis.asyncio.cluster import RedisCluster

        cluster = servers.shared_redis_cluster()
        client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, password=cluster.password)
        try:
            seconds, micros = await client.time()
        finally:
            await client.aclose()
        return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
