"""The Lua of the write's preconditions (see :mod:`statekeep._store.expect`), which the write script
runs once it knows the State live and its next seq, in this order: the State's incarnation
(with ARGV[17] = '1', the write is bound to the incarnation ARGV[16]: REBORN unless it is
the State's), ``expect_next`` (ARGV[14], '' for none), and whether a clear write
(ARGV[15] = '1') goes to a sealed State."""

from __future__ import annotations

from .._server import REBORN, SEALED_STATE, UNEXPECTED

#: Defines ``preconditions(entries, nxt, snapshot, inc)``: a refusal to return, or nil
#: (``snapshot`` and ``inc``: the State's fields, false when it has none).
PRECONDITIONS = f"""
-- Whether the State is sealed: its snapshot, else its last entry, ends with the sealed
-- record's last key (as statekeep._store.expect.sealed_text judges it).
local function sealed_state(entries, nxt, rec)
  if not rec and nxt > 0 then rec = redis.call('LINDEX', entries, -1) end
  return rec and string.find(rec, '"sk%.sealed":"[^"]*"}}$') ~= nil
end

local function preconditions(entries, nxt, snapshot, inc)
  -- A State created again is another State, whatever its next seq: that first.
  if ARGV[17] == '1' and (inc or '') ~= ARGV[16] then return {{{REBORN}}} end
  if ARGV[14] ~= '' and tonumber(ARGV[14]) ~= nxt then return {{{UNEXPECTED}, nxt}} end
  if ARGV[15] == '1' and sealed_state(entries, nxt, snapshot) then return {{{SEALED_STATE}}} end
  return nil
end
"""
