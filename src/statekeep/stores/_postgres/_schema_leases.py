"""Schema version 3 of PostgresStore, its leases: the ``leases`` table, the fence every
write, delete and fork runs, and the acquire, renew, release and reseal functions.

One row per (namespace, State): ``(owner, token, expires_at, ttl)``, kept after a release
(``expires_at`` set to the Unix epoch) and after the State is deleted, so the token of a
State only grows. Every judgment uses the server's clock at the moment it is made
(``clock_timestamp()``), the rules of :mod:`statekeep._core.leases` spelled in PL/pgSQL; a
refusal returns the lease row and that time, from which the client raises the same error
the pure rule would (:mod:`._leases`).

Why the fence is atomic without locking the lease row: only an acquire changes a row's
token, and an acquire first takes the State's row ``FOR SHARE``, which waits for a write
holding it ``FOR UPDATE`` (and a write waits for the acquire). So a write that holds the
State's row reads a lease row no acquire can change before the write commits. A State with
no row yet has no row to lock, so a create (a write's or a fork's) and an acquire also
take a transaction-scoped advisory lock on (namespace, id) first (:func:`lock`): an acquire
waits for a create under way and a create for an acquire, so an acquire never returns
while a create its fence let through is still to commit. (Renew and release need not:
neither gives a lease a create's fence refused.)
"""

from __future__ import annotations

import hashlib

from .._server import OK
from ._schema_v2 import DURABLE, dollar_quote
from ._sql import Sql

#: A write, delete, fork, acquire or renew refused by the State's lease (the function
#: returns the lease row and the server's time with it).
FENCED = 6

#: What the functions that report a lease return with their status.
HOLDER_OUT = "OUT o_owner text, OUT o_token bigint, OUT o_until timestamptz, OUT o_now timestamptz"


def table(sql: Sql) -> str:
    return f"""CREATE TABLE {sql.leases} (
            ns text COLLATE "C" NOT NULL,
            state_id text COLLATE "C" NOT NULL,
            owner text COLLATE "C" NOT NULL,
            token bigint NOT NULL,
            expires_at timestamptz NOT NULL,
            ttl interval NOT NULL,
            PRIMARY KEY (ns, state_id)
        )"""


def lock(sql: Sql) -> str:
    """The statement taking the advisory lock of the State ``p_id`` of namespace ``p_ns``
    (held to the end of the transaction; see the module docstring). Its key is a hash of
    (namespace, id) seeded by the store's tables, so stores in other schemas or with other
    prefixes share no keys; two ids of one hash only wait for each other."""
    seed = int.from_bytes(hashlib.blake2b(sql.leases.encode(), digest_size=8).digest(), "big", signed=True)
    return f"PERFORM pg_advisory_xact_lock(hashtextextended(p_ns || E'\\x1f' || p_id, {seed}));"


def fence(sql: Sql, owner: str, token: str) -> str:
    """The fence of :func:`statekeep._core.leases.check_fence` for the State ``p_id``, run once
    its row is held (see the module docstring); ``owner`` and ``token`` are the lease given
    (NULL: none). Refused: ``o_status`` FENCED with the lease row, and the function returns.
    Without a lease row and without a lease given it costs one index lookup."""
    return f"""SELECT l.owner, l.token, l.expires_at INTO o_owner, o_token, o_until
        FROM {sql.leases} l WHERE l.ns = p_ns AND l.state_id = p_id;
    IF o_token IS NOT NULL OR {token} IS NOT NULL THEN
        o_now := clock_timestamp();
        IF (CASE WHEN {token} IS NULL THEN o_until > o_now
                 ELSE o_token IS DISTINCT FROM {token} OR o_owner IS DISTINCT FROM {owner}
                      OR o_until <= o_now END) THEN
            o_status := {FENCED};
            RETURN;
        END IF;
        o_owner := NULL;
        o_token := NULL;
        o_until := NULL;
        o_now := NULL;
    END IF;"""


def functions(sql: Sql) -> tuple[str, ...]:
    """The statements creating the lease functions."""
    head = "LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS"
    return (
        f"""CREATE FUNCTION {sql.acquire_fn}(p_ns text, p_id text, p_owner text, p_ttl interval,
                OUT o_status integer, {HOLDER_OUT}) {head} {dollar_quote(_acquire_body(sql))}""",
        f"""CREATE FUNCTION {sql.renew_fn}(p_ns text, p_id text, p_owner text, p_token bigint,
                p_ttl interval, OUT o_status integer, {HOLDER_OUT}) {head} {dollar_quote(_renew_body(sql))}""",
        f"""CREATE FUNCTION {sql.release_fn}(p_ns text, p_id text, p_owner text, p_token bigint)
                RETURNS void {head} {dollar_quote(_release_body(sql))}""",
        f"""CREATE FUNCTION {sql.reseal_fn}(p_ns text, p_id text, p_seqs bigint[], p_old text[],
                p_new text[], p_snapshot_old text, p_snapshot_new text, p_task text)
                RETURNS integer {head} {dollar_quote(_reseal_body(sql))}""",
    )


def _acquire_body(sql: Sql) -> str:
    """:func:`statekeep._core.leases.acquired`: a new row of token 1, or the row's token + 1 if
    its lease has ended; FENCED with the holder while it is live."""
    row = "l.ns = p_ns AND l.state_id = p_id"
    return f"""
BEGIN
    {DURABLE}
    -- After any create or write of the State under way (see the module docstring), then
    -- the lease row held, so the time read next is the time the row is judged and changed at.
    {lock(sql)}
    PERFORM 1 FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_id FOR SHARE;
    PERFORM 1 FROM {sql.leases} l WHERE {row} FOR UPDATE;
    o_now := clock_timestamp();
    INSERT INTO {sql.leases} AS l (ns, state_id, owner, token, expires_at, ttl)
        VALUES (p_ns, p_id, p_owner, 1, o_now + p_ttl, p_ttl)
        ON CONFLICT (ns, state_id) DO UPDATE SET owner = EXCLUDED.owner, token = l.token + 1,
            expires_at = EXCLUDED.expires_at, ttl = EXCLUDED.ttl
        WHERE l.expires_at <= o_now
        RETURNING l.owner, l.token, l.expires_at INTO o_owner, o_token, o_until;
    IF FOUND THEN
        o_status := {OK};
        RETURN;
    END IF;
    SELECT l.owner, l.token, l.expires_at INTO o_owner, o_token, o_until FROM {sql.leases} l WHERE {row};
    o_status := {FENCED};
END
"""


def _renew_body(sql: Sql) -> str:
    """:func:`statekeep._core.leases.renewed`: the current, live lease extended to now + ttl."""
    return f"""
BEGIN
    {DURABLE}
    SELECT l.owner, l.token, l.expires_at INTO o_owner, o_token, o_until
        FROM {sql.leases} l WHERE l.ns = p_ns AND l.state_id = p_id FOR UPDATE;
    o_now := clock_timestamp();
    IF o_token = p_token AND o_owner = p_owner AND o_until > o_now THEN
        o_until := o_now + p_ttl;
        UPDATE {sql.leases} SET expires_at = o_until, ttl = p_ttl WHERE ns = p_ns AND state_id = p_id;
        o_status := {OK};
    ELSE
        o_status := {FENCED};
    END IF;
END
"""


def _release_body(sql: Sql) -> str:
    """:func:`statekeep._core.leases.released`: a current, live lease ends (token kept), its
    ``expires_at`` set to :data:`~statekeep._core.leases.ENDED`, the Unix epoch, so no clock
    stepping back can make it live again."""
    return f"""
BEGIN
    {DURABLE}
    UPDATE {sql.leases} SET expires_at = 'epoch'::timestamptz
        WHERE ns = p_ns AND state_id = p_id AND token = p_token AND owner = p_owner
          AND expires_at > clock_timestamp();
END
"""


def _reseal_body(sql: Sql) -> str:
    """Replace entries (and the snapshot, with its ``task`` column) of ``p_id`` where each
    still holds the old text (or the same JSON), under the State's row lock; return how
    many were replaced. ``jsonb`` cannot hold a NUL character: such text is compared as text."""
    same = """CASE WHEN {a} = {b} THEN true
                  WHEN strpos({a}, '\\u0000') > 0 OR strpos({b}, '\\u0000') > 0 THEN false
                  ELSE {a}::jsonb = {b}::jsonb END"""
    return f"""
DECLARE
    v_count integer := 0;
    v_more integer;
BEGIN
    {DURABLE}
    PERFORM 1 FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    UPDATE {sql.entries} e SET data = u.new
        FROM unnest(p_seqs, p_old, p_new) AS u(seq, old, new)
        WHERE e.ns = p_ns AND e.state_id = p_id AND e.seq = u.seq
          AND {same.format(a="e.data", b="u.old")};
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF p_snapshot_old IS NOT NULL THEN
        UPDATE {sql.states} s SET snapshot = p_snapshot_new, task = p_task
            WHERE s.ns = p_ns AND s.id = p_id AND {same.format(a="s.snapshot", b="p_snapshot_old")};
        GET DIAGNOSTICS v_more = ROW_COUNT;
        v_count := v_count + v_more;
    END IF;
    RETURN v_count;
END
"""
