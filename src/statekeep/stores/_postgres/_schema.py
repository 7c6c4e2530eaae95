"""The tables and functions of PostgresStore, as migrations: the schema version and the
statements that bring the tables to it. (Running them: :mod:`._migrate`.)"""

from __future__ import annotations

from .._server import COMPARE, EXISTS, GAP, MISSING, OK
from . import _schema_v2, _schema_v3, _schema_v4, _schema_v5
from ._schema_leases import FENCED
from ._schema_v2 import BUSY
from ._sql import Sql

#: The schema version this statekeep writes; tables at a higher version are refused.
SCHEMA_VERSION = 5

__all__ = ["BUSY", "FENCED", "SCHEMA_VERSION", "bootstrap", "migrations"]

# In the write and delete functions: this transaction commits with the WAL flushed,
# whatever the session says (a session setting could be reset or come from a pooler).
_DURABLE = """IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;"""


def bootstrap(sql: Sql) -> tuple[str, ...]:
    """What every version has: the schema and the table holding the version."""
    return (
        f"CREATE SCHEMA IF NOT EXISTS {sql.schema}",
        f"""CREATE TABLE IF NOT EXISTS {sql.version} (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            version integer NOT NULL
        )""",
    )


def migrations(sql: Sql) -> tuple[tuple[str, ...], ...]:
    """The statements from version ``i`` to ``i + 1``, at index ``i``. (Version 1 stays as
    it was released: a new schema is made at version 1, then migrated like an old one.)"""
    return (
        (
            f"""CREATE TABLE {sql.states} (
                id text COLLATE "C" PRIMARY KEY,
                next_seq bigint NOT NULL DEFAULT 0,
                snapshot text,
                task text,
                created_at timestamptz,
                updated_at timestamptz,
                turn bigint,
                stopped_by text,
                finished boolean,
                unlisted text,
                written_at timestamptz NOT NULL DEFAULT now()
            )""",
            f"""CREATE TABLE {sql.entries} (
                state_id text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                data text NOT NULL,
                PRIMARY KEY (state_id, seq)
            )""",
            f"CREATE INDEX {sql.listing} ON {sql.states} (updated_at DESC, id) WHERE snapshot IS NOT NULL",
            f"""CREATE FUNCTION {sql.write_fn}(
                p_id text, p_create boolean, p_first bigint, p_lines text[], p_snapshot text,
                p_task text, p_created_at timestamptz, p_updated_at timestamptz, p_turn bigint,
                p_stopped_by text, p_finished boolean, p_unlisted text, p_approved text[],
                p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[]
            ) LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {_dollar_quote(_write_body(sql))}""",
            f"""CREATE FUNCTION {sql.delete_fn}(p_id text) RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
            AS {_dollar_quote(_delete_body(sql))}""",
        ),
        _schema_v2.migration(sql),
        _schema_v3.migration(sql),
        _schema_v4.migration(sql),
        _schema_v5.migration(sql),
    )


def _write_body(sql: Sql) -> str:
    """The write function: one write's seq rules, compare, append and snapshot, under the
    State's row lock."""
    return f"""
DECLARE
    v_n integer := coalesce(cardinality(p_lines), 0);
    v_next bigint;
    v_skip integer := 0;
BEGIN
    {_DURABLE}
    IF p_create THEN
        INSERT INTO {sql.states} (id, next_seq, snapshot, task, created_at, updated_at, turn,
                              stopped_by, finished, unlisted)
            VALUES (p_id, v_n, p_snapshot, p_task, p_created_at, p_updated_at, p_turn,
                    p_stopped_by, p_finished, p_unlisted)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            o_status := {EXISTS};
            RETURN;
        END IF;
        -- Nothing should be left from an earlier State of this id; be sure of it.
        DELETE FROM {sql.entries} WHERE state_id = p_id;
        INSERT INTO {sql.entries} (state_id, seq, data)
            SELECT p_id, u.o - 1, u.d FROM unnest(p_lines) WITH ORDINALITY AS u(d, o);
        o_status := {OK};
        o_next := v_n;
        RETURN;
    END IF;
    IF p_nowait THEN
        -- In a batch: never wait for another transaction's lock (that would hold up the
        -- whole batch); the client sends this write again on its own.
        SELECT s.next_seq INTO v_next FROM {sql.states} s WHERE s.id = p_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            o_status := CASE WHEN EXISTS (SELECT 1 FROM {sql.states} s WHERE s.id = p_id)
                             THEN {BUSY} ELSE {MISSING} END;
            RETURN;
        END IF;
    ELSE
        SELECT s.next_seq INTO v_next FROM {sql.states} s WHERE s.id = p_id FOR UPDATE;
        IF NOT FOUND THEN
            o_status := {MISSING};
            RETURN;
        END IF;
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
            WHERE e.state_id = p_id AND e.seq >= p_first AND e.seq < p_first + v_skip;
        IF o_stored IS DISTINCT FROM p_lines[1:v_skip] AND o_stored IS DISTINCT FROM p_approved THEN
            o_status := {COMPARE};
            RETURN;
        END IF;
        o_stored := NULL;
    END IF;
    IF v_skip < v_n THEN
        INSERT INTO {sql.entries} (state_id, seq, data)
            SELECT p_id, p_first + v_skip + u.o - 1, u.d
            FROM unnest(p_lines[v_skip + 1 : v_n]) WITH ORDINALITY AS u(d, o);
        o_next := p_first + v_n;
    END IF;
    IF v_skip < v_n OR p_snapshot IS NOT NULL THEN
        UPDATE {sql.states} SET
            next_seq = o_next,
            snapshot = coalesce(p_snapshot, snapshot),
            task = CASE WHEN p_snapshot IS NULL THEN task ELSE p_task END,
            created_at = CASE WHEN p_snapshot IS NULL THEN created_at ELSE p_created_at END,
            updated_at = CASE WHEN p_snapshot IS NULL THEN updated_at ELSE p_updated_at END,
            turn = CASE WHEN p_snapshot IS NULL THEN turn ELSE p_turn END,
            stopped_by = CASE WHEN p_snapshot IS NULL THEN stopped_by ELSE p_stopped_by END,
            finished = CASE WHEN p_snapshot IS NULL THEN finished ELSE p_finished END,
            unlisted = CASE WHEN p_snapshot IS NULL THEN unlisted ELSE p_unlisted END,
            written_at = now()
        WHERE id = p_id;
    END IF;
    o_status := {OK};
END
"""


def _delete_body(sql: Sql) -> str:
    """The delete function: the row, then the entries."""
    return f"""
BEGIN
    {_DURABLE}
    -- The row first: that waits for a writer holding it, whose entries the next
    -- statement then sees.
    DELETE FROM {sql.states} WHERE id = p_id;
    DELETE FROM {sql.entries} WHERE state_id = p_id;
END
"""


def _dollar_quote(body: str) -> str:
    tag = "$statekeep$"
    n = 0
    while tag in body:
        n += 1
        tag = f"$statekeep{n}$"
    return f"{tag}{body}{tag}"
