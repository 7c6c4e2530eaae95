"""PostgresStore's trim (``store.trim``, agent memory's keys): a State's first entries
deleted and its base record written in their place, in one statement (one transaction),
under the State's row lock as writes take it. The deleted rows' space is reused once
(auto)vacuum has passed over them.
"""

from __future__ import annotations

from ..._core.writes import missing_error
from ._sql import Sql


def trim_sql(sql: Sql) -> str:
    """The statement: ``$1`` namespace, ``$2`` id, ``$3`` before, ``$4`` the base's text.
    Returns the State's next seq (NULL: no State) and its first seq before the trim."""
    return f"""
        WITH s AS (
            SELECT next_seq FROM {sql.states} WHERE ns = $1 AND id = $2 FOR UPDATE
        ), f AS (
            SELECT min(e.seq) AS first FROM {sql.entries} e, s WHERE e.ns = $1 AND e.state_id = $2
        ), ok AS (
            SELECT 1 FROM s, f WHERE f.first < $3::bigint AND $3::bigint <= s.next_seq
        ), gone AS (
            DELETE FROM {sql.entries} e USING ok
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq < $3::bigint - 1
        ), base AS (
            UPDATE {sql.entries} e SET data = $4 FROM ok
            WHERE e.ns = $1 AND e.state_id = $2 AND e.seq = $3::bigint - 1
        )
        SELECT (SELECT next_seq FROM s), (SELECT first FROM f)"""


def check_trimmed(sid: str, before: int, next_seq: int | None, first: int | None) -> None:
    """Raise for a trim the statement refused (no State, or no seq ``before - 1``)."""
    if next_seq is None:
        raise missing_error(sid)
    if first is None or not first < before <= next_seq:
        raise ValueError(f"State {sid!r} holds seqs {first} to {next_seq - 1}; nothing was trimmed")
