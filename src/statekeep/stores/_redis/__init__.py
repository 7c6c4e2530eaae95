"""RedisStore: every State under a key prefix in Redis, through redis-py's asyncio client.

Keys, for a prefix ``P`` (default ``statekeep:``)::

    P state:{id}     hash: next (the seq expected next), snapshot (JSON, when there is one)
    P entries:{id}   list: the entries as JSON, index = seq
    P index          sorted set: ids of States with a snapshot, scored by its updated_at
    P layout         the key layout's version; a newer one is refused

Every write is one server-side Lua script, so it is atomic and serialised with every
other write to the State, from any process or host: it checks the seq rules, appends the
new entries, replaces the snapshot and updates the index, or changes nothing.

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

No command matches keys by pattern (no ``SCAN``, no ``KEYS``): ``list()`` reads the index,
``delete()`` names the State's keys. So glob characters in a prefix (``*?[]``) are plain
characters, and a store never sees another prefix's States.

The package: :mod:`._store` (the class and its operations), :mod:`._lua` (the scripts),
:mod:`._client` (the client of each process), :mod:`._layout` (the checks on connect).
"""

from ._layout import LAYOUT_VERSION
from ._store import RedisStore, redact_url

__all__ = ["LAYOUT_VERSION", "RedisStore", "redact_url"]
