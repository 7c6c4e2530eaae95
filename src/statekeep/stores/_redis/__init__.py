"""RedisStore: every State under a key prefix in Redis, through redis-py's asyncio client.

Keys (layout 2), for a prefix ``P`` (default ``statekeep:``) and a namespace whose keys
start with ``N`` (``P`` for the default namespace, ``P ns:{name}:`` for another)::

    N state:{id}     hash: next (the seq expected next), snapshot (JSON, when there is one),
                     exp (its expiry, microseconds since 1970, when it has one)
    N entries:{id}   list: the entries as JSON, index = seq
    N ix:all         the listing index: members "<updated_at counting down><id>", score 0,
                     read by ZRANGEBYLEX in listing order (see ._keys)
    N ix:agent:{a}, ix:parent:{p}, ix:label:{k}={v}, ix:status:{s}, ix:stopped:{r}
                     the same members, for the States with that value
    N ix:rows        hash: id -> the indexes its member is in (to take it out again)
    N ix:bad         ids of States whose snapshot is no listing row (warned about by list())
    N ix:expiry      ids scored by their expiry: what gc looks at
    N lease:{id}     hash: the State's lease row: owner, token, exp and ttl (microseconds);
                     no TTL, and kept after a release and a delete, so tokens only grow
    P layout         the key layout's version; a newer one is refused, layout 1 upgraded
    N wait           with wait_replicas only: set to 1 before each WAIT, so that WAIT always
                     follows a write of its connection (see ._cluster)

Every write is one server-side Lua script, so it is atomic and serialised with every
other write to the State, from any process or host: it checks the seq rules, appends the
new entries, replaces the snapshot and updates the indexes and the keys' native expiry, or
changes nothing. Expiry is judged by the server's clock (``TIME`` in the scripts). The
same script checks the State's lease (the fence), so a write refused by it changes nothing.

Skipping entries the store already has: the script compares each overlapping stored
entry with the sent one byte for byte. statekeep's encoder gives the same bytes for the
same dict, so a resent write normally matches there. When the bytes differ (equal dicts
whose keys are in another order), the script writes nothing and returns the stored
entries; statekeep decodes and compares them in Python with the rule every store uses
(a real difference is a StateConflictError) and sends the write again with the stored
bytes it found equal, which the script accepts only if the State still holds exactly
those bytes.
No JSON is decoded in Lua, and each compare happens in the same script as the append.

Writes that wait at the same moment in one process, to different States, go to the
server in one pipeline (one round trip; the server fsyncs its log once for the lot).

On a Redis Cluster every key of a namespace is under ``P{name}:`` instead (one hash tag:
one slot), blobs too; see :mod:`._cluster`.

No command matches keys by pattern (no ``SCAN``, no ``KEYS``): ``list()`` reads the indexes,
``delete()`` and ``gc()`` name the State's keys. So glob characters in a prefix (``*?[]``) are plain
characters, and a store never sees another prefix's States.

The package: :mod:`._store` (the class and its operations), :mod:`._lua` (the scripts),
:mod:`._args` (their arguments), :mod:`._keys` (key names, index members),
:mod:`._listing` (pages and gc), :mod:`._client` (the client of each process),
:mod:`._layout` (the checks on connect, the upgrade of layout 1), :mod:`._leases` and
:mod:`._lease_lua` (leases: their calls and their scripts), :mod:`._cluster` (Redis Cluster,
``wait_replicas``); ``failover_timeout`` is the server stores' shared resend
(:mod:`statekeep.stores._server._failover`).
"""

from ._layout import LAYOUT_VERSION
from ._store import RedisStore, redact_url

__all__ = ["LAYOUT_VERSION", "RedisStore", "redact_url"]
