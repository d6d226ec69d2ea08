-- Acquire a set of resources all-or-nothing, with fencing: as acquire_many.lua, and on success
-- report the largest fencing counter of the set and the node's clock, in the same atomic step.
-- KEYS[1..n] = the resources (sorted), KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms.
-- Returns nil when any key exists (changing nothing), else {largest counter or "0", seconds,
-- microseconds}. The counter is returned as stored: Lua's tostring would round a 16-digit number.
local n = #KEYS / 2
for i = 1, n do
    if redis.call("exists", KEYS[i]) == 1 then
        return false
    end
end
local largest, largest_text = 0, "0"
for i = n + 1, 2 * n do
    local text = redis.call("get", KEYS[i])
    local counter = tonumber(text or "0") or 0
    if counter > largest then
        largest, largest_text = counter, text
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
local now = redis.call("time")
return {largest_text, now[1], now[2]}
