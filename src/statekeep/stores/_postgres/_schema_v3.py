"""Schema version 3 of PostgresStore: fenced leases.

From version 2, in the migration's one transaction: the ``leases`` table and the lease
functions (:mod:`._schema_leases`), and the write, delete, fork and gc functions replaced
by ones that apply the fence once the State's row is held:

- write and delete take the lease given (owner and token, NULL for none) and return
  FENCED with the State's lease row when the fence refuses; a write in a batch that is
  fenced out fails alone, like any other refused write;
- fork refuses to create a State another worker holds the lease of;
- gc skips States with a live lease.

Version 2's tables are unchanged; a version 2 row simply has no lease.
"""

from __future__ import annotations

from .._server import COMPARE, GAP, MISSING, OK, REBORN
from . import _schema_leases as leases
from ._schema_v2 import (
    _COLUMNS,
    _DECLARE,
    BUSY,
    DURABLE,
    FORK_ARGS,
    WRITE_ARGS,
    _create_row,
    _set_labels,
    dollar_quote,
)
from ._sql import Sql

_HEAD = "LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS"
#: The lease a write or delete is given: its owner and token (both NULL: none).
_LEASE_ARGS = ("p_lease_owner text", "p_lease_token bigint")


def _types(args: tuple[str, ...]) -> str:
    return ", ".join(a.split()[1] for a in args)


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 2 to version 3."""
    return (
        leases.table(sql),
        f"DROP FUNCTION {sql.write_fn}({_types(WRITE_ARGS)}, boolean)",
        f"DROP FUNCTION {sql.delete_fn}(text, text)",
        f"DROP FUNCTION {sql.fork_fn}({_types(FORK_ARGS)})",
        f"""CREATE FUNCTION {sql.write_fn}({", ".join((*WRITE_ARGS, *_LEASE_ARGS))}, p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[], {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_write_body(sql))}""",
        f"""CREATE FUNCTION {sql.delete_fn}(p_ns text, p_id text, {", ".join(_LEASE_ARGS)},
                OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_delete_body(sql))}""",
        f"""CREATE FUNCTION {sql.fork_fn}({", ".join(FORK_ARGS)}, OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_fork_body(sql))}""",
        f"""CREATE OR REPLACE FUNCTION {sql.gc_fn}(p_ns text, p_limit integer) RETURNS integer
            {_HEAD} {dollar_quote(_gc_body(sql))}""",
        *leases.functions(sql),
    )


def _write_body(sql: Sql, checks: str = "", *, incarnation: bool = False) -> str:
    """Version 2's write (seq rules, compare, append and snapshot under the State's row
    lock), with the fence run once the row is held, before anything else is decided.
    ``incarnation`` (version 4): a create stores ``p_incarnation``; an append with
    ``p_bound`` is refused (REBORN) unless the State's incarnation is ``p_incarnation``.
    ``checks``: more preconditions, run after that once the State is known live (version 4's)."""
    row = f"{sql.states} s WHERE s.ns = p_ns AND s.id = p_id"
    live = "s.expires_at IS NULL OR s.expires_at > now()"
    sets = ",\n            ".join(
        f"{c} = CASE WHEN p_snapshot IS NULL THEN {c} ELSE p_{c} END" for c in _COLUMNS
    )
    fence = leases.fence(sql, "p_lease_owner", "p_lease_token")
    inc, store_inc, check_inc = "", "", ""
    if incarnation:
        inc = ", s.incarnation"
        store_inc = f"UPDATE {sql.states} SET incarnation = p_incarnation WHERE ns = p_ns AND id = p_id;"
        check_inc = f"""IF p_bound AND v_inc IS DISTINCT FROM p_incarnation THEN
        o_status := {REBORN};
        RETURN;
    END IF;"""
    into = "v_next, v_live, v_labelled" + (", v_inc" if incarnation else "")
    declare = "\n    v_inc text;" if incarnation else ""
    return f"""
DECLARE
    v_n integer := coalesce(cardinality(p_lines), 0);
    v_next bigint;
    v_live boolean;
    v_labelled boolean;{declare}
    v_skip integer := 0;{_DECLARE}
BEGIN
    {DURABLE}
    IF p_create THEN
        -- No acquire of this id until this commits (there may be no row to hold), and an
        -- expired State of this id is replaced: its row held first, for the fence.
        {leases.lock(sql)}
        PERFORM 1 FROM {row} FOR UPDATE;
        {fence}
        {_create_row(sql, "SELECT p_ns, p_id, u.o - 1, u.d FROM unnest(p_lines) WITH ORDINALITY AS u(d, o)")}
        {store_inc}
        o_status := {OK};
        o_next := v_n;
        RETURN;
    END IF;
    IF p_nowait THEN
        -- In a batch: never wait for another transaction's lock (that would hold up the
        -- whole batch); the client sends this write again on its own.
        SELECT s.next_seq, {live}, s.labels IS NOT NULL{inc} INTO {into}
            FROM {row} FOR UPDATE SKIP LOCKED;
        IF NOT FOUND AND EXISTS (SELECT 1 FROM {row}) THEN
            o_status := {BUSY};
            RETURN;
        END IF;
    ELSE
        SELECT s.next_seq, {live}, s.labels IS NOT NULL{inc} INTO {into}
            FROM {row} FOR UPDATE;
    END IF;
    {fence}
    IF v_next IS NULL OR NOT v_live THEN
        o_status := {MISSING};
        RETURN;
    END IF;
    {check_inc}
    o_next := v_next;{checks}
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
    """The row held, the fence, then the row, its entries and labels (the lease row stays:
    the next acquire's token is greater)."""
    return f"""
BEGIN
    {DURABLE}
    PERFORM 1 FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_id FOR UPDATE;
    {leases.fence(sql, "p_lease_owner", "p_lease_token")}
    DELETE FROM {sql.states} WHERE ns = p_ns AND id = p_id;
    DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = p_id;
    DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id = p_id;
    o_status := {OK};
END
"""


def _fork_body(sql: Sql, *, incarnation: bool = False) -> str:
    """Version 2's fork (the source held FOR SHARE, checked live and still holding the
    entries that were read, then the new row and one INSERT ... SELECT of its entries),
    refusing (FENCED) to create the new State while another worker holds its lease.
    ``incarnation`` (version 4): the new State gets ``p_incarnation``."""
    store_inc = ""
    if incarnation:
        store_inc = f"UPDATE {sql.states} SET incarnation = p_incarnation WHERE ns = p_ns AND id = p_id;"
    copy = f"""SELECT p_ns, p_id, e.seq, e.data FROM {sql.entries} e
            WHERE e.ns = p_ns AND e.state_id = p_src AND e.seq <= p_at"""
    return f"""
DECLARE
    v_n bigint := p_at + 1;
    v_next bigint;
    v_live boolean;{_DECLARE}
BEGIN
    {DURABLE}
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
    {leases.lock(sql)}
    PERFORM 1 FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_id FOR UPDATE;
    {leases.fence(sql, "NULL::text", "NULL::bigint")}
    {_create_row(sql, copy)}
    {store_inc}
    o_status := {OK};
END
"""


def _gc_body(sql: Sql) -> str:
    """Remove at most ``p_limit`` expired States of ``p_ns`` that no live lease holds;
    return how many. The rows are locked first (rows a writer or an acquire holds are
    skipped), then removed by a statement that sees every lease acquired before the locks
    (an acquire takes the State's row first), with each row's expiry checked again."""
    live_lease = f"""EXISTS (SELECT 1 FROM {sql.leases} l
            WHERE l.ns = p_ns AND l.state_id = s.id AND l.expires_at > clock_timestamp())"""
    return f"""
DECLARE
    v_ids text[];
BEGIN
    {DURABLE}
    SELECT array_agg(d.id) INTO v_ids FROM (
        SELECT s.id FROM {sql.states} s
        WHERE s.ns = p_ns AND s.expires_at <= now() AND NOT {live_lease}
        ORDER BY s.expires_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) d;
    WITH gone AS (
        DELETE FROM {sql.states} s
        WHERE s.ns = p_ns AND s.id = ANY (v_ids) AND s.expires_at <= now() AND NOT {live_lease}
        RETURNING s.id
    )
    SELECT array_agg(id) INTO v_ids FROM gone;
    DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = ANY (v_ids);
    DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id = ANY (v_ids);
    RETURN coalesce(cardinality(v_ids), 0);
END
"""
