-- Read an election (`election` invariants 4 and 5), in one atomic step.
-- KEYS[1] = the election's lock key, KEYS[2] = its fencing counter.
-- Returns {the key's value when it is a string, or nil; its PTTL; the counter, or nil}.
local value = false
if redis.call("type", KEYS[1]).ok == "string" then
    value = redis.call("get", KEYS[1])
end
return {value, redis.call("pttl", KEYS[1]), redis.call("get", KEYS[2])}
