"""The Lua scripts RedisStore runs on the server.

Every script that changes a State also keeps its namespace's indexes (see :mod:`._keys`)
in the same step, so an index never disagrees with the States once a script returns.
Expiry is judged by the server's clock (``TIME``): a State whose ``exp`` (microseconds
since 1970, in its hash) is at or before it is absent for every script, and its keys carry
the same time as native expiry (``PEXPIREAT``), set again by each write.

The namespace keys every changing script takes, in this order (``NS``): the listing index,
the rows hash (id -> the indexes it is in, as MessagePack: its member first), the unlisted
States (a snapshot that is no listing row), the expiry index (score: ``exp``).

The write, delete and fork scripts also take the State's lease row and apply the fence in
the same step (see :mod:`._lease_lua`); gc leaves a State with a live lease alone.
"""

from __future__ import annotations

from .._server import EXISTS, MISSING, OK
from ._blob_lua import FORK_BLOBS
from ._keys import STAMPED
from ._lease_lua import FENCE

#: Helpers every changing script starts with. ``ns`` is the table of namespace keys.
COMMON = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function ns_keys(first)
  return {{all = KEYS[first], rows = KEYS[first + 1], bad = KEYS[first + 2], expiry = KEYS[first + 3]}}
end

-- Whether the State of hash key ``state`` is there and not expired.
local function live(state)
  local h = redis.call('HMGET', state, 'next', 'exp')
  if not h[1] then return false end
  return not (h[2] and tonumber(h[2]) <= now)
end

-- Take State ``id`` out of every index.
local function unindex(ns, id)
  local old = redis.call('HGET', ns.rows, id)
  if old then
    local o = cmsgpack.unpack(old)
    if o[1] ~= '' then
      redis.call('ZREM', ns.all, o[1])
      for i = 2, #o do redis.call('ZREM', o[i], o[1]) end
    end
    redis.call('HDEL', ns.rows, id)
  end
  redis.call('ZREM', ns.bad, id)
  redis.call('ZREM', ns.expiry, id)
end

-- Remove State ``id`` whole.
local function purge(ns, id, state, entries)
  unindex(ns, id)
  redis.call('DEL', state, entries)
end

-- ``us`` (microseconds since 1970) as ISO 8601 text, as statekeep writes times.
local function iso(us)
  local secs = math.floor(us / 1000000)
  local frac = us - secs * 1000000
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06d+00:00', y, m, d,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, frac)
end

-- Take live State ``id`` out of the indexes its listing row names, before that row is set
-- again (a listed State is in no ``bad``; one with no expiry, ``had_exp`` false, in no ``expiry``).
local function unlist(ns, id, had_exp)
  local old = redis.call('HGET', ns.rows, id)
  local o = old and cmsgpack.unpack(old)
  if o and o[1] ~= '' then
    redis.call('ZREM', ns.all, o[1])
    for i = 2, #o do redis.call('ZREM', o[i], o[1]) end
  else
    redis.call('ZREM', ns.bad, id)
  end
  if had_exp then redis.call('ZREM', ns.expiry, id) end
end

-- Store ``snapshot`` for State ``id`` and index it: ``member`` ('' if unlisted), the
-- index keys ARGV[from .. from + n - 1], ``exp`` ('' for none), and with ``retention``
-- ('' for none) the expiry stamped now, by this server's clock. ``fields``: more fields of
-- the State's hash to set with it. ``had_exp``: whether the live State had an expiry, or
-- 'gone' (its keys and index entries were just removed), or nil (not known: remove it from
-- every index). Returns the expiry set ('' for none).
local function set_snapshot(ns, id, state, snapshot, member, from, n, exp, retention, fields, had_exp)
  if retention ~= '' then
    local at = now + tonumber(retention)
    snapshot = '{{"expires_at":"' .. iso(at) .. '"' .. string.sub(snapshot, {len(STAMPED)} + 1)
    exp = string.format('%d', at)
  end
  if had_exp == nil then unindex(ns, id) elseif had_exp ~= 'gone' then unlist(ns, id, had_exp) end
  local set = {{'snapshot', snapshot}}
  for _, v in ipairs(fields or {{}}) do set[#set + 1] = v end
  if exp ~= '' then
    set[#set + 1] = 'exp'
    set[#set + 1] = exp
    redis.call('ZADD', ns.expiry, exp, id)
  elseif had_exp == nil or had_exp == true then
    redis.call('HDEL', state, 'exp')
  end
  redis.call('HSET', state, unpack(set))
  local row = {{member}}
  if member == '' then
    redis.call('ZADD', ns.bad, 0, id)
  else
    redis.call('ZADD', ns.all, 0, member)
    for i = from, from + n - 1 do
      redis.call('ZADD', ARGV[i], 0, member)
      row[#row + 1] = ARGV[i]
    end
  end
  redis.call('HSET', ns.rows, id, cmsgpack.pack(row))
  return exp
end

-- Native expiry on the State's keys: ``exp`` (false or '' for none); ``had``: false when
-- they are known to carry none now (nothing to take off).
local function expire_at(state, entries, exp, had)
  if exp and exp ~= '' then
    local ms = string.format('%d', math.ceil(tonumber(exp) / 1000))
    redis.call('PEXPIREAT', state, ms)
    redis.call('PEXPIREAT', entries, ms)
  elseif had ~= false then
    redis.call('PERSIST', state)
    redis.call('PERSIST', entries)
  end
end

-- Native expiry on the State's keys: its ``exp``, or none.
local function expire(state, entries)
  expire_at(state, entries, redis.call('HGET', state, 'exp'))
end
"""

#: A fork: the source's entries 0..at copied on the server, and the new State created.
FORK = (
    COMMON
    + FENCE
    + FORK_BLOBS
    + f"""
-- KEYS: source state, source entries, new state, new entries, then the namespace keys,
--       then the new State's lease row
-- ARGV: new id, at seq, sha1 of the entries 0..at joined by newlines, snapshot, member,
--       exp, retention, n index keys, the new State's incarnation ('' for none), index keys,
--       then the blob key prefix (the copied entries' blobs get the fork as a referrer)
local ns = ns_keys(5)
if not live(KEYS[1]) then return {{{MISSING}}} end
local refused = fence(KEYS[9], '', '')
if refused then return refused end
local at = tonumber(ARGV[2])
local off = tonumber(redis.call('HGET', KEYS[1], 'first') or '0')  -- a trimmed source's base seq
local copied = redis.call('LRANGE', KEYS[2], 0, at - off)
if #copied ~= at + 1 - off or redis.sha1hex(table.concat(copied, '\\n')) ~= ARGV[3] then
  return {{{MISSING}}}
end
if live(KEYS[3]) then return {{{EXISTS}}} end
purge(ns, ARGV[1], KEYS[3], KEYS[4])
local i = 1
while i <= #copied do
  local j = math.min(i + 999, #copied)
  redis.call('RPUSH', KEYS[4], unpack(copied, i, j))
  i = j + 1
end
redis.call('HSET', KEYS[3], 'next', string.format('%d', at + 1))
if off > 0 then redis.call('HSET', KEYS[3], 'first', string.format('%d', off)) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[3], 'inc', ARGV[9]) end
set_snapshot(ns, ARGV[1], KEYS[3], ARGV[4], ARGV[5], 10, tonumber(ARGV[8]), ARGV[6], ARGV[7])
expire(KEYS[3], KEYS[4])
local blob_prefix = ARGV[10 + tonumber(ARGV[8])]
if blob_prefix and blob_prefix ~= '' then refer_copied(blob_prefix, KEYS[3], copied) end
return {{{OK}}}
"""
)

#: Delete one State: its keys and its index entries.
DELETE = (
    COMMON
    + FENCE
    + """
-- KEYS: state, entries, then the namespace keys, then the lease row
-- ARGV: id, lease token ('' for none), lease owner
local refused = fence(KEYS[7], ARGV[2], ARGV[3])
if refused then return refused end
purge(ns_keys(3), ARGV[1], KEYS[1], KEYS[2])
return {0}
"""
)

#: Remove up to ARGV[3] expired States; returns {removed, looked at, left for their lease}.
GC = (
    COMMON
    + """
-- KEYS: the namespace keys; ARGV: state key prefix, entries key prefix, batch, lease row
-- prefix, how many expired States to pass over first (those earlier calls left: leased)
local ns = ns_keys(1)
local ids = redis.call('ZRANGEBYSCORE', ns.expiry, '-inf', now, 'LIMIT', tonumber(ARGV[5]), tonumber(ARGV[3]))
local removed, leased = 0, 0
for _, id in ipairs(ids) do
  local state = ARGV[1] .. id
  local h = redis.call('HMGET', state, 'next', 'exp')
  local lease_exp = redis.call('HGET', ARGV[4] .. id, 'exp')
  if h[1] and not h[2] then
    redis.call('ZREM', ns.expiry, id)  -- no expiry any more: the index catches up
  elseif h[1] and tonumber(h[2]) > now then
    redis.call('ZADD', ns.expiry, h[2], id)  -- extended: the index catches up
  elseif lease_exp and tonumber(lease_exp) > now then
    leased = leased + 1  -- a live lease keeps it: its worker is at it
  else
    purge(ns, id, state, ARGV[2] .. id)
    removed = removed + 1
  end
end
return {removed, #ids, leased}
"""
)

#: What gc would remove now, one stretch of the expiry index up to the server's time: its
#: States without a live lease. (Each script that sets a State's ``exp`` sets its score in
#: the same step, so these are the States gc's own check of ``exp`` would remove, with those
#: whose keys native expiry already took.) Returns {counted, looked at}.
COUNT_EXPIRED = """
-- KEYS: the expiry index; ARGV: lease row prefix, offset, batch
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', tonumber(ARGV[2]), tonumber(ARGV[3]))
local counted = 0
for _, id in ipairs(ids) do
  local lease_exp = redis.call('HGET', ARGV[1] .. id, 'exp')
  if not (lease_exp and tonumber(lease_exp) > now) then counted = counted + 1 end
end
return {counted, #ids}
"""

#: One stretch of a listing: walk an index from a bound, keep the rows that pass.
SELECT = """
-- KEYS: the listing index, the unlisted States
-- ARGV: state key prefix, start bound, end bound, rows wanted, members to look at (at most),
--       id prefix ('' for none), n must, the must indexes, n must not, the must-not indexes,
--       how many unlisted States to return (id, snapshot, ...) to warn about,
--       '1' to keep expired States too (native expiry takes their keys within a
--       millisecond, so a tree walk reads the parent index instead: RedisStore._child_ids)
-- Returns {done (1: the index ends here), the last member looked at, the unlisted States,
--          then id, snapshot, ...}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local want = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local prefix = ARGV[6]
local nmust = tonumber(ARGV[7])
local nnot = tonumber(ARGV[8 + nmust])
-- Walk the smallest of the indexes every row must be in; check the others row by row.
local walk = KEYS[1]
local walk_at = 0
local size = redis.call('ZCARD', KEYS[1])
for i = 8, 7 + nmust do
  local n = redis.call('ZCARD', ARGV[i])
  if n < size or walk_at == 0 then walk, walk_at, size = ARGV[i], i, n end
end
local out = {0, '', {}}
local warn = tonumber(ARGV[9 + nmust + nnot])
local expired_too = ARGV[10 + nmust + nnot] == '1'
if warn > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, warn - 1)) do
    local snapshot = redis.call('HGET', ARGV[1] .. id, 'snapshot')
    if snapshot then
      out[3][#out[3] + 1] = id
      out[3][#out[3] + 1] = snapshot
    end
  end
end
local found, looked = 0, 0
local start = ARGV[2]
while found < want and looked < budget do
  local chunk = math.min(math.max(want - found, 32), budget - looked)
  local members = redis.call('ZRANGEBYLEX', walk, start, ARGV[3], 'LIMIT', 0, chunk)
  for _, m in ipairs(members) do
    looked = looked + 1
    out[2] = m
    local ok = true
    for i = 8, 7 + nmust do
      if i ~= walk_at and not redis.call('ZSCORE', ARGV[i], m) then ok = false; break end
    end
    if ok then
      for i = 9 + nmust, 8 + nmust + nnot do
        if redis.call('ZSCORE', ARGV[i], m) then ok = false; break end
      end
    end
    local id = string.sub(m, 19)
    if ok and prefix ~= '' and string.sub(id, 1, #prefix) ~= prefix then ok = false end
    if ok then
      local h = redis.call('HMGET', ARGV[1] .. id, 'snapshot', 'exp')
      if h[1] and (expired_too or not (h[2] and tonumber(h[2]) <= now)) then
        out[#out + 1] = id
        out[#out + 1] = h[1]
        found = found + 1
        if found == want then break end
      end
    end
  end
  if #members < chunk then
    if found < want then out[1] = 1 end
    break
  end
  start = '(' .. out[2]
end
return out
"""
