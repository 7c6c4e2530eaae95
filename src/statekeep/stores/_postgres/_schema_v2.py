"""Schema version 2 of PostgresStore: namespaces, the lineage, label and expiry columns, the
indexes every listing filter is answered from, and the write, delete, fork and gc functions.

From version 1, in the migration's one transaction: every row gets the namespace
``'default'`` (the key becomes ``(ns, id)``), ``status`` is filled from the listing
columns, and the version 1 functions are replaced. Columns a version 1 row cannot have
(agent, parent, labels, forked_from, expires_at: statekeep wrote none of them then) start
NULL.

Expiry is judged by the server's clock: ``expires_at`` holds the effective expiry (the
snapshot's own, else ``now() + retention`` stamped by the write), and every statement
treats a row with ``expires_at <= now()`` as absent.
"""

from __future__ import annotations

from .._server import COMPARE, EXISTS, GAP, MISSING, OK
from ._sql import Sql

BUSY = 5  # see _schema.BUSY

#: In the functions that write: this transaction commits with the WAL flushed, whatever
#: the session says.
DURABLE = _DURABLE = """IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;"""

#: The write function's arguments (all but ``p_nowait``, which comes last), in order.
WRITE_ARGS = (
    "p_ns text", "p_id text", "p_create boolean", "p_first bigint", "p_lines text[]", "p_snapshot text",
    "p_task text", "p_created_at timestamptz", "p_updated_at timestamptz", "p_turn bigint",
    "p_stopped_by text", "p_finished boolean", "p_unlisted text", "p_agent text", "p_parent text",
    "p_labels jsonb", "p_forked_from text", "p_expires_at timestamptz", "p_retention interval",
    "p_approved text[]",
)  # fmt: skip

#: The fork function's arguments: the source, then a write's (no lines, no approved).
FORK_ARGS = (
    "p_src text", "p_at bigint", "p_hash bytea", *WRITE_ARGS[:2], *WRITE_ARGS[5:-1],
)  # fmt: skip

#: The listing columns a write sets from its snapshot (the function's argument of each).
_COLUMNS = (
    "task", "created_at", "updated_at", "turn", "stopped_by", "finished", "unlisted", "agent",
    "parent", "labels", "forked_from",
)  # fmt: skip

# A live row: not past its expiry by the server's clock.
LIVE = "(expires_at IS NULL OR expires_at > now())"


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 1 to version 2."""
    n = sql.prefixed  # the quoted name of an index or constraint
    states, entries = sql.states, sql.entries
    listed = "WHERE task IS NOT NULL"
    return (
        f"""ALTER TABLE {states}
            ADD COLUMN ns text COLLATE "C" NOT NULL DEFAULT 'default',
            ADD COLUMN agent text,
            ADD COLUMN parent text COLLATE "C",
            ADD COLUMN labels jsonb,
            ADD COLUMN forked_from text,
            ADD COLUMN expires_at timestamptz,
            ADD COLUMN status text""",
        f"""UPDATE {states} SET status = CASE WHEN finished THEN 'finished'
            ELSE coalesce(stopped_by, 'running') END WHERE task IS NOT NULL""",
        f"ALTER TABLE {states} ALTER COLUMN ns DROP DEFAULT",
        f"ALTER TABLE {states} DROP CONSTRAINT {n('states_pkey')}, ADD PRIMARY KEY (ns, id)",
        f"""ALTER TABLE {entries} ADD COLUMN ns text COLLATE "C" NOT NULL DEFAULT 'default'""",
        f"ALTER TABLE {entries} ALTER COLUMN ns DROP DEFAULT",
        f"ALTER TABLE {entries} DROP CONSTRAINT {n('entries_pkey')}, ADD PRIMARY KEY (ns, state_id, seq)",
        f"DROP INDEX {sql.schema}.{sql.listing}",
        # Each filter has an index in listing order, so a page is one short index scan
        # (the others are filters on it, or the planner joins a label's GIN bitmap).
        f"CREATE INDEX {sql.listing} ON {states} (ns, updated_at DESC, id) {listed}",
        f"CREATE INDEX {n('states_agent')} ON {states} (ns, agent, updated_at DESC, id) {listed}",
        f"CREATE INDEX {n('states_parent')} ON {states} (ns, parent, updated_at DESC, id) {listed}",
        f"CREATE INDEX {n('states_status')} ON {states} (ns, status, updated_at DESC, id) {listed}",
        # One row per label of a listed State, with its updated_at (kept equal to the State's
        # by the write that sets both): a label's page is one index scan in listing order,
        # however many States carry the label.
        f"""CREATE TABLE {sql.labels} (
            ns text COLLATE "C" NOT NULL,
            state_id text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value text NOT NULL,
            updated_at timestamptz NOT NULL,
            PRIMARY KEY (ns, state_id, key)
        )""",
        f"CREATE INDEX {n('labels_order')} ON {sql.labels} (ns, key, value, updated_at DESC, state_id)",
        f"CREATE INDEX {n('states_expiry')} ON {states} (ns, expires_at) WHERE expires_at IS NOT NULL",
        # Rows whose listing is read from the snapshot (rare): found without a scan.
        f"CREATE INDEX {n('states_odd')} ON {states} (ns) WHERE task IS NULL AND snapshot IS NOT NULL",
        f"""DROP FUNCTION {sql.write_fn}(text, boolean, bigint, text[], text, text, timestamptz,
            timestamptz, bigint, text, boolean, text, text[], boolean)""",
        f"DROP FUNCTION {sql.delete_fn}(text)",
        f"""CREATE FUNCTION {sql.write_fn}({", ".join(WRITE_ARGS)}, p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[])
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {dollar_quote(_write_body(sql))}""",
        f"""CREATE FUNCTION {sql.delete_fn}(p_ns text, p_id text) RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {dollar_quote(_delete_body(sql))}""",
        f"""CREATE FUNCTION {sql.fork_fn}({", ".join(FORK_ARGS)}, OUT o_status integer)
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {dollar_quote(_fork_body(sql))}""",
        f"""CREATE FUNCTION {sql.gc_fn}(p_ns text, p_limit integer) RETURNS integer
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {dollar_quote(_gc_body(sql))}""",
    )


def _create_row(sql: Sql, lines: str) -> str:
    """Insert the row of a new State, replacing an expired one of the same id in place (the
    row lock of ON CONFLICT makes it atomic with gc and other writers); EXISTS for a live
    one. Then its entries: ``lines`` is a SELECT of (seq, data)."""
    values = ", ".join(f"p_{c}" for c in _COLUMNS)
    updates = ", ".join(
        f"{c} = EXCLUDED.{c}" for c in ("next_seq", "snapshot", *_COLUMNS, "expires_at", "status")
    )
    return f"""
        INSERT INTO {sql.states} AS s (ns, id, next_seq, snapshot, {", ".join(_COLUMNS)}, expires_at, status)
            VALUES (p_ns, p_id, v_n, p_snapshot, {values}, v_expires, v_status)
            ON CONFLICT (ns, id) DO UPDATE SET {updates}, written_at = now()
            WHERE s.expires_at <= now();
        IF NOT FOUND THEN
            o_status := {EXISTS};
            RETURN;
        END IF;
        -- An expired State's entries and labels, if this replaced one.
        DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = p_id;
        INSERT INTO {sql.entries} (ns, state_id, seq, data) {lines};
        {_set_labels(sql)}"""


def _set_labels(sql: Sql) -> str:
    """The label rows of the State ``p_id``: those of ``p_labels``, at ``p_updated_at``."""
    return f"""DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id = p_id;
        INSERT INTO {sql.labels} (ns, state_id, key, value, updated_at)
            SELECT p_ns, p_id, l.key, l.value, p_updated_at FROM jsonb_each_text(p_labels) l
            WHERE p_task IS NOT NULL;"""


_DECLARE = """
    -- The effective expiry (the snapshot's own, else retention from now, by this clock),
    -- set with each snapshot; and the status listings filter by.
    v_expires timestamptz := CASE WHEN p_snapshot IS NULL THEN NULL
                                  ELSE coalesce(p_expires_at, now() + p_retention) END;
    v_status text := CASE WHEN p_task IS NULL THEN NULL WHEN p_finished THEN 'finished'
                          ELSE coalesce(p_stopped_by, 'running') END;"""


def _write_body(sql: Sql) -> str:
    """One write's seq rules, compare, append and snapshot, under the State's row lock; an
    expired State is MISSING (a create replaces it)."""
    row = f"{sql.states} s WHERE s.ns = p_ns AND s.id = p_id"
    live = "s.expires_at IS NULL OR s.expires_at > now()"
    sets = ",\n            ".join(
        f"{c} = CASE WHEN p_snapshot IS NULL THEN {c} ELSE p_{c} END" for c in _COLUMNS
    )
    return f"""
DECLARE
    v_n integer := coalesce(cardinality(p_lines), 0);
    v_next bigint;
    v_live boolean;
    v_labelled boolean;
    v_skip integer := 0;{_DECLARE}
BEGIN
    {_DURABLE}
    IF p_create THEN
        {_create_row(sql, "SELECT p_ns, p_id, u.o - 1, u.d FROM unnest(p_lines) WITH ORDINALITY AS u(d, o)")}
        o_status := {OK};
        o_next := v_n;
        RETURN;
    END IF;
    IF p_nowait THEN
        -- In a batch: never wait for another transaction's lock (that would hold up the
        -- whole batch); the client sends this write again on its own.
        SELECT s.next_seq, {live}, s.labels IS NOT NULL INTO v_next, v_live, v_labelled
            FROM {row} FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            o_status := CASE WHEN EXISTS (SELECT 1 FROM {row}) THEN {BUSY} ELSE {MISSING} END;
            RETURN;
        END IF;
    ELSE
        SELECT s.next_seq, {live}, s.labels IS NOT NULL INTO v_next, v_live, v_labelled
            FROM {row} FOR UPDATE;
    END IF;
    IF NOT FOUND OR NOT v_live THEN
        o_status := {MISSING};
        RETURN;
    END IF;
    o_next := v_next;
    IF v_n > 0 THEN
        IF p_first > v_next THEN
            o_status := {GAP};
            RETURN;
        END IF;
        v_skip := least(v_next - p_first, v_n);
    END IF;
    IF v_skip > 0 THEN
        SELECT array_agg(e.data ORDER BY e.seq) INTO o_stored FROM {sql.entries} e
            WHERE e.ns = p_ns AND e.state_id = p_id AND e.seq >= p_first AND e.seq < p_first + v_skip;
        IF o_stored IS DISTINCT FROM p_lines[1:v_skip] AND o_stored IS DISTINCT FROM p_approved THEN
            o_status := {COMPARE};
            RETURN;
        END IF;
        o_stored := NULL;
    END IF;
    IF v_skip < v_n THEN
        INSERT INTO {sql.entries} (ns, state_id, seq, data)
            SELECT p_ns, p_id, p_first + v_skip + u.o - 1, u.d
            FROM unnest(p_lines[v_skip + 1 : v_n]) WITH ORDINALITY AS u(d, o);
        o_next := p_first + v_n;
    END IF;
    IF v_skip < v_n OR p_snapshot IS NOT NULL THEN
        UPDATE {sql.states} SET
            next_seq = o_next,
            snapshot = coalesce(p_snapshot, snapshot),
            {sets},
            expires_at = CASE WHEN p_snapshot IS NULL THEN expires_at ELSE v_expires END,
            status = CASE WHEN p_snapshot IS NULL THEN status ELSE v_status END,
            written_at = now()
        WHERE ns = p_ns AND id = p_id;
    END IF;
    IF p_snapshot IS NOT NULL AND (v_labelled OR p_labels IS NOT NULL) THEN
        {_set_labels(sql)}
    END IF;
    o_status := {OK};
END
"""


def _delete_body(sql: Sql) -> str:
    """The row, then the entries (the row first: that waits for a writer holding it, whose
    entries the next statement then sees)."""
    return f"""
BEGIN
    {_DURABLE}
    DELETE FROM {sql.states} WHERE ns = p_ns AND id = p_id;
    DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = p_id;
    DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id = p_id;
END
"""


def _fork_body(sql: Sql) -> str:
    """A fork in one transaction: the source's row held (FOR SHARE) so it cannot go away,
    checked live and still holding the entries that were read (their hash), then the new
    row and one INSERT ... SELECT of the source's entries 0 to ``p_at``."""
    copy = f"""SELECT p_ns, p_id, e.seq, e.data FROM {sql.entries} e
            WHERE e.ns = p_ns AND e.state_id = p_src AND e.seq <= p_at"""
    return f"""
DECLARE
    v_n bigint := p_at + 1;
    v_next bigint;
    v_live boolean;{_DECLARE}
BEGIN
    {_DURABLE}
    SELECT s.next_seq, s.expires_at IS NULL OR s.expires_at > now() INTO v_next, v_live
        FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_src FOR SHARE;
    IF NOT FOUND OR NOT v_live OR v_next <= p_at THEN
        o_status := {MISSING};
        RETURN;
    END IF;
    IF (SELECT sha256(convert_to(string_agg(e.data || E'\\n', '' ORDER BY e.seq), 'UTF8'))
        FROM {sql.entries} e WHERE e.ns = p_ns AND e.state_id = p_src AND e.seq <= p_at)
       IS DISTINCT FROM p_hash THEN
        o_status := {COMPARE};  -- deleted and written again since it was read
        RETURN;
    END IF;
    {_create_row(sql, copy)}
    o_status := {OK};
END
"""


def _gc_body(sql: Sql) -> str:
    """Remove at most ``p_limit`` expired States of ``p_ns``; return how many. Rows another
    transaction holds (a writer) are skipped, and each row's expiry is checked again once
    locked (READ COMMITTED re-reads a row changed meanwhile), so a State a concurrent write
    just extended stays."""
    return f"""
DECLARE
    v_ids text[];
BEGIN
    {_DURABLE}
    WITH doomed AS (
        SELECT s.id FROM {sql.states} s
        WHERE s.ns = p_ns AND s.expires_at <= now()
        ORDER BY s.expires_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM {sql.states} s USING doomed d
        WHERE s.ns = p_ns AND s.id = d.id AND s.expires_at <= now()
        RETURNING s.id
    )
    SELECT array_agg(id) INTO v_ids FROM gone;
    DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = ANY (v_ids);
    DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id = ANY (v_ids);
    RETURN coalesce(cardinality(v_ids), 0);
END
"""


def dollar_quote(body: str) -> str:
    tag = "$statekeep$"
    n = 0
    while tag in body:
        n += 1
        tag = f"$statekeep{n}$"
    return f"{tag}{body}{tag}"
