"""RedisStore's trim script (``store.trim``, agent memory's keys): a State's list cut to
start at its base record (``LTRIM``, then ``LSET`` of the base in its first place), and the
hash field ``first`` set to the base's seq, in one script: atomic, and serialised with every
write to the State. Redis frees the removed entries at once."""

from __future__ import annotations

from .._server import GAP, MISSING, OK
from ._lua import COMMON

#: KEYS: state hash, entries list. ARGV: before, the base's encoded line.
TRIM = (
    COMMON
    + f"""
if not live(KEYS[1]) then return {{{MISSING}}} end
local h = redis.call('HMGET', KEYS[1], 'next', 'first')
local nxt = tonumber(h[1])
local off = tonumber(h[2] or '0')
local before = tonumber(ARGV[1])
if not (off < before and before <= nxt) then return {{{GAP}, off, nxt}} end
redis.call('LTRIM', KEYS[2], before - 1 - off, -1)
redis.call('LSET', KEYS[2], 0, ARGV[2])
redis.call('HSET', KEYS[1], 'first', string.format('%d', before - 1))
return {{{OK}}}
"""
)
