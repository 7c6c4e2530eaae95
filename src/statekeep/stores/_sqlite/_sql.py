"""The SQL text SQLiteStore runs: the schema's migration steps and every statement.

Only text here; the code that runs it is in the other modules of this package. JSON is
bound as bytes and stored as TEXT without a round trip through ``str`` (``CAST`` re-labels
UTF-8 bytes); reads ``CAST`` back to get bytes for orjson.
"""

from __future__ import annotations

from ..._store.expect import SEALED_KEY

# -- the schema ------------------------------------------------------------------------------

# Each step migrates from version i to i + 1; a step runs in the same transaction as the
# version update, so a crash mid-migration leaves the old version whole.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # The snapshot last: reading the columns before it never reads a large snapshot.
        """CREATE TABLE states (
            id TEXT PRIMARY KEY NOT NULL,
            next_seq INTEGER NOT NULL,
            task TEXT,
            created_at TEXT,
            updated_at TEXT,
            turn,  -- no type: an int beyond 64-bit signed is kept as exact text
            stopped_by TEXT,
            finished INTEGER,
            unlisted TEXT,
            snapshot TEXT
        )""",
        """CREATE TABLE entries (
            state_id TEXT NOT NULL REFERENCES states (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (state_id, seq)
        )""",
        # Covering: list() reads this index alone, in order, and never the table.
        """CREATE INDEX states_listing ON states (updated_at DESC, id, task, created_at, turn, stopped_by,
            finished) WHERE updated_at IS NOT NULL""",
        "CREATE INDEX states_unlisted ON states (id) WHERE unlisted IS NOT NULL",
    ),
    # Version 2: a State's key is (namespace, id); v1 rows become the "default" namespace.
    # The tables are rebuilt (SQLite cannot change a primary key in place): renamed, made
    # anew, copied, dropped. The new listing columns are filled from each snapshot after
    # this step, in Python (``_schema.refill``), in the same transaction.
    (
        "ALTER TABLE entries RENAME TO entries_v1",
        "ALTER TABLE states RENAME TO states_v1",
        """CREATE TABLE states (
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            next_seq INTEGER NOT NULL,
            task TEXT,
            created_at TEXT,
            updated_at TEXT,
            turn,  -- no type: an int beyond 64-bit signed is kept as exact text
            stopped_by TEXT,
            finished INTEGER,
            status TEXT,  -- 'finished', else stopped_by, else 'running' (SavedState.status)
            agent TEXT,
            parent TEXT,
            expires_at TEXT,  -- fixed-width UTC ISO text, as created_at and updated_at
            labels TEXT,  -- JSON object, NULL when there are none (rows to filter on: labels table)
            forked_from TEXT,  -- JSON object or NULL
            unlisted TEXT,
            snapshot TEXT,
            PRIMARY KEY (namespace, id)
        )""",
        """CREATE TABLE entries (
            namespace TEXT NOT NULL,
            state_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (namespace, state_id, seq),
            FOREIGN KEY (namespace, state_id) REFERENCES states (namespace, id) ON DELETE CASCADE
        )""",
        # One row per label, with the State's updated_at: a label filter pages through
        # labels_listing in listing order without touching other States.
        """CREATE TABLE labels (
            namespace TEXT NOT NULL,
            state_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (namespace, state_id, key),
            FOREIGN KEY (namespace, state_id) REFERENCES states (namespace, id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
        """INSERT INTO states (namespace, id, next_seq, task, created_at, updated_at, turn, stopped_by,
            finished, unlisted, snapshot)
            SELECT 'default', id, next_seq, task, created_at, updated_at, turn, stopped_by, finished,
            unlisted, snapshot FROM states_v1""",
        "INSERT INTO entries (namespace, state_id, seq, data) SELECT 'default', state_id, seq, data FROM entries_v1",
        "DROP TABLE entries_v1",
        "DROP TABLE states_v1",
        # Every listing filter has an index in listing order (updated_at DESC, id) after its
        # equality columns, so a page is one range of one index, read until the page is full.
        "CREATE INDEX states_listing ON states (namespace, updated_at DESC, id) WHERE updated_at IS NOT NULL",
        "CREATE INDEX states_agent ON states (namespace, agent, updated_at DESC, id) WHERE agent IS NOT NULL",
        "CREATE INDEX states_parent ON states (namespace, parent, updated_at DESC, id) WHERE parent IS NOT NULL",
        "CREATE INDEX states_status ON states (namespace, status, updated_at DESC, id) WHERE status IS NOT NULL",
        "CREATE INDEX states_unfinished ON states (namespace, updated_at DESC, id) WHERE finished = 0",
        """CREATE INDEX states_stopped ON states (namespace, stopped_by, updated_at DESC, id)
            WHERE stopped_by IS NOT NULL""",
        "CREATE INDEX states_expiry ON states (namespace, expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX states_unlisted ON states (namespace, id) WHERE unlisted IS NOT NULL",
        "CREATE INDEX labels_listing ON labels (namespace, key, value, updated_at DESC, state_id)",
    ),
    # Version 3: one lease row per State. No foreign key: the row outlives a release and the
    # State's delete, so a State's token only grows. A statekeep that knows no leases (version
    # 2) refuses the file rather than write past a lease it cannot see.
    (
        """CREATE TABLE leases (
            namespace TEXT NOT NULL,
            state_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            token INTEGER NOT NULL,
            expires_at TEXT NOT NULL,  -- fixed-width UTC ISO text, by the store's clock
            ttl_us INTEGER NOT NULL,  -- the period it was taken for, in microseconds (renew's default)
            PRIMARY KEY (namespace, state_id)
        ) WITHOUT ROWID""",
    ),
    # Version 4: each State's incarnation (a random id made at its create, which its sealed
    # records are bound to); NULL for the States made before. A statekeep that knows no
    # incarnations (version 3) refuses the file rather than append records to a State it
    # cannot bind them to, which its readers then could not open.
    ("ALTER TABLE states ADD COLUMN incarnation TEXT",),
    # Version 5: blobs (large values stored once, content-addressed, shared by every
    # namespace of the file) and which State refers to which (``seq``: the first entry of
    # the write that referred to it, so a fork copies the references of the entries it
    # copies). A State's references go with it (ON DELETE CASCADE); a reference needs its
    # blob. A statekeep that knows no blobs (version 4) refuses the file rather than show
    # references as values, or fork a State without its references.
    (
        "CREATE TABLE blobs (name TEXT PRIMARY KEY NOT NULL, data BLOB NOT NULL)",
        """CREATE TABLE blob_refs (
            namespace TEXT NOT NULL,
            state_id TEXT NOT NULL,
            name TEXT NOT NULL REFERENCES blobs (name),
            seq INTEGER NOT NULL,
            PRIMARY KEY (namespace, state_id, name),
            FOREIGN KEY (namespace, state_id) REFERENCES states (namespace, id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
        "CREATE INDEX blob_refs_name ON blob_refs (name)",
    ),
)

#: The rows the version 2 migration fills the listing columns of.
REFILL_ROWS = (
    "SELECT rowid, id, CAST(snapshot AS BLOB) FROM states WHERE rowid > ? AND snapshot IS NOT NULL "
    "ORDER BY rowid LIMIT 512"
)
REFILL = (
    "UPDATE states SET task = ?, created_at = ?, updated_at = ?, turn = ?, stopped_by = ?, finished = ?, "
    "status = ?, agent = ?, parent = ?, expires_at = ?, labels = ?, forked_from = ?, unlisted = ? "
    "WHERE rowid = ?"
)

HAS_VERSION_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
VERSION = "SELECT max(version) FROM schema_version"
CREATE_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"
INSERT_VERSION = "INSERT INTO schema_version (version) VALUES (?)"
UPDATE_VERSION = "UPDATE schema_version SET version = ?"
TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"

# -- connection settings (formatted with their value: PRAGMA takes no parameters) ----------

BUSY_TIMEOUT = "PRAGMA busy_timeout = {milliseconds:d}"
# FULL: in WAL mode NORMAL may lose committed transactions on power loss.
SYNCHRONOUS_FULL = "PRAGMA synchronous = FULL"
FOREIGN_KEYS_ON = "PRAGMA foreign_keys = ON"
JOURNAL_SIZE_LIMIT = "PRAGMA journal_size_limit = {size:d}"
JOURNAL_MODE_WAL = "PRAGMA journal_mode = WAL"

# -- transactions ----------------------------------------------------------------------------

BEGIN = "BEGIN"
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
SAVEPOINT = "SAVEPOINT write"
ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO write"
RELEASE_SAVEPOINT = "RELEASE write"

# -- writes (every statement names the namespace: a State is (namespace, id)) ----------------

# What a batch's writes are checked against, in one query read under the write lock: per
# (namespace, id) asked (a row each, the State there or not), the schema version (an
# uncorrelated subquery: read once, with the rows), the State's next seq, expiry,
# incarnation, whether it is sealed, whether it has labels, and its lease row. Sealed: its
# snapshot, else its last entry, judged by statekeep_sealed (_expect.sealed_text,
# registered on each connection) only when the text holds the sealed key at all, which a
# clear record never does.
_SEALED_KEY = f"'{SEALED_KEY.decode()}'"  # a SQL literal (the key holds no single quote)
KNOWN = (
    "WITH k(ns, id) AS (VALUES {pairs}) "
    "SELECT k.ns, k.id, (SELECT max(version) FROM schema_version), s.next_seq, s.expires_at, s.incarnation, "
    f"CASE WHEN s.snapshot IS NOT NULL THEN (CASE WHEN instr(s.snapshot, {_SEALED_KEY}) "
    "THEN statekeep_sealed(CAST(s.snapshot AS BLOB)) ELSE 0 END) "
    f"ELSE (SELECT CASE WHEN instr(e.data, {_SEALED_KEY}) THEN statekeep_sealed(CAST(e.data AS BLOB)) "
    "ELSE 0 END FROM entries e WHERE e.namespace = s.namespace AND e.state_id = s.id "
    "AND e.seq = s.next_seq - 1) END, "
    "s.labels IS NOT NULL, l.owner, l.token, l.expires_at, l.ttl_us "
    "FROM k LEFT JOIN states s ON s.namespace = k.ns AND s.id = k.id "
    "LEFT JOIN leases l ON l.namespace = k.ns AND l.state_id = k.id"
)
SOURCE = "SELECT next_seq, expires_at FROM states WHERE namespace = ? AND id = ?"
STORED_ENTRIES = (
    "SELECT CAST(data AS BLOB) FROM entries WHERE namespace = ? AND state_id = ? AND seq >= ? AND seq < ? "
    "ORDER BY seq"
)
DELETE_ENTRIES = "DELETE FROM entries WHERE namespace = ? AND state_id = ?"
DELETE_LABELS = "DELETE FROM labels WHERE namespace = ? AND state_id = ?"
DELETE_STATE = "DELETE FROM states WHERE namespace = ? AND id = ?"
INSERT_ENTRY = "INSERT INTO entries (namespace, state_id, seq, data) VALUES (?, ?, ?, CAST(? AS TEXT))"
INSERT_LABEL = "INSERT INTO labels (namespace, state_id, key, value, updated_at) VALUES (?, ?, ?, ?, ?)"
#: The listing columns, in the order ``_rows.listing_columns`` gives them.
LISTING_COLUMNS = (
    "task, created_at, updated_at, turn, stopped_by, finished, status, agent, parent, expires_at, labels, "
    "forked_from, unlisted"
)
INSERT_STATE = (
    f"INSERT INTO states (namespace, id, next_seq, snapshot, {LISTING_COLUMNS}, incarnation) "
    "VALUES (?, ?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE_STATE = (
    "UPDATE states SET next_seq = ?, snapshot = CAST(? AS TEXT), task = ?, created_at = ?, updated_at = ?, "
    "turn = ?, stopped_by = ?, finished = ?, status = ?, agent = ?, parent = ?, expires_at = ?, labels = ?, "
    "forked_from = ?, unlisted = ? WHERE namespace = ? AND id = ?"
)
UPDATE_NEXT_SEQ = "UPDATE states SET next_seq = ? WHERE namespace = ? AND id = ?"
# A fork's entries, copied from its source inside the database (seq < the count).
COPY_ENTRIES = (
    "INSERT INTO entries (namespace, state_id, seq, data) "
    "SELECT ?, ?, seq, data FROM entries WHERE namespace = ? AND state_id = ? AND seq < ?"
)
# Blobs: stored once (a name already there keeps its bytes), referred to by States.
INSERT_BLOB = "INSERT INTO blobs (name, data) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
INSERT_BLOB_REF = (
    "INSERT INTO blob_refs (namespace, state_id, name, seq) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# A fork's references: those of the entries it copies (seq < the count).
COPY_BLOB_REFS = (
    "INSERT INTO blob_refs (namespace, state_id, name, seq) SELECT ?, ?, name, seq FROM blob_refs "
    "WHERE namespace = ? AND state_id = ? AND seq < ? ON CONFLICT DO NOTHING"
)
#: The stored blobs among some names (formatted with one ``?`` per name).
BLOBS_AMONG = "SELECT name, data FROM blobs WHERE name IN ({marks})"
BLOB_NAMES_AMONG = "SELECT name FROM blobs WHERE name IN ({marks})"
BLOB_USAGE = "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs"
_UNREFERENCED = "NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.name = b.name)"
COUNT_UNREFERENCED_BLOBS = (
    f"SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs b WHERE {_UNREFERENCED}"
)
# gc walks the blobs in rowid order, a window of rows per transaction: the window's end
# (the rowid of the last of at most ``?`` rows after the cursor, NULL: none left; and how
# many there are), then the unreferenced blobs of the window removed. Each transaction
# examines at most the window's rows (the rowid index and blob_refs_name), however many
# blobs are referenced.
BLOB_WINDOW_END = (
    "SELECT max(rowid), count(*) FROM (SELECT rowid FROM blobs WHERE rowid > ? ORDER BY rowid LIMIT ?)"
)
DELETE_UNREFERENCED_BLOBS = (
    f"DELETE FROM blobs AS b WHERE rowid > ? AND rowid <= ? AND {_UNREFERENCED} RETURNING length(data)"
)
SECURE_DELETE_ON = "PRAGMA secure_delete = ON"
CHECKPOINT_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"
CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"

# gc: the expired States of a namespace, a bounded chunk at a time (index states_expiry),
# but not one with a live lease (its worker is at it).
EXPIRED = (
    "SELECT id FROM states WHERE namespace = ? AND expires_at IS NOT NULL AND expires_at <= ? "
    "AND NOT EXISTS (SELECT 1 FROM leases WHERE leases.namespace = states.namespace "
    "AND leases.state_id = states.id AND leases.expires_at > ?) LIMIT ?"
)
# gc(dry_run=True): how many States gc would remove (the same condition, counted).
COUNT_EXPIRED = (
    "SELECT count(*) FROM states WHERE namespace = ? AND expires_at IS NOT NULL AND expires_at <= ? "
    "AND NOT EXISTS (SELECT 1 FROM leases WHERE leases.namespace = states.namespace "
    "AND leases.state_id = states.id AND leases.expires_at > ?)"
)

# -- leases and rekey -----------------------------------------------------------------------

LEASE_COLUMNS = "owner, token, expires_at, ttl_us"
LEASE = f"SELECT {LEASE_COLUMNS} FROM leases WHERE namespace = ? AND state_id = ?"
PUT_LEASE = f"INSERT OR REPLACE INTO leases (namespace, state_id, {LEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
RESEAL_ENTRY = "UPDATE entries SET data = CAST(? AS TEXT) WHERE namespace = ? AND state_id = ? AND seq = ?"
RESEAL_SNAPSHOT = (
    "UPDATE states SET snapshot = CAST(? AS TEXT), task = ?, created_at = ?, updated_at = ?, turn = ?, "
    "stopped_by = ?, finished = ?, status = ?, agent = ?, parent = ?, expires_at = ?, labels = ?, "
    "forked_from = ?, unlisted = ? WHERE namespace = ? AND id = ?"
)

# -- reads -----------------------------------------------------------------------------------

# A read in one statement (so one consistent view, without BEGIN): the schema version and
# the State's row (NULLs if it has none; always a first row, sorted first by its -1), then
# its entries from a seq on (by the primary key: reading a history's end costs what it
# returns), in seq order, at most the LIMIT of rows (-1: all). SQLite merges the two parts
# in order, so the LIMIT stops the reading of entries.
READ = (
    "SELECT -1, v.version, s.next_seq, s.incarnation, CAST(s.snapshot AS BLOB) "
    "FROM (SELECT max(version) AS version FROM schema_version) v "
    "LEFT JOIN states s ON s.namespace = ? AND s.id = ? "
    "UNION ALL SELECT seq, NULL, NULL, NULL, CAST(data AS BLOB) FROM entries "
    "WHERE namespace = ? AND state_id = ? AND seq >= ? ORDER BY 1 LIMIT ?"
)
READ_STATE = "SELECT next_seq, CAST(snapshot AS BLOB), incarnation FROM states WHERE namespace = ? AND id = ?"
# The schema version and a live State's snapshot alone (NULL if none, or expired), for
# agent memory: one row, in one statement.
READ_SNAPSHOT = (
    "SELECT v.version, CAST(s.snapshot AS BLOB) FROM (SELECT max(version) AS version FROM schema_version) v "
    "LEFT JOIN states s ON s.namespace = ? AND s.id = ? AND (s.expires_at IS NULL OR s.expires_at > ?)"
)
#: What a listing row is built from (``_rows.saved_state``), prefixed ``s.``.
ROW_COLUMNS = (
    "s.id, s.task, s.created_at, s.updated_at, s.turn, s.stopped_by, s.finished, s.agent, s.parent, "
    "s.labels, s.expires_at, s.forked_from"
)
STATE_IDS = "SELECT id FROM states WHERE namespace = ? ORDER BY id"
UNLISTED = "SELECT id, unlisted FROM states WHERE namespace = ? AND unlisted IS NOT NULL ORDER BY id"
# Whether UNLISTED finds any (a column of a listing's first page: index states_unlisted).
ANY_UNLISTED = "EXISTS (SELECT 1 FROM states u WHERE u.namespace = ? AND u.unlisted IS NOT NULL)"
