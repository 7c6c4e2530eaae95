"""The SQL text SQLiteStore runs: the schema's migration steps and every statement.

Only text here; the code that runs it is in the other modules of this package. JSON is
bound as bytes and stored as TEXT without a round trip through ``str`` (``CAST`` re-labels
UTF-8 bytes); reads ``CAST`` back to get bytes for orjson.
"""

from __future__ import annotations

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

# -- writes ----------------------------------------------------------------------------------

NEXT_SEQS = "SELECT id, next_seq FROM states WHERE id IN ({marks})"  # marks: one ? per id
STORED_ENTRIES = (
    "SELECT CAST(data AS BLOB) FROM entries WHERE state_id = ? AND seq >= ? AND seq < ? ORDER BY seq"
)
DELETE_ENTRIES = "DELETE FROM entries WHERE state_id = ?"
DELETE_STATE = "DELETE FROM states WHERE id = ?"
INSERT_ENTRY = "INSERT INTO entries (state_id, seq, data) VALUES (?, ?, CAST(? AS TEXT))"
INSERT_STATE = (
    "INSERT INTO states (id, next_seq, snapshot, task, created_at, updated_at, turn, stopped_by, "
    "finished, unlisted) VALUES (?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE_STATE = (
    "UPDATE states SET next_seq = ?, snapshot = CAST(? AS TEXT), task = ?, created_at = ?, "
    "updated_at = ?, turn = ?, stopped_by = ?, finished = ?, unlisted = ? WHERE id = ?"
)
UPDATE_NEXT_SEQ = "UPDATE states SET next_seq = ? WHERE id = ?"

# -- reads -----------------------------------------------------------------------------------

READ_STATE = "SELECT next_seq, CAST(snapshot AS BLOB) FROM states WHERE id = ?"
READ_ENTRIES = "SELECT CAST(data AS BLOB) FROM entries WHERE state_id = ? ORDER BY seq"
LIST = (
    "SELECT id, task, created_at, updated_at, turn, stopped_by, finished FROM states "
    "WHERE updated_at IS NOT NULL ORDER BY updated_at DESC, id"
)
UNLISTED = "SELECT id, unlisted FROM states WHERE unlisted IS NOT NULL ORDER BY id"
