"""RedisStore's write script (the helpers it shares with the other scripts: :mod:`._lua`).

It reads what it needs of the State in one ``HMGET`` (next seq, expiry, snapshot and
incarnation for the preconditions), and a steady-state append touches only what changes:
the entries, one ``HSET`` of the State's fields, its listing row and index members; the
expiry index and native expiry only when the State has or had an expiry.
"""

from __future__ import annotations

from .._server import COMPARE, EXISTS, GAP, MISSING, OK
from ._blob_lua import WRITE_BLOBS
from ._expect_lua import PRECONDITIONS
from ._lease_lua import FENCE
from ._lua import COMMON

# The write script's outcomes: those of every server store (OK, MISSING, ...), and its own:
# a key of the wrong type, nothing written.
WRONGTYPE = 5
# ARGV slots of the write before the index keys, and its keys.
HEAD = 17
WRITE_KEYS = 7

#: The write, as one script: atomic, and serialised with every other write to the State.
WRITE = (
    COMMON
    + FENCE
    + PRECONDITIONS
    + f"""
-- KEYS: state hash, entries list, then the namespace keys, then the lease row
-- ARGV: id, create, first seq, n entries, has snapshot, snapshot, n approved, member,
--       exp, retention, n index keys, lease token ('' for none), lease owner, expect_next
--       ('' for none), clear ('1': the write is not sealed), incarnation ('' for none), bound
--       ('1': the State's must be it), then the index keys, the n entries, then the approved
--       stored entries, then (if the write has blobs) its blob arguments (see ._blob_lua)
local id = ARGV[1]
local create = ARGV[2] == '1'
local first = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local has_snapshot = ARGV[5] == '1'
local napproved = tonumber(ARGV[7])
local nindex = tonumber(ARGV[11])
local base = {HEAD} + nindex
local ns = ns_keys(3)
"""
    + WRITE_BLOBS
    + f"""

-- Every key's type before the first write: a key of another type (the prefix shared with
-- something else) would fail half-way through, after some writes were made.
local want = {{'hash', 'list', 'zset', 'hash', 'zset', 'zset', 'hash'}}
for i = 1, {WRITE_KEYS} do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i] then return {{{WRONGTYPE}, KEYS[i], t, want[i]}} end
end
local refused = fence(KEYS[7], ARGV[12], ARGV[13])
if refused then return refused end

local function push(from, to)
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
    i = j + 1
  end
end

-- The State's fields ``fields`` (name, value, ...), its snapshot (if the write has one) and
-- its keys' native expiry. ``old_exp``: the State's expiry before (false: none), or 'gone'.
local function finish(fields, old_exp)
  local had = old_exp and old_exp ~= 'gone'
  local exp = old_exp ~= 'gone' and old_exp
  if has_snapshot then
    exp = set_snapshot(ns, id, KEYS[1], ARGV[6], ARGV[8], {HEAD} + 1, nindex, ARGV[9], ARGV[10],
      fields, old_exp == 'gone' and 'gone' or had)
  elseif #fields > 0 then
    redis.call('HSET', KEYS[1], unpack(fields))
  end
  expire_at(KEYS[1], KEYS[2], exp, had)
end

local h = redis.call('HMGET', KEYS[1], 'next', 'exp', 'snapshot', 'inc', 'first')
local is_live = h[1] and not (h[2] and tonumber(h[2]) <= now)
if create then
  if is_live then return {{{EXISTS}}} end
  local missing = check_blobs()
  if missing then return missing end
  purge(ns, id, KEYS[1], KEYS[2])  -- an expired State, or what native expiry left
  push(base + 1, base + n)
  local fields = {{'next', string.format('%d', first + n)}}
  if ARGV[16] ~= '' then fields[#fields + 1] = 'inc'; fields[#fields + 1] = ARGV[16] end
  if first > 0 then fields[#fields + 1] = 'first'; fields[#fields + 1] = ARGV[3] end  -- from a base
  finish(fields, 'gone')
  store_blobs()
  return {{{OK}, n}}
end
if not is_live then return {{{MISSING}}} end
local nxt = tonumber(h[1])
local unmet = preconditions(KEYS[2], nxt, h[3], h[4])
if unmet then return unmet end
local skip = 0
if n > 0 then
  if first > nxt then return {{{GAP}, nxt}} end
  skip = math.min(nxt - first, n)
end
if skip > 0 then
  -- A trimmed State (field 'first': its base's seq) holds its entries from its base on, and
  -- the write's entries up to the base are had: only those after it are compared.
  local off = tonumber(h[5] or '0')
  local lo = off > 0 and math.max(first, off + 1) or first
  local want = first + skip - lo
  local stored = {{}}
  if want > 0 then stored = redis.call('LRANGE', KEYS[2], lo - off, first + skip - 1 - off) end
  local at = base + lo - first
  local same = #stored == math.max(want, 0)
  if same then
    for i = 1, #stored do
      if stored[i] ~= ARGV[at + i] then same = false; break end
    end
  end
  if not same and napproved == #stored and #stored == want then
    same = true
    for i = 1, #stored do
      if stored[i] ~= ARGV[base + n + i] then same = false; break end
    end
  end
  if not same then return {{{COMPARE}, nxt, stored}} end
end
local missing = check_blobs()
if missing then return missing end
local fields = {{}}
if skip < n then
  push(base + skip + 1, base + n)
  fields = {{'next', string.format('%d', first + n)}}
end
finish(fields, h[2])
store_blobs()
return {{{OK}, math.max(nxt, first + n)}}
"""
)
