-- Store one fencing token in the counter of every resource of a set, only while ALL of its keys
-- still hold our value.
-- KEYS[1..n] = the resources, KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = token, ARGV[3] = counter retention in ms.
-- Returns 1 when every counter is now at least the token, 0 (changing nothing) when the lock is
-- no longer ours on this node. Tokens are below 2^53, so Lua's doubles compare them exactly.
local n = #KEYS / 2
if not set_ours(n) then
    return 0
end
local token = tonumber(ARGV[2])
for i = n + 1, 2 * n do
    local current = tonumber(redis.call("get", KEYS[i]) or "0") or 0
    if token > current then
        redis.call("set", KEYS[i], ARGV[2], "PX", ARGV[3])
    else
        redis.call("pexpire", KEYS[i], ARGV[3])
    end
end
return 1
