"""The kit's store contract (statekeep.testing.StoreContract) for a PostgresStore behind PgBouncer
in transaction mode (``pooler="transaction"``), through the sync and the async API: writes and
group commit, reads, listings, leases, gc, fork, namespaces, memory, rekey, trim, blobs and the
migrations of a fresh schema, each transaction on whichever of the pooler's server connections
is free. The shared PgBouncer (tests/support/servers.py) keeps PGBOUNCER_POOL_SIZE server
connections, fewer than the client connections the tests open (several stores at once, each a
pool of up to 10). The normal run takes some of each feature (CI_TESTS, each once); all of them:
``STATEKEEP_SOAK=1 ./dev test tests/stores/postgres/test_pgbouncer_contract.py`` (5 to 10 minutes
on 2 cores, 967 tests)."""

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
    model_examples, model_steps = (15, 20) if os.environ.get("STATEKEEP_SOAK") == "1" else (3, 15)

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


#: The contract's tests the normal run takes through PgBouncer: some of each feature (writes,
#: conflicts and group commit under concurrent writers, reads, listings, leases, expiry and gc,
#: fork, namespaces, memory, protection and rekey, trim, blobs, lineage, steps, cancellation,
#: a new store on the same tables, the model). The whole contract runs under STATEKEEP_SOAK=1.
CI_TESTS = {
    "test_create_then_read_round_trips",
    "test_append_continues_history",
    "test_resending_stored_entries_is_harmless",
    "test_different_entry_for_taken_seq_is_a_conflict",
    "test_expect_next_refuses_a_stale_writer_and_writes_nothing",
    "test_save_of_a_stale_state_is_a_conflict",
    "test_a_cancelled_asave_leaves_the_state_ready_to_save_again",
    "test_delete_removes_whole_state",
    "test_a_new_store_on_the_same_storage_sees_it_all",
    "test_read_since_returns_the_entries_from_that_seq",
    "test_read_since_below_the_base_reads_from_the_base",
    "test_list_newest_first_ties_by_id",
    "test_query_filters_alone_and_combined",
    "test_query_pages_concatenate_to_the_listing",
    "test_query_paging_while_states_are_written",
    "test_lease_acquire_fences_writes_without_it",
    "test_lease_renew_and_release_keep_the_token_growing",
    "test_lease_stale_after_expiry_and_takeover",
    "test_lease_gc_skips_a_leased_state",
    "test_expiry_an_expired_state_is_absent_everywhere",
    "test_expiry_gc_removes_expired_states_and_counts_them",
    "test_fork_copies_the_whole_history_by_default",
    "test_fork_at_seq_cuts_and_repairs_as_load_does",
    "test_namespace_states_and_listings_are_isolated",
    "test_namespace_gc_removes_only_its_own",
    "test_memory_put_get_with_revisions",
    "test_memory_items_prefix_and_pages",
    "test_protect_encryption_round_trips",
    "test_protect_rotation_and_missing_keys",
    "test_rekey_re_seals_a_trimmed_state_and_its_blobs",
    "test_trim_keeps_a_base_record_in_place_of_the_removed_entries",
    "test_a_trim_overtaken_by_another_stores_trim_keeps_the_state_loadable",
    "test_blobs_large_values_round_trip",
    "test_blobs_range_reads_resolve",
    "test_blobs_gc_beside_a_writer_loses_nothing",
    "test_blobs_a_fork_holds_the_values_and_keeps_them_from_gc",
    "test_lineage_delete_children_removes_the_tree",
    "test_a_step_runs_once_and_a_loaded_state_replays_its_result",
    "test_matches_the_model",
}


def ci_subset(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, dropped) of ``items``: outside the soak, of this module's tests those of CI_TESTS,
    each once (its first parametrisation through the async API, else its first; not its trio
    twin): the modules beside it run the same PostgresStore directly through every API. Under
    STATEKEEP_SOAK=1, all of them."""
    if os.environ.get("STATEKEEP_SOAK") == "1":
        return items, []
    mine = [item for item in items if item.nodeid.startswith(f"{MODULE}::")]
    chosen: dict[str, pytest.Item] = {}
    for item in mine:
        name = item.name.partition("[")[0]
        if name not in CI_TESTS:
            continue
        if name not in chosen or ("async" in item.name and "async" not in chosen[name].name):
            chosen[name] = item
    if not chosen:  # none of them selected (pytest -k): leave the selection as it is
        return items, []
    keep = set(map(id, chosen.values()))
    kept = [item for item in items if id(item) in keep or not item.nodeid.startswith(f"{MODULE}::")]
    dropped = [item for item in mine if id(item) not in keep]
    return kept, dropped
