-- Acquire with fencing: SET NX PX, and on success report what this node knows of the resource's
-- fencing counter and its clock, in the same atomic step.
-- KEYS[1] = resource, KEYS[2] = its fencing counter; ARGV[1] = lock value, ARGV[2] = TTL in ms.
-- Returns nil when the key exists (as SET NX does), else {counter or "0", seconds, microseconds,
-- the marker or nil}.
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return false
end
local now = redis.call("time")
-- KEYS[3], when given, is the node's marker key: read back in the same step, so the vote carries
-- its evidence (quarantine invariant 2) without a command of its own.
local marker = KEYS[3] and redis.call("get", KEYS[3])
return {redis.call("get", KEYS[2]) or "0", now[1], now[2], marker}
