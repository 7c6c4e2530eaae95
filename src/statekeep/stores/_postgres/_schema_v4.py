"""Schema version 4 of PostgresStore: each State's incarnation.

From version 3, in the migration's one transaction: the column ``incarnation`` of the
``states`` table (NULL for the States made before), and the write and fork functions
replaced by version 3's with the incarnation added (:mod:`._schema_v3`):

- a create (and a fork) stores the new State's incarnation, which no later write changes;
- an append bound to an incarnation (a sealed one: its records are sealed for it) is
  refused with REBORN when the State's is another (it was deleted and created again).

A statekeep at version 3 refuses version 4 tables, rather than append records to a State
it cannot bind them to, which its readers then could not open.
"""

from __future__ import annotations

from . import _schema_leases as leases
from ._schema_v2 import FORK_ARGS, WRITE_ARGS, dollar_quote
from ._schema_v3 import _HEAD, _LEASE_ARGS, _fork_body, _types, _write_body
from ._sql import Sql

#: What version 4's write and fork take after version 3's arguments (before ``p_nowait``).
WRITE_INCARNATION = ("p_incarnation text", "p_bound boolean")
FORK_INCARNATION = ("p_incarnation text",)


def migration(sql: Sql) -> tuple[str, ...]:
    """The statements from version 3 to version 4."""
    write_args = ", ".join((*WRITE_ARGS, *_LEASE_ARGS, *WRITE_INCARNATION))
    fork_args = ", ".join((*FORK_ARGS, *FORK_INCARNATION))
    return (
        f"ALTER TABLE {sql.states} ADD COLUMN incarnation text",
        f"DROP FUNCTION {sql.write_fn}({_types((*WRITE_ARGS, *_LEASE_ARGS))}, boolean)",
        f"DROP FUNCTION {sql.fork_fn}({_types(FORK_ARGS)})",
        f"""CREATE FUNCTION {sql.write_fn}({write_args}, p_nowait boolean,
                OUT o_status integer, OUT o_next bigint, OUT o_stored text[], {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_write_body(sql, incarnation=True))}""",
        f"""CREATE FUNCTION {sql.fork_fn}({fork_args}, OUT o_status integer, {leases.HOLDER_OUT})
            {_HEAD} {dollar_quote(_fork_body(sql, incarnation=True))}""",
    )
