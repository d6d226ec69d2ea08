-- Store a fencing token, only while the lock still holds our value.
-- KEYS[1] = resource, KEYS[2] = its fencing counter;
-- ARGV[1] = lock value, ARGV[2] = token, ARGV[3] = counter retention in ms.
-- Returns 1 when the counter is now at least the token, 0 when the lock is no longer ours.
-- Tokens are below 2^53, so Lua's doubles compare them exactly.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
local current = tonumber(redis.call("get", KEYS[2]) or "0") or 0
if tonumber(ARGV[2]) > current then
    redis.call("set", KEYS[2], ARGV[2], "PX", ARGV[3])
else
    redis.call("pexpire", KEYS[2], ARGV[3])
end
return 1
