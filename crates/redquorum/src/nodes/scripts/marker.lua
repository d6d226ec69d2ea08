-- The health check's marker (quarantine invariants 2, 3, 6; `marker` module for the grammar):
-- read it, or write a new one that vouches for the node only `max_ttl` from now, in node time.
-- KEYS[1]: the marker key. ARGV[1]: a fresh random id. ARGV[2]: max_ttl in milliseconds.
-- ARGV[3]: the server's run_id for a marker that names its owner (a Redis Cluster master's), or
-- "" for one that does not. An owned marker that names another server (it was replicated here,
-- or moved here with its slot) is not this server's: it is written anew, as if it were missing.
-- ARGV[4]: the tag of a marker this call writes: "new." when the caller never saw a marker on
-- this node (first sight), "" when it saw one that is gone (a loss).
-- ARGV[5]: optional, a value read before whose id was not drawn (a word written by hand, which
-- tells no server from another: `marker` invariant 5): replaced as if missing when the key still
-- holds exactly it.
-- Returns {value, 1 if this call wrote it where there was none, 2 if it replaced another owner's,
-- 3 if it replaced that hand-written one, else 0, node time in milliseconds}.
-- Needs Redis >= 5 when it writes: TIME comes before the write (effects replication).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[3] or ''
if owner ~= '' then
  owner = owner .. '/'
end
local value = redis.call('GET', KEYS[1])
local undrawn = value and ARGV[5] and ARGV[5] ~= '' and value == ARGV[5]
if value and not undrawn and string.sub(value, 1, #owner) == owner then
  return {value, 0, now}
end
local written = 1
if undrawn then
  written = 3
elseif value then
  written = 2
end
value = owner .. (ARGV[4] or '') .. ARGV[1] .. ':' .. string.format('%d', now + tonumber(ARGV[2]))
redis.call('SET', KEYS[1], value)
return {value, written, now}
