-- Acquire a set of resources all-or-nothing, with fencing: as acquire_many.lua, and on success
-- advance every fencing counter of the set to one new value (fence_advance.lua, prepended), in
-- the same atomic step.
-- KEYS[1..n] = the resources (sorted), KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms, ARGV[3] = counter retention in ms, ARGV[4] = the
-- clock grain in µs.
-- Returns nil when any key exists (changing nothing), else {the node's proposed token}.
local n = #KEYS / 2
for i = 1, n do
    if redis.call("exists", KEYS[i]) == 1 then
        return false
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return {fence_advance(n + 1, 2 * n, ARGV[3], ARGV[4])}
