"""Schema version 4 of PostgresStore: the write's preconditions (see :mod:`statekeep._expect`).

From version 3, in the migration's one transaction: the write function is replaced by one
that also takes ``p_expect_next`` (NULL: none) and ``p_clear`` (the write is not sealed),
checked once the State's row is held and known live:

- ``p_expect_next`` other than the State's next seq: UNEXPECTED, with that next seq;
- a clear write to a sealed State (its snapshot, else its last entry, is sealed):
  SEALED_STATE.

Nothing else changes; version 3's tables are version 4's. A statekeep of version 3 refuses
the tables (their version is newer), as it has no such write function any more.
"""

from __future__ import annotations

from typing import Any

from ..._writes import PreparedWrite
from .._server import SEALED_STATE, UNEXPECTED
from . import _schema_leases as leases
from ._schema_v2 import WRITE_ARGS, dollar_quote
from ._schema_v3 import _HEAD, _LEASE_ARGS, _types, _write_body
from ._sql import Sql

_PRECONDITION_ARGS = ("p_expect_next bigint", "p_clear boolean")
#: How a sealed record ends (statekeep._expect.sealed_text), as a regular expression.
_SEALED = '"sk[.]sealed":"[^"]*"[}]$'


def precondition_args(write: PreparedWrite) -> tuple[Any, ...]:
    """The write function's last arguments (before ``p_nowait``) for ``write``."""
    return write.expect_next, write.opener is None


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 3 to version 4."""
    return (
        f"DROP FUNCTION {sql.write_fn}({_types((*WRITE_ARGS, *_LEASE_ARGS))}, boolean)",
        f"""CREATE FUNCTION {sql.write_fn}({", ".join((*WRITE_ARGS, *_LEASE_ARGS, *_PRECONDITION_ARGS))},
                p_nowait boolean, OUT o_status integer, OUT o_next bigint, OUT o_stored text[],
                {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_write_body(sql, _checks(sql)))}""",
    )


def _checks(sql: Sql) -> str:
    """The preconditions, run with the State's row held (``v_next``: its next seq)."""
    last_entry = f"""(SELECT e.data FROM {sql.entries} e
            WHERE e.ns = p_ns AND e.state_id = p_id AND e.seq = v_next - 1)"""
    return f"""
    IF p_expect_next IS NOT NULL AND p_expect_next <> v_next THEN
        o_status := {UNEXPECTED};
        RETURN;
    END IF;
    IF p_clear AND (SELECT coalesce(s.snapshot, {last_entry}) ~ '{_SEALED}'
                    FROM {sql.states} s WHERE s.ns = p_ns AND s.id = p_id) THEN
        o_status := {SEALED_STATE};
        RETURN;
    END IF;"""
