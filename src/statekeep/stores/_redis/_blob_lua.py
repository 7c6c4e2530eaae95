"""RedisStore's blobs: their keys, and the Lua that stores them with a write and collects them.

Blobs live under the store's prefix, shared by every namespace of it (a name is the hex
SHA-256 of the value, or its HMAC in an encrypted store):

- ``<prefix>blob:<name>``: the bytes (a string);
- ``<prefix>blobref:<name>``: the States that refer to it (a set of ``<state key>#<gen>``:
  the State's ``state:`` hash key, which names the namespace too, and the generation the
  State got when it first referred to a blob, in its hash's field ``bg``, from the counter
  ``<prefix>blobgen``);
- ``<prefix>blobs``: every name (a sorted set, score 0, walked in name order by gc);
- ``<prefix>blobbytes``: the bytes of all blobs (a counter, for ``stats``).

The write script (:mod:`._write_lua`) checks, before it writes anything, that every blob the
write names and does not carry is stored, then stores the carried ones (``SET NX``: a name
already stored keeps its bytes) and adds the State to each named blob's referrers, in the
same script as its entries. A referrer whose State is gone (deleted, collected, or
taken by native expiry: its ``state:`` key is gone, or holds another generation, as a State
created again under the same id does) no longer holds the blob: gc drops it as it meets it,
and removes a blob left with none, all in one script per batch, so no write can come in
between.

Keys these scripts name at run time instead of in KEYS (fine on one server; a Redis Cluster
needs every key of a script declared and in one slot, issue 27): the write script's
``blob:<name>`` (EXISTS, SET), ``blobref:<name>`` (SADD), ``blobs`` (ZADD), ``blobbytes``
(INCRBY) and ``blobgen`` (INCR); the fork script's ``blobgen`` and ``blobref:<name>`` (names
the copied entries list); gc's ``blob:<name>``, ``blobref:<name>`` and the referrers'
``state:`` hashes (any namespace); the trim script's ``blobref:<name>`` (names found in the
removed entries). gc declares ``blobs`` and ``blobbytes``.
"""

from __future__ import annotations

from .._server import BLOB_MISSING

#: The write script's blob part: ``check_blobs`` before the write changes anything, and
#: ``store_blobs`` with its entries. ``bat``: where its arguments start (see write_args),
#: after the entries and the approved ones; none there: the write has no blobs.
WRITE_BLOBS = f"""
-- ARGV[bat..]: blob key prefix, n carried, (name, bytes) each, n named, the names
local bat = base + n + napproved + 1
local function check_blobs()
  if #ARGV < bat then return nil end
  local p = ARGV[bat]
  local nb = tonumber(ARGV[bat + 1])
  local at = bat + 2 + 2 * nb
  local carried = {{}}
  for i = 0, nb - 1 do carried[ARGV[bat + 2 + 2 * i]] = true end
  for i = 1, tonumber(ARGV[at]) do
    local name = ARGV[at + i]
    if not carried[name] and redis.call('EXISTS', p .. 'blob:' .. name) == 0 then
      return {{{BLOB_MISSING}}}
    end
  end
  return nil
end
-- The State's referrer member: its key and its blob generation (given on first need).
local function referrer(p, state)
  local gen = redis.call('HGET', state, 'bg')
  if not gen then
    gen = tostring(redis.call('INCR', p .. 'blobgen'))
    redis.call('HSET', state, 'bg', gen)
  end
  return state .. '#' .. gen
end
local function store_blobs()
  if #ARGV < bat then return end
  local p = ARGV[bat]
  local nb = tonumber(ARGV[bat + 1])
  for i = 0, nb - 1 do
    local name, data = ARGV[bat + 2 + 2 * i], ARGV[bat + 3 + 2 * i]
    if redis.call('SET', p .. 'blob:' .. name, data, 'NX') then
      redis.call('ZADD', p .. 'blobs', 0, name)
      redis.call('INCRBY', p .. 'blobbytes', #data)
    end
  end
  local at = bat + 2 + 2 * nb
  local nr = tonumber(ARGV[at])
  if nr > 0 then
    local me = referrer(p, KEYS[1])
    for i = 1, nr do
      redis.call('SADD', p .. 'blobref:' .. ARGV[at + i], me)
    end
  end
end
"""

#: The blob names a stored line refers to, added to ``into``: its top-level list
#: ``"sk.blobs":[...]`` (every name it depends on, the inner ones of a nested value too, which
#: its body does not show: offload works innermost first) and the references in its body
#: (``"sk.blob":"NAME"``; escaped inside a string value, so never matched there). Shared by
#: the fork and the trim scripts.
LINE_NAMES = r"""
local function line_names(line, into)
  if string.find(line, '"sk.blobs":', 1, true) then
    for list in string.gmatch(line, '"sk%.blobs":%[([^%]]*)%]') do
      for name in string.gmatch(list, '"([0-9a-f]+)"') do
        if #name == 64 then into[name] = true end
      end
    end
  end
  if string.find(line, '"sk.blob":"', 1, true) then
    for name in string.gmatch(line, '"sk%.blob":"([^"\\]+)"') do into[name] = true end
  end
end
"""

#: For the fork script: the names the copied entries refer to (a sealed State is never
#: copied on the server) get the fork as a referrer.
FORK_BLOBS = (
    LINE_NAMES
    + """
local function refer_copied(p, state, copied)
  local names = {}
  for _, entry in ipairs(copied) do line_names(entry, names) end
  if next(names) == nil then return end
  local gen = tostring(redis.call('INCR', p .. 'blobgen'))
  redis.call('HSET', state, 'bg', gen)
  local me = state .. '#' .. gen
  for name in pairs(names) do redis.call('SADD', p .. 'blobref:' .. name, me) end
end
"""
)

#: gc of blobs, one batch in name order: drop referrers that are gone, remove each blob left
#: with none. KEYS: ``<prefix>blobs``, ``<prefix>blobbytes``. ARGV: blob key prefix, start
#: bound ('-' or '(' .. last name), batch, '1' for a dry run (count only). Returns {blobs,
#: bytes, names looked at, last name}. Undeclared (named at run time, from the names it walks
#: and their referrers): ``blob:<name>``, ``blobref:<name>``, and the referrers' ``state:``
#: hashes of any namespace.
GC_BLOBS = """
local p = ARGV[1]
local dry = ARGV[4] == '1'
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], '+', 'LIMIT', 0, tonumber(ARGV[3]))
local removed, bytes = 0, 0
for _, name in ipairs(names) do
  local refs = p .. 'blobref:' .. name
  local held = false
  for _, member in ipairs(redis.call('SMEMBERS', refs)) do
    local state, gen = string.match(member, '^(.*)#(%d+)$')
    if state and redis.call('HGET', state, 'bg') == gen then held = true; break end
    if not dry then redis.call('SREM', refs, member) end
  end
  if not held then
    local key = p .. 'blob:' .. name
    local size = redis.call('STRLEN', key)
    removed = removed + 1
    bytes = bytes + size
    if not dry then
      redis.call('DEL', key, refs)
      redis.call('ZREM', KEYS[1], name)
      redis.call('DECRBY', KEYS[2], size)
    end
  end
end
if removed > 0 and not dry and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])  -- nothing left: no counter left behind either
end
return {removed, bytes, #names, names[#names] or ''}
"""


def blob_args(
    prefix: bytes, blobs: dict[str, bytes] | None, refs: frozenset[str] | None
) -> list[bytes | str]:
    """The write script's blob arguments (none for a write without blobs)."""
    if not blobs and not refs:
        return []
    carried = sorted(blobs or {})
    args: list[bytes | str] = [prefix, str(len(carried))]
    for name in carried:
        args += [name, blobs[name]]  # type: ignore[index]
    named = sorted(refs or ())
    return [*args, str(len(named)), *named]
