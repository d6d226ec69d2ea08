-- Inspect: what a lock key holds, in one round trip and one atomic step.
-- KEYS[1] = resource.
-- Returns {type, value or false, pttl}: the Redis type ("none" when the key does not exist), the
-- value when the key is a string, the number of entries when it is a sorted set (a read-write
-- lock's readers), false (nil) otherwise; and PTTL in milliseconds (-1: no expiry, -2: no key).
local kind = redis.call("type", KEYS[1]).ok
local value = false
if kind == "string" then
    value = redis.call("get", KEYS[1])
elseif kind == "zset" then
    value = redis.call("zcard", KEYS[1])
end
return {kind, value, redis.call("pttl", KEYS[1])}
