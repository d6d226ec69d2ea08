-- Acquire with fencing: SET NX PX, and on success advance the resource's fencing counter
-- (fence_advance.lua, prepended), in the same atomic step.
-- KEYS[1] = resource, KEYS[2] = its fencing counter, KEYS[3] (optional) = the node's marker;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms, ARGV[3] = counter retention in ms, ARGV[4] = the
-- clock grain in µs.
-- Returns nil when the key exists (as SET NX does), else {the node's proposed token, the marker
-- or nil}.
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return false
end
local token = fence_advance(2, 2, ARGV[3], ARGV[4])
-- The marker is read back in the same step, so the vote carries its evidence (quarantine
-- invariant 2) without a command of its own.
local marker = KEYS[3] and redis.call("get", KEYS[3])
return {token, marker}
