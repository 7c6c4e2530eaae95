"""SQLiteStore: every State in one SQLite database file (stdlib ``sqlite3``, no server).

Schema (version 1; the version sits in ``schema_version`` and migrations run on open)::

    states(id PRIMARY KEY, next_seq, task, created_at, updated_at, turn, stopped_by,
           finished, unlisted, snapshot JSON text or NULL)
    entries(state_id -> states.id, seq, data JSON text; PRIMARY KEY (state_id, seq))
    index states_listing(updated_at DESC, id, <the other listing columns>)
                                    -- list() is one ordered scan of this index alone

The listing columns are filled from the snapshot when it is written. A snapshot that
lacks a listing key leaves them NULL and keeps the reason in ``unlisted``: ``list()``
leaves that State out and warns with the reason, as every store does.

Every ``sqlite3`` call runs in a worker thread of the owner loop, never on the loop. One
writer connection per process commits batches of writes (group commit); reads use a
small pool of reader connections. In WAL mode readers never wait for the writer, and
writers in other processes wait their turn on SQLite's own file locks.

The modules, one job each:

- ``_store``: the SQLiteStore class: the four operations, the group-commit function,
  the retry while the database is locked;
- ``_batch``: one batch of writes and deletes applied in one transaction;
- ``_schema``: the database file and its schema version, made, migrated and checked;
- ``_connections``: opening connections, and each store's connections per process
  (fork and closing);
- ``_rows``: between rows and values (listing columns, SavedState, entries);
- ``_sql``: the SQL text.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
