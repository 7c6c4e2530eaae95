"""RedisStore's trim script (``store.trim``, agent memory's keys): a State's list cut to
start at its base record (``LTRIM``, then ``LSET`` of the base in its first place), and the
hash field ``first`` set to the base's seq, in one script: atomic, and serialised with every
write to the State. Redis frees the removed entries at once. The script trims only while the
State's ``first`` is still the seq the trim read (ARGV[4]): another process's trim since may
have released a blob the base refers to, so it returns ``COMPARE`` then, changing nothing,
and the trim reads the State again.

The same script releases the blobs that only the removed entries referred to: for a State
that refers to blobs (its hash has a blob generation ``bg``, see :mod:`._blob_lua`), each
name a removed entry refers to (its list ``"sk.blobs"``, which names the blobs nested
inside others too, or a ``"sk.blob":"NAME"`` in its body) that no kept line (the base, the kept
entries, the snapshot) refers to loses the State from its ``blobref:`` set, so gc removes the
blob once no other State refers to it. A sealed line (encrypted store) lists its names in
clear as any line does; one that lists none refers to none. Those ``blobref:`` keys are named at run
time from the blob prefix (ARGV[3]), not declared in KEYS: fine on one server, not on a
Redis Cluster (see the report of issue 24 / issue 27).
"""

from __future__ import annotations

from .._server import COMPARE, GAP, MISSING, OK
from ._blob_lua import LINE_NAMES
from ._lua import COMMON

#: The names a stored line refers to are added to a table by ``line_names`` (its list
#: ``"sk.blobs"``, in clear on a sealed line too, and the references in its body).
_RELEASE = r"""
-- Drop the State (member state#bg) from the referrers of the blobs only ``removed`` named.
local function release_trimmed(p, state, entries, bg, removed, base)
  local gone = {}
  for _, line in ipairs(removed) do line_names(line, gone) end
  if next(gone) == nil then return end
  local kept = {}
  line_names(base, kept)
  for _, line in ipairs(redis.call('LRANGE', entries, 1, -1)) do line_names(line, kept) end
  local snap = redis.call('HGET', state, 'snapshot')
  if snap then line_names(snap, kept) end
  local me = state .. '#' .. bg
  for name in pairs(gone) do
    if not kept[name] then redis.call('SREM', p .. 'blobref:' .. name, me) end
  end
end
"""

#: KEYS: state hash, entries list. ARGV: before, the base's encoded line, the blob key prefix,
#: the first seq the trim read.
TRIM = (
    COMMON
    + LINE_NAMES
    + _RELEASE
    + f"""
if not live(KEYS[1]) then return {{{MISSING}}} end
local h = redis.call('HMGET', KEYS[1], 'next', 'first', 'bg')
local nxt = tonumber(h[1])
local off = tonumber(h[2] or '0')
local before = tonumber(ARGV[1])
if off ~= tonumber(ARGV[4]) then return {{{COMPARE}, off, nxt}} end
if not (off < before and before <= nxt) then return {{{GAP}, off, nxt}} end
local removed = nil
if h[3] then removed = redis.call('LRANGE', KEYS[2], 0, before - 1 - off) end
redis.call('LTRIM', KEYS[2], before - 1 - off, -1)
redis.call('LSET', KEYS[2], 0, ARGV[2])
redis.call('HSET', KEYS[1], 'first', string.format('%d', before - 1))
if h[3] then release_trimmed(ARGV[3], KEYS[1], KEYS[2], h[3], removed, ARGV[2]) end
return {{{OK}}}
"""
)
