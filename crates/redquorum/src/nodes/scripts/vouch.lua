-- Rewrites a node's marker in place, keeping its id (`marker` invariant 1): the first-sight
-- protocol's two steps (`first_sight` invariants 1, 4) and an operator's mark.
-- KEYS[1]: the marker key. ARGV[1]: the step: 'extend', 'vouch' or 'mark'.
-- ARGV[2]: extend, vouch: the id of the first-sight marker read before; mark: a fresh random id,
-- used only where there is no marker.
-- ARGV[3]: extend: max_ttl in milliseconds; vouch, mark: the server's run_id.
-- ARGV[4]: mark: '1' to rewrite any marker (--force), else only a first-sight one still pending.
-- ARGV[6]: vouch: the group's fingerprint (`marker` invariant 4).
-- ARGV[5]: extend, vouch: how long (ms) a first-sight marker must still be pending to count as
-- pending (`first_sight` invariant 1: a client that trusts it when its time comes may vote a
-- clock drift early).
-- Returns {1 if done else 0, the marker's value now (false if none), what was found:
-- 'none', 'new' (a first-sight marker still pending), 'vouched' (one that vouches already: an
-- operator's or a group's, or a plain one whose time has come), or 'other'}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local step = ARGV[1]
local value = redis.call('GET', KEYS[1])
local found, id = 'none', nil
if value then
  local body, ms = string.match(value, '^(.*):(%d+)$')
  if not body then
    body, ms = value, '0'
  end
  local new_id = string.match(body, '^new%.(.*)$')
  local ok_id = string.match(body, '^ok%.[^.]*%.(.*)$')
    or string.match(body, '^okg%.[^.]*%.[^.]*%.[^.]*%.(.*)$')
  if new_id and tonumber(ms) > now + tonumber(ARGV[5] or '0') then
    found, id = 'new', new_id
  elseif ok_id and tonumber(ms) == 0 then
    found, id = 'vouched', ok_id
  elseif not new_id and not ok_id and tonumber(ms) <= now then
    -- A plain marker vouches from its time on (a launcher's `…:0`, a loss whose quarantine is
    -- over); only one whose time is still ahead records a recent loss.
    found, id = 'vouched', body
  else
    found, id = 'other', ok_id or new_id or body
  end
end
if step == 'extend' then
  if found == 'new' and id == ARGV[2] then
    value = 'new.' .. id .. ':' .. string.format('%d', now + tonumber(ARGV[3]))
    redis.call('SET', KEYS[1], value)
    return {1, value, found}
  end
  return {0, value or false, found}
end
if step == 'vouch' then
  if found == 'new' and id == ARGV[2] then
    value = 'okg.' .. ARGV[6] .. '.' .. string.format('%d', now) .. '.' .. ARGV[3] .. '.' .. id .. ':0'
    redis.call('SET', KEYS[1], value)
    return {1, value, found}
  end
  -- Another client's first-sight protocol vouched it already, after the same extensions.
  return {(found == 'vouched' and id == ARGV[2]) and 1 or 0, value or false, found}
end
if step == 'peek' then
  return {0, value or false, found}
end
-- mark
if found == 'none' then
  id = ARGV[2]
elseif found ~= 'new' and ARGV[4] ~= '1' then
  return {0, value, found}
end
value = 'ok.' .. ARGV[3] .. '.' .. id .. ':0'
redis.call('SET', KEYS[1], value)
return {1, value, found}
