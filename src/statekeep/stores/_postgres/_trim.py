"""PostgresStore's trim (``store.trim``, agent memory's keys): a State's first entries
deleted and its base record written in their place, in one transaction, under the State's
row lock as writes take it: a ``SELECT ... FOR UPDATE`` of the State's row, then one
statement (:func:`trim_sql`) that reads the entries as committed once the lock was held.
The deleted rows' space is reused once (auto)vacuum has passed over them.

The statement trims only while the State still starts at the seq the trim read (``$5``): a
trim of another process between that read and this one may have released a blob the base
refers to, so the trim is refused then (StateConflictError, nothing changed) and read again.
A single statement would not do: its reads of the entries use the snapshot it began with,
taken before it waited for the row lock the other trim held.

The same statement recomputes the State's blob references from what it keeps (the base, the
kept entries, and its snapshot), each line read by its list ``"sk.blobs"`` (which names the
blobs nested inside others too) and the references in its body: a reference no kept line makes is deleted (gc then removes a
blob no other State refers to), and one a kept entry makes moves to the first seq that makes
it (a fork copies it with that entry). A sealed line (encrypted store) lists its names in
clear as any line does (see :mod:`statekeep.stores._blob_names`).
"""

from __future__ import annotations

from ..._core.writes import missing_error, trimmed_meanwhile
from ._sql import Sql

# What a stored line refers to: its list ``"sk.blobs":[...]`` (every name, the inner ones of
# a nested value too: :func:`statekeep._core.blobs.names_in`) and any reference in its body
# (``"sk.blob":"NAME"``; escaped inside a string value, so never matched there), as POSIX
# regular expressions in SQL literals.
_REF = r"""'"sk\.blob":"([^"\\]+)"'"""
_LIST = r"""'"sk\.blobs":\[([^]]*)\]'"""
_HEX = "'[0-9a-f]{64}'"


def lock_sql(sql: Sql) -> str:
    """The State's row locked for the trim: ``$1`` namespace, ``$2`` id."""
    return f"SELECT 1 FROM {sql.states} WHERE ns = $1 AND id = $2 FOR UPDATE"


def trim_sql(sql: Sql) -> str:
    """The statement: ``$1`` namespace, ``$2`` id, ``$3`` before, ``$4`` the base's text,
    ``$5`` the first seq the trim read. Returns the State's next seq (NULL: no State) and its
    first seq before the trim; nothing is changed unless that first seq is ``$5``."""
    return f"""
        WITH s AS (
            SELECT next_seq FROM {sql.states} WHERE ns = $1 AND id = $2 FOR UPDATE
        ), f AS (
            SELECT min(e.seq) AS first FROM {sql.entries} e, s WHERE e.ns = $1 AND e.state_id = $2
        ), ok AS (
            SELECT 1 FROM s, f
            WHERE f.first = $5::bigint AND f.first < $3::bigint AND $3::bigint <= s.next_seq
        ), gone AS (
            DELETE FROM {sql.entries} e USING ok
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq < $3::bigint - 1
        ), base AS (
            UPDATE {sql.entries} e SET data = $4 FROM ok
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq = $3::bigint - 1
        ), kept AS (
            SELECT e.seq, e.data FROM {sql.entries} e, ok
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq >= $3::bigint
              AND (strpos(e.data, '"sk.blobs":') > 0 OR strpos(e.data, '"sk.blob":"') > 0)
            UNION ALL SELECT $3::bigint - 1, $4 FROM ok
            UNION ALL SELECT NULL, st.snapshot FROM {sql.states} st, ok
            WHERE st.ns = $1 AND st.id = $2 AND st.snapshot IS NOT NULL
        ), named AS (
            SELECT x.name, min(x.seq) AS seq FROM (
                SELECT m[1] AS name, kept.seq FROM kept, regexp_matches(kept.data, {_REF}, 'g') m
                UNION ALL
                SELECT h[1], kept.seq FROM kept, regexp_matches(kept.data, {_LIST}, 'g') l,
                    regexp_matches(l[1], {_HEX}, 'g') h
            ) x GROUP BY x.name
        ), unref AS (
            DELETE FROM {sql.blob_refs} r USING ok
            WHERE r.ns = $1 AND r.state_id = $2
              AND NOT EXISTS (SELECT 1 FROM named n WHERE n.name = r.name)
        ), moved AS (
            UPDATE {sql.blob_refs} r SET seq = n.seq FROM named n, ok
            WHERE r.ns = $1 AND r.state_id = $2 AND r.name = n.name AND r.seq <> n.seq
        )
        SELECT (SELECT next_seq FROM s), (SELECT first FROM f)"""


def check_trimmed(sid: str, before: int, next_seq: int | None, first: int | None, read_first: int) -> None:
    """Raise for a trim the statement refused (no State, trimmed by another process since it
    was read at ``read_first``, or no seq ``before - 1``)."""
    if next_seq is None:
        raise missing_error(sid)
    if first is not None and first != read_first:
        raise trimmed_meanwhile(sid, read_first, first)
    if first is None or not first < before <= next_seq:
        raise ValueError(f"State {sid!r} holds seqs {first} to {next_seq - 1}; nothing was trimmed")
