-- Acquire a set of resources all-or-nothing, with fencing: as acquire_many.lua, and on success
-- report the largest fencing counter of the set and the node's clock, in the same atomic step.
-- KEYS[1..n] = the resources (sorted), KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms.
-- Returns nil when any key exists (changing nothing), else {largest counter or "0", seconds,
-- microseconds} (fence_reading.lua).
local n = #KEYS / 2
for i = 1, n do
    if redis.call("exists", KEYS[i]) == 1 then
        return false
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return fence_reading(n + 1, 2 * n)
