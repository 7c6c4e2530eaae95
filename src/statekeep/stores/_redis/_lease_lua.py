"""The Lua of RedisStore's leases: the fence the write, delete and fork scripts run, and the
scripts of acquire, renew, release and rekey's in-place re-seal.

A State's lease row is the hash ``N lease:{id}``: ``owner``, ``token``, ``exp`` (its expiry,
microseconds since 1970 by the server's ``TIME``) and ``ttl`` (the period it was taken or
last renewed for, in microseconds). It has no TTL, and no script removes it (delete, gc and
native expiry leave it), so a State's token only ever grows. Each script mirrors the pure
rule of :mod:`statekeep._core.leases` it stands for; a refusal returns the lease row and the
server's time, and the client raises the error by running that same rule on them
(:mod:`._leases`), so Redis and every other store say the same thing.
"""

from __future__ import annotations

#: Outcomes of the scripts that apply the fence, after the write script's own (WRONGTYPE = 5).
LEASE_HELD = 6
STALE = 7

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

#: The lease row of hash ``key``, a refusal, and the fence: what the write, delete and fork
#: scripts start with too (after their ``now``, the server's TIME).
FENCE = f"""
local function fmt(n) return string.format('%d', n) end

-- The lease row of ``key``: {{owner, token, exp, ttl}}, each false when there is none.
local function lease_row(key)
  return redis.call('HMGET', key, 'owner', 'token', 'exp', 'ttl')
end

local function row_live(h)
  return h[2] and tonumber(h[3]) > now
end

-- A refusal: ``status``, the lease row (owner, token, exp, ttl; '' for none), the time.
local function refusal(status, h)
  return {{status, h[1] or '', h[2] or '', h[3] or '', h[4] or '', fmt(now)}}
end

-- The fence (statekeep._core.leases.check_fence) of the lease row ``key`` against the lease a
-- caller passed (``token`` '' for none): nil when the write may go on, else the refusal.
local function fence(key, token, owner)
  local h = lease_row(key)
  if token == '' then
    if row_live(h) then return refusal({LEASE_HELD}, h) end
    return nil
  end
  if h[2] == token and h[1] == owner and row_live(h) then return nil end
  return refusal({STALE}, h)
end
"""

#: statekeep._core.leases.acquired: a new token unless a live lease is held.
ACQUIRE = (
    _NOW
    + FENCE
    + f"""
-- KEYS: the lease row; ARGV: owner, ttl (microseconds)
local h = lease_row(KEYS[1])
if row_live(h) then return refusal({LEASE_HELD}, h) end
local token = fmt((h[2] and tonumber(h[2]) or 0) + 1)
local exp = fmt(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'exp', exp, 'ttl', ARGV[2])
return {{0, token, exp}}
"""
)

#: statekeep._core.leases.renewed: the same token, a new expiry, if it is current and live.
RENEW = (
    _NOW
    + FENCE
    + """
-- KEYS: the lease row; ARGV: owner, token, ttl (microseconds)
local refused = fence(KEYS[1], ARGV[2], ARGV[1])
if refused then return refused end
local exp = fmt(now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'exp', exp, 'ttl', ARGV[3])
return {0, ARGV[2], exp}
"""
)

#: statekeep._core.leases.released: end it (``exp`` 0, the epoch: no clock stepping back makes it
#: live again; token kept) if it is current and live.
RELEASE = (
    _NOW
    + FENCE
    + """
-- KEYS: the lease row; ARGV: owner, token
local h = lease_row(KEYS[1])
if h[2] == ARGV[2] and h[1] == ARGV[1] and row_live(h) then
  redis.call('HSET', KEYS[1], 'exp', '0')
  return 1
end
return 0
"""
)

#: rekey's re-seal: each record replaced only where it still holds the bytes read.
RESEAL = """
-- KEYS: state hash, entries list
-- ARGV: '1' if the snapshot is replaced, its stored bytes, its new bytes, then
--       seq, stored bytes, new bytes for each entry replaced
local done = 0
local off = tonumber(redis.call('HGET', KEYS[1], 'first') or '0')  -- a trimmed State's base seq
if ARGV[1] == '1' and redis.call('HGET', KEYS[1], 'snapshot') == ARGV[2] then
  redis.call('HSET', KEYS[1], 'snapshot', ARGV[3])
  done = done + 1
end
for i = 4, #ARGV, 3 do
  local seq = tonumber(ARGV[i]) - off
  if seq >= 0 and redis.call('LINDEX', KEYS[2], seq) == ARGV[i + 1] then
    redis.call('LSET', KEYS[2], seq, ARGV[i + 2])
    done = done + 1
  end
end
return done
"""
