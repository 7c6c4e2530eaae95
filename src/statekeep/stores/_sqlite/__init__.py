"""SQLiteStore: every State in one SQLite database file (stdlib ``sqlite3``, no server).

Schema (version 4; the version sits in ``schema_version`` and migrations run on open)::

    states(namespace, id, next_seq, task, created_at, updated_at, turn, stopped_by, finished,
           status, agent, parent, expires_at, labels JSON, forked_from JSON, unlisted,
           snapshot JSON text or NULL, incarnation; PRIMARY KEY (namespace, id))
    entries(namespace, state_id -> states, seq, data JSON text; PRIMARY KEY (namespace, state_id, seq))
    labels(namespace, state_id -> states, key, value, updated_at; PRIMARY KEY (namespace, state_id, key))
    leases(namespace, state_id, owner, token, expires_at, ttl_us; PRIMARY KEY (namespace, state_id))
    an index per listing filter: (namespace, <its columns>, updated_at DESC, id)

A State's key is (namespace, id): namespaces share the file, and agent memory lives in
namespaces of its own. The listing columns are filled from the snapshot when it is
written (labels also as rows of ``labels``, with the State's updated_at, so a label filter
pages through its own index). A snapshot that lacks a listing key leaves them NULL and
keeps the reason in ``unlisted``: ``list()`` leaves that State out and warns with the
reason, as every store does. Version 1 files (no namespace) are rebuilt in place, in one
transaction, as the default namespace; version 2 files gain the ``leases`` table.

A State's lease row is not tied to its ``states`` row: it stays after a release and after
the State is deleted or collected, so its token only grows. Every write and delete checks
it (the fence) in the transaction that makes the change, and lease changes are write
transactions of their own, so SQLite's write lock orders them all, across processes.

``sqlite3`` calls run in worker threads of the owner loop; only a lone write that need not
wait, a read of at most 100 entries and a listing page of at most 100 rows run on the loop
itself, with a busy timeout of 0 (a busy database sends them to a worker thread), since a
thread hop costs as much as they do. One writer connection per process commits batches of
writes (group commit); it too never waits inside SQLite: a write finding another process's
lock retries in its worker thread, with backoff. Reads use a small pool of reader
connections. In WAL mode readers never wait for the writer.

What each operation asks of SQLite is counted in tests/stores/sqlite/test_sqlite_statements.py: a write
is BEGIN IMMEDIATE, one query for its States, their leases and the schema version, its
entries, its snapshot, COMMIT; a read and a listing page are one statement each (the
schema version read with the rows).

The modules, one job each:

- ``_store``: the SQLiteStore class: the four operations, the group-commit function,
  the retry while the database is locked;
- ``_batch``: one batch of writes, deletes and forks applied in one transaction, each
  fenced by its State's lease; a gc chunk;
- ``_known``: what a batch is checked against, read in one query under the write lock;
- ``_reads``: a State's read in one statement (on the loop when short);
- ``_leases``: lease rows changed in a transaction of their own; rekey's in-place reseal;
- ``_schema``: the database file and its schema version, made, migrated and checked;
- ``_connections``: opening connections, and each store's connections per process
  (fork and closing);
- ``_listing``: a listing query as SQL, and one page read;
- ``_rows``: between rows and values (listing columns, SavedState, entries);
- ``_sql``: the SQL text.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
