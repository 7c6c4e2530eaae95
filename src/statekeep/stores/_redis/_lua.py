"""The Lua scripts RedisStore runs on the server: the write (atomic, with the seq rules and
the compare of entries it already has) and the listing (in one call)."""

from __future__ import annotations

from .._server import COMPARE, EXISTS, GAP, MISSING, OK

# The write script's outcomes: those of every server store (OK, MISSING, ...), and its own:
# a key of the wrong type, nothing written.
WRONGTYPE = 5
# ARGV slots before the entries.
HEAD = 8

#: The write, as one script: atomic, and serialised with every other write to the State.
WRITE = f"""
-- KEYS: state hash, entries list, index
-- ARGV: id, create, first seq, n entries, has snapshot, snapshot, index score,
--       n approved, then the n entries, then the approved stored entries
local id = ARGV[1]
local create = ARGV[2] == '1'
local first = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local has_snapshot = ARGV[5] == '1'
local napproved = tonumber(ARGV[8])
local base = {HEAD}

-- Every key's type before the first write: a key of another type (the prefix shared with
-- something else) would fail half-way through, after some writes were made.
local want = {{'hash', 'list', 'zset'}}
for i = 1, 3 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i] then return {{{WRONGTYPE}, KEYS[i], t, want[i]}} end
end

local function push(from, to)
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
    i = j + 1
  end
end

local function set_snapshot()
  if has_snapshot then
    redis.call('HSET', KEYS[1], 'snapshot', ARGV[6])
    redis.call('ZADD', KEYS[3], ARGV[7], id)
  end
end

if create then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {{{EXISTS}}} end
  redis.call('DEL', KEYS[2])
  push(base + 1, base + n)
  redis.call('HSET', KEYS[1], 'next', string.format('%d', n))
  set_snapshot()
  return {{{OK}, n}}
end
local nxt = redis.call('HGET', KEYS[1], 'next')
if not nxt then return {{{MISSING}}} end
nxt = tonumber(nxt)
local skip = 0
if n > 0 then
  if first > nxt then return {{{GAP}, nxt}} end
  skip = math.min(nxt - first, n)
end
if skip > 0 then
  local stored = redis.call('LRANGE', KEYS[2], first, first + skip - 1)
  local same = #stored == skip
  if same then
    for i = 1, skip do
      if stored[i] ~= ARGV[base + i] then same = false; break end
    end
  end
  if not same and napproved == skip and #stored == skip then
    same = true
    for i = 1, skip do
      if stored[i] ~= ARGV[base + n + i] then same = false; break end
    end
  end
  if not same then return {{{COMPARE}, nxt, stored}} end
end
if skip < n then
  push(base + skip + 1, base + n)
  redis.call('HSET', KEYS[1], 'next', string.format('%d', first + n))
end
set_snapshot()
return {{{OK}, math.max(nxt, first + n)}}
"""

# The listing in one call: [id, snapshot, id, snapshot, ...], newest first. It reads the
# State hashes by name, which a single server (not Redis Cluster) allows.
LIST = """
local ids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', ARGV[1] .. id, 'snapshot') or false
end
return out
"""
