"""Schema version 4 of PostgresStore: each State's incarnation, and the write's
preconditions (see :mod:`statekeep._store.expect`).

From version 3, in the migration's one transaction: the column ``incarnation`` of the
``states`` table (NULL for the States made before), and the write and fork functions
replaced by version 3's with these added (:mod:`._schema_v3`):

- a create (and a fork) stores the new State's incarnation (``p_incarnation``), which no
  later write changes;
- an append bound to an incarnation (``p_bound``: a sealed one, its records sealed for it)
  is refused with REBORN when the State's is another (it was deleted and created again);
- ``p_expect_next`` (NULL: none) other than the State's next seq: UNEXPECTED, with that
  next seq;
- a clear write (``p_clear``: it is not sealed) to a sealed State (its snapshot, else its
  last entry, is sealed): SEALED_STATE.

The preconditions run in that order, once the State's row is held and known live.
A statekeep at version 3 refuses version 4 tables, rather than append records to a State
it cannot bind them to, which its readers then could not open (and it has no such write
function any more).
"""

from __future__ import annotations

from typing import Any

from ..._core.writes import PreparedWrite
from .._server import SEALED_STATE, UNEXPECTED
from . import _schema_leases as leases
from ._schema_v2 import FORK_ARGS, WRITE_ARGS, dollar_quote
from ._schema_v3 import _HEAD, _LEASE_ARGS, _fork_body, _types, _write_body
from ._sql import Sql

#: What version 4's write and fork take after version 3's arguments (before ``p_nowait``).
PRECONDITION_ARGS = ("p_expect_next bigint", "p_clear boolean", "p_incarnation text", "p_bound boolean")
FORK_INCARNATION = ("p_incarnation text",)
#: How a sealed record ends (statekeep._store.expect.sealed_text), as a regular expression.
_SEALED = '"sk[.]sealed":"[^"]*"[}]$'


def precondition_args(write: PreparedWrite) -> tuple[Any, ...]:
    """The write function's last arguments for ``write`` (:data:`PRECONDITION_ARGS`, before ``p_nowait``)."""
    return write.expect_next, write.opener is None, write.incarnation, write.bound


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 3 to version 4."""
    write_args = ", ".join((*WRITE_ARGS, *_LEASE_ARGS, *PRECONDITION_ARGS))
    fork_args = ", ".join((*FORK_ARGS, *FORK_INCARNATION))
    return (
        f"ALTER TABLE {sql.states} ADD COLUMN incarnation text",
        f"DROP FUNCTION {sql.write_fn}({_types((*WRITE_ARGS, *_LEASE_ARGS))}, boolean)",
        f"DROP FUNCTION {sql.fork_fn}({_types(FORK_ARGS)})",
        f"""CREATE FUNCTION {sql.write_fn}({write_args}, p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[], {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_write_body(sql, _checks(sql), incarnation=True))}""",
        f"""CREATE FUNCTION {sql.fork_fn}({fork_args}, OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_fork_body(sql, incarnation=True))}""",
    )


def _checks(sql: Sql) -> str:
    """The preconditions after the incarnation's, run with the State's row held
    (``v_next``: its next seq)."""
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
