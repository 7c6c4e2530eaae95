"""Schema version 5 of PostgresStore: blobs, large values stored once (issue 24).

From version 4, in the migration's one transaction:

- the ``blobs`` table (name: the hex SHA-256 or HMAC the value is named by; its bytes),
  shared by every namespace of the tables, and ``blob_refs``: which State refers to which
  blob (``seq``: the first new entry of the write that referred to it, so a fork copies the
  references of the entries it copies), with a foreign key to ``blobs``: a reference never
  outlives its blob;
- the write function takes the write's blobs (``p_blob_names``, ``p_blob_data``, NULL for
  none) and the names its entries refer to (``p_blob_refs``). Once the write is accepted
  (fence, preconditions, seq rules), before any entry is written, it stores the blobs it
  carries (a name already stored keeps its bytes: ``ON CONFLICT DO NOTHING``) and holds
  every blob it refers to with ``FOR KEY SHARE`` until it commits; one removed meanwhile is
  stored again from the bytes carried, and one neither stored nor carried refuses the write
  (BLOB_MISSING) with nothing written. Its references go in with its entries;
- delete, gc (of expired States) and a create that replaces an expired State remove the
  State's references; a fork copied on the server copies those of the entries it copies;
- ``gc_blobs`` removes up to ``p_limit`` blobs no reference names: it first locks them
  ``FOR UPDATE SKIP LOCKED`` (a blob a write in flight holds is skipped), then deletes
  those still unreferenced in a second statement, whose snapshot sees every write that
  committed before it. A write that comes after the lock waits for gc's commit and then
  stores the blob again. So a blob a committed or in-flight write refers to is never
  removed, at READ COMMITTED, from any number of processes.

A statekeep at version 4 refuses version 5 tables (it would show references as values,
fork without references, and its write function is gone).
"""

from __future__ import annotations

from typing import Any

from ..._core.writes import PreparedWrite
from .._server import BLOB_MISSING
from . import _schema_leases as leases
from ._schema_v2 import DURABLE, FORK_ARGS, WRITE_ARGS, dollar_quote
from ._schema_v3 import _HEAD, _LEASE_ARGS, _delete_body, _fork_body, _gc_body, _types, _write_body
from ._schema_v4 import FORK_INCARNATION, PRECONDITION_ARGS, _checks
from ._sql import Sql

#: What version 5's write takes after version 4's arguments (before ``p_nowait``).
BLOB_ARGS = ("p_blob_names text[]", "p_blob_data bytea[]", "p_blob_refs text[]")


def blob_args(write: PreparedWrite) -> tuple[Any, ...]:
    """The write function's blob arguments for ``write`` (:data:`BLOB_ARGS`): names in
    order, so that writes lock the same blobs in the same order."""
    if write.blobs:
        names = sorted(write.blobs)
        carried: tuple[Any, Any] = (names, [write.blobs[n] for n in names])
    else:
        carried = (None, None)
    return (*carried, sorted(write.blob_refs) if write.blob_refs else None)


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 4 to version 5."""
    v4_write = (*WRITE_ARGS, *_LEASE_ARGS, *PRECONDITION_ARGS)
    write_args = ", ".join((*v4_write, *BLOB_ARGS))
    fork_args = ", ".join((*FORK_ARGS, *FORK_INCARNATION))
    return (
        f"""CREATE TABLE {sql.blobs} (
            name text COLLATE "C" PRIMARY KEY,
            data bytea NOT NULL
        )""",
        f"""CREATE TABLE {sql.blob_refs} (
            ns text COLLATE "C" NOT NULL,
            state_id text COLLATE "C" NOT NULL,
            name text COLLATE "C" NOT NULL REFERENCES {sql.blobs} (name),
            seq bigint NOT NULL,
            PRIMARY KEY (ns, state_id, name)
        )""",
        f"CREATE INDEX {sql.prefixed('blob_refs_name')} ON {sql.blob_refs} (name)",
        f"DROP FUNCTION {sql.write_fn}({_types(v4_write)}, boolean)",
        f"""CREATE FUNCTION {sql.write_fn}({write_args}, p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[], {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(write_body(sql))}""",
        f"""CREATE OR REPLACE FUNCTION {sql.delete_fn}(p_ns text, p_id text, {", ".join(_LEASE_ARGS)},
                OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_also(_delete_body(sql), _labels_gone(sql, "= p_id"), _refs_gone(sql, "= p_id")))}""",
        f"""CREATE OR REPLACE FUNCTION {sql.fork_fn}({fork_args}, OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(fork_body(sql))}""",
        f"""CREATE OR REPLACE FUNCTION {sql.gc_fn}(p_ns text, p_limit integer) RETURNS integer
            {_HEAD} {dollar_quote(_also(_gc_body(sql), _labels_gone(sql, "= ANY (v_ids)"), _refs_gone(sql, "= ANY (v_ids)")))}""",
        f"""CREATE FUNCTION {sql.gc_blobs_fn}(p_limit integer, p_dry boolean,
                OUT o_count bigint, OUT o_bytes bigint, OUT o_looked integer)
            {_HEAD} {dollar_quote(_gc_blobs_body(sql))}""",
    )


def write_body(sql: Sql) -> str:
    """Version 4's write, with the blobs held and stored once the write is accepted, and its
    references added with its entries (see the module's docstring)."""
    body = _write_body(sql, _checks(sql), incarnation=True)
    # The create: the blobs before its row (which may turn out EXISTS: blobs no one refers
    # to then, which gc removes), the references after its entries.
    create_row = f"INSERT INTO {sql.states} AS s (ns, id,"
    body = _before(body, create_row, _hold_blobs(sql) + "\n        ")
    body = _also(
        body, f"DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = p_id;", _refs_gone(sql, "= p_id")
    )
    body = _before(body, "        o_status := 0;\n        o_next := v_n;", _add_refs(sql, "0") + "\n")
    # The append: the blobs once every check passed, the references with the new entries.
    append = "    IF v_skip < v_n THEN\n        INSERT INTO"
    body = _before(body, append, _hold_blobs(sql) + "\n    " + _add_refs(sql, "p_first + v_skip") + "\n")
    return body.replace(
        "    v_skip integer := 0;", "    v_skip integer := 0;\n    v_held integer;\n    v_want integer;", 1
    )


def fork_body(sql: Sql) -> str:
    """Version 4's fork, with the references of the copied entries copied too (and those of
    an expired State the fork replaces removed)."""
    body = _fork_body(sql, incarnation=True)
    copy_refs = f"""{_refs_gone(sql, "= p_id")}
        INSERT INTO {sql.blob_refs} (ns, state_id, name, seq)
            SELECT p_ns, p_id, r.name, r.seq FROM {sql.blob_refs} r
            WHERE r.ns = p_ns AND r.state_id = p_src AND r.seq <= p_at
            ON CONFLICT DO NOTHING;"""
    return _also(body, f"DELETE FROM {sql.entries} WHERE ns = p_ns AND state_id = p_id;", copy_refs)


def _hold_blobs(sql: Sql) -> str:
    """Store the blobs the write carries and hold every blob it names (FOR KEY SHARE, until
    it commits); BLOB_MISSING, before anything of the write is stored, for a name neither
    stored nor carried."""
    named = "(b.name = ANY (p_blob_refs) OR b.name = ANY (p_blob_names))"
    return f"""IF p_blob_refs IS NOT NULL OR p_blob_names IS NOT NULL THEN
        v_want := (SELECT count(DISTINCT n) FROM unnest(coalesce(p_blob_refs, '{{}}') || coalesce(p_blob_names, '{{}}')) n);
        LOOP
            IF p_blob_names IS NOT NULL THEN
                INSERT INTO {sql.blobs} (name, data)
                    SELECT u.n, u.d FROM unnest(p_blob_names, p_blob_data) AS u(n, d)
                    ON CONFLICT (name) DO NOTHING;
            END IF;
            SELECT count(*) INTO v_held FROM (SELECT 1 FROM {sql.blobs} b WHERE {named} FOR KEY SHARE) h;
            EXIT WHEN v_held = v_want;
            IF EXISTS (SELECT 1 FROM unnest(p_blob_refs) r(n)
                       WHERE NOT (r.n = ANY (coalesce(p_blob_names, '{{}}')))
                         AND NOT EXISTS (SELECT 1 FROM {sql.blobs} b WHERE b.name = r.n)) THEN
                o_status := {BLOB_MISSING};
                RETURN;
            END IF;
            -- else gc removed one it carries between its insert and its lock: store it again
        END LOOP;
    END IF;"""


def _add_refs(sql: Sql, seq: str) -> str:
    return f"""IF p_blob_refs IS NOT NULL THEN
        INSERT INTO {sql.blob_refs} (ns, state_id, name, seq)
            SELECT p_ns, p_id, n, {seq} FROM unnest(p_blob_refs) n
            ON CONFLICT DO NOTHING;
    END IF;"""


def _labels_gone(sql: Sql, ids: str) -> str:
    return f"DELETE FROM {sql.labels} WHERE ns = p_ns AND state_id {ids};"


def _refs_gone(sql: Sql, ids: str) -> str:
    return f"\n    DELETE FROM {sql.blob_refs} WHERE ns = p_ns AND state_id {ids};"


def _gc_blobs_body(sql: Sql) -> str:
    unreferenced = f"NOT EXISTS (SELECT 1 FROM {sql.blob_refs} r WHERE r.name = b.name)"
    return f"""
DECLARE
    v_names text[];
BEGIN
    {DURABLE}
    IF p_dry THEN
        SELECT count(*), coalesce(sum(octet_length(b.data)), 0) INTO o_count, o_bytes
            FROM {sql.blobs} b WHERE {unreferenced};
        o_looked := 0;
        RETURN;
    END IF;
    SELECT array_agg(d.name) INTO v_names FROM (
        SELECT b.name FROM {sql.blobs} b WHERE {unreferenced}
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    ) d;
    o_looked := coalesce(cardinality(v_names), 0);
    -- A new snapshot: every write that committed before this statement is seen.
    WITH gone AS (
        DELETE FROM {sql.blobs} b WHERE b.name = ANY (v_names) AND {unreferenced}
        RETURNING octet_length(b.data) AS size
    )
    SELECT count(*), coalesce(sum(size), 0) INTO o_count, o_bytes FROM gone;
END
"""


def _before(body: str, anchor: str, text: str) -> str:
    assert body.count(anchor) == 1, anchor
    return body.replace(anchor, text + anchor)


def _also(body: str, anchor: str, text: str) -> str:
    """``body`` with ``text`` after its one ``anchor``."""
    assert body.count(anchor) == 1, anchor
    return body.replace(anchor, anchor + text)
