"""PostgresStore: every State in two PostgreSQL tables, through asyncpg (``statekeep[postgres]``).

Schema (version 4, in the schema ``schema``, every name prefixed with ``table_prefix``)::

    states(ns, id; PRIMARY KEY (ns, id), next_seq, snapshot JSON text or NULL,
           task, created_at, updated_at, turn, stopped_by, finished, status,   -- the listing,
           agent, parent, labels jsonb, forked_from, unlisted,                 -- from the snapshot
           expires_at, written_at)            -- the effective expiry, by the server's clock
    entries(ns, state_id, seq, data JSON text; PRIMARY KEY (ns, state_id, seq))
    labels(ns, state_id, key, value, updated_at)   -- one row per label of a listed State
    leases(ns, state_id, owner, token, expires_at, ttl)   -- one per State, kept after its delete
    indexes (ns, [agent | parent | status,] updated_at DESC, id), labels (ns, key, value,
            updated_at DESC, state_id), (ns, expires_at)   -- a page is one short index scan
    schema_version(version)                   -- migrations run on first use, in one transaction
    write, delete, fork, gc                   -- PL/pgSQL, one statement each
    acquire, renew, release, reseal           -- leases, by the server's clock; rekey

Version 1 tables (statekeep before namespaces) are migrated in place on first use: their
States become the ``default`` namespace; version 2 tables gain the leases (version 3), and
version 3's write function the write's preconditions (version 4). A
namespace is the ``ns`` column: stores of one schema and prefix in different namespaces
share the tables and never see each other's rows.

JSON is kept as text, byte for byte as statekeep encoded it: ``jsonb`` would reorder keys
and turn floats such as ``1e20`` into integers.

A write is one call of the ``write`` function: it locks the State's row (``SELECT ...
FOR UPDATE``), which serialises writers to one State across processes and hosts, applies
the seq rules and inserts the new entries. Writes that wait at the same moment in one
process, to different States, are sent together (group commit): one transaction, one
round trip, one WAL flush, each write with its own outcome. In such a batch a State
whose row another transaction holds is skipped (``SKIP LOCKED``) and written alone
afterwards, so a batch never waits for anyone's lock.

Skipping entries the store already has: the function compares the overlapping stored
entries with the sent ones byte for byte. When they differ, it writes nothing and returns
the stored ones; statekeep decodes and compares them (a real difference is a
StateConflictError) and sends the write again with the stored text it found equal, which
the function accepts only if the State still holds exactly that text.

The listing columns are filled from the snapshot on write, with
:meth:`SavedState.from_snapshot`; a snapshot that lacks a listing key keeps the reason in
``unlisted``, and ``list()`` leaves that State out with a warning (on a walk's first
page), as every store does.

A write, delete or fork also applies the State's lease (the fence) in its transaction,
once it holds the State's row; an acquire takes that row first, so no takeover can land
between the check and the commit (see :mod:`._schema_leases`).

The package: :mod:`._store` (the class and its operations), :mod:`._lifecycle` (listings,
expiry, gc, fork, namespaces), :mod:`._leasing` (leases and reseal, client side),
:mod:`._listing` (listing columns and page statements), :mod:`._sql` (the statements it
runs), :mod:`._schema`, :mod:`._schema_v2`, :mod:`._schema_v3`, :mod:`._schema_v4` and
:mod:`._schema_leases` (the tables and functions, as migrations), :mod:`._migrate` (running them), :mod:`._pool` (the pool of
each process), :mod:`._dsn` (where the server is, without passwords; the store's DSN
options).
"""

from ._dsn import redact_dsn
from ._schema import SCHEMA_VERSION
from ._sql import quote_identifier
from ._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore", "quote_identifier", "redact_dsn"]
