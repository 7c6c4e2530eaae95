"""The SQL PostgresStore runs: the quoted names of one (schema, table prefix), and the
statements of each operation. (The tables and functions they use: :mod:`._schema`.)"""

from __future__ import annotations

# PostgreSQL cuts longer identifiers (NAMEDATALEN - 1 bytes) without an error.
MAX_IDENTIFIER = 63
# The longest name derived from the prefix.
LONGEST_SUFFIX = max(
    len(s) for s in ("states", "entries", "leases", "schema_version", "states_listing", "write", "acquire")
)
#: The columns a fence or lease function returns after its status: the State's lease row
#: (owner, token, expires_at; NULL without one) and the server's time it was judged at.
_HOLDER = "o_owner, o_token, o_until, o_now"


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"`` doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def check_name(value: object, what: str, limit: int) -> str:
    """``value`` if it can be a PostgreSQL name of at most ``limit`` bytes, else TypeError
    or ValueError saying why not (``what`` names it)."""
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} {value!r} holds a NUL character, which PostgreSQL names cannot")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value!r} is not valid UTF-8 (a lone surrogate)") from None
    if size > limit:
        raise ValueError(
            f"{what} {value!r} is {size} bytes long; at most {limit} bytes fit in a PostgreSQL "
            f"name ({MAX_IDENTIFIER} bytes{', with the longest table name added' if limit < 63 else ''})"
        )
    return value


class Sql:
    """The names and statements of one (schema, table prefix), quoted once."""

    def __init__(self, schema: str, prefix: str) -> None:
        self.schema = s = quote_identifier(schema)

        def name(suffix: str) -> str:
            return f"{s}.{quote_identifier(prefix + suffix)}"

        self.states = states = name("states")
        self.entries = entries = name("entries")
        self.labels = name("labels")
        self.version = name("schema_version")
        self.write_fn = name("write")
        self.delete_fn = name("delete")
        self.fork_fn = name("fork")
        self.gc_fn = name("gc")
        self.leases = name("leases")
        self.acquire_fn = name("acquire")
        self.renew_fn = name("renew")
        self.release_fn = name("release")
        self.reseal_fn = name("reseal")
        self.blobs = name("blobs")
        self.blob_refs = name("blob_refs")
        self.gc_blobs_fn = name("gc_blobs")
        self._prefix = prefix
        self.listing = self.prefixed("states_listing")  # an index: no schema

        self.read_version = f"SELECT version FROM {self.version}"
        self.set_version = (
            f"INSERT INTO {self.version} (version) VALUES ($1) "
            "ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version"
        )
        self.write = f"SELECT o_status, o_next, o_stored, {_HOLDER} FROM {self.write_fn}({_params(30)})"
        self.delete = f"SELECT o_status, {_HOLDER} FROM {self.delete_fn}($1, $2, $3, $4)"
        self.fork = f"SELECT o_status, {_HOLDER} FROM {self.fork_fn}({_params(20)})"
        self.gc = f"SELECT {self.gc_fn}($1, $2)"
        # Blobs (see _schema_v5): shared by every namespace of the tables.
        self.gc_blobs = f"SELECT o_count, o_bytes, o_looked FROM {self.gc_blobs_fn}($1, $2)"
        self.get_blobs = f"SELECT name, data FROM {self.blobs} WHERE name = ANY ($1::text[])"
        self.reseal_blob = f"UPDATE {self.blobs} SET data = $1 WHERE name = $2 AND data = $3 RETURNING 1"
        self.blob_usage = f"SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM {self.blobs}"
        # Leases (see _schema_leases): each judged by the server's clock, in one statement.
        self.acquire = f"SELECT o_status, {_HOLDER} FROM {self.acquire_fn}($1, $2, $3, $4)"
        self.renew = f"SELECT o_status, {_HOLDER} FROM {self.renew_fn}($1, $2, $3, $4, $5)"
        self.release = f"SELECT {self.release_fn}($1, $2, $3, $4)"
        self.reseal = f"SELECT {self.reseal_fn}({_params(8)})"
        self.current_lease = (
            f"SELECT owner, token, expires_at, ttl, clock_timestamp() FROM {self.leases} "
            "WHERE ns = $1 AND state_id = $2"
        )
        # One statement, so one consistent view of the row and its entries: the row first
        # (seq -1: its snapshot, next_seq and incarnation), then the entries from seq $3 on, in seq order
        # (a range scan of the primary key: it costs what it returns). (Joining the
        # entries into one JSON text on the server is slower than parsing them one by one.)
        # A row past its expiry (by the server's clock) reads as absent.
        live = "(expires_at IS NULL OR expires_at > now())"
        # The snapshot alone (agent memory), and what gc would remove now (a dry run).
        self.state_ids = f"SELECT id FROM {states} WHERE ns = $1 ORDER BY id"
        self.read_snapshot = f"SELECT snapshot FROM {states} WHERE ns = $1 AND id = $2 AND {live}"
        self.count_expired = f"""SELECT count(*) FROM {states} s WHERE s.ns = $1 AND s.expires_at <= now()
            AND NOT EXISTS (SELECT 1 FROM {self.leases} l
                            WHERE l.ns = $1 AND l.state_id = s.id AND l.expires_at > clock_timestamp())"""
        self.read = f"""
            SELECT -1 AS seq, snapshot AS data, next_seq, incarnation FROM {states}
            WHERE ns = $1 AND id = $2 AND {live}
            UNION ALL
            SELECT e.seq, e.data, NULL, NULL FROM {entries} e
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq >= $3
              AND e.seq < (SELECT next_seq FROM {states} WHERE ns = $1 AND id = $2 AND {live})
            ORDER BY seq"""

    def prefixed(self, suffix: str) -> str:
        """The quoted name of an index or constraint of this table prefix (no schema)."""
        return quote_identifier(self._prefix + suffix)


def _params(n: int) -> str:
    return ", ".join(f"${i}" for i in range(1, n + 1))
