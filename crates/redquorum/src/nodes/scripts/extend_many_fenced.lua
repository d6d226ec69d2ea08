-- Compare-and-PEXPIRE for a set with fencing on: reset every key's TTL, only if ALL still hold our
-- value, and keep their fencing counters for their retention from now (`extend_fenced.lua`).
-- KEYS[1..n] = the resources, KEYS[n+1..2n] = their fencing counters; ARGV[1] = lock value,
-- ARGV[2] = new TTL in ms, ARGV[3] = counter retention in ms.
-- Returns 1 if extended, 0 (changing nothing) otherwise.
local n = #KEYS / 2
if not set_ours(n) then
    return 0
end
for i = 1, n do
    redis.call("pexpire", KEYS[i], ARGV[2])
    redis.call("pexpire", KEYS[n + i], ARGV[3])
end
return 1
