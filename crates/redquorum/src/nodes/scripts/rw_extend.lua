-- Compare-and-PEXPIRE for a read-write lock (`rw_common.lua` prepended): the writer's key, or
-- one reader's expiry (and the set's, if shorter), reset only if `value` still holds the lock.
-- With fencing on, the lock's counter is kept for its retention from now (`extend_fenced.lua`).
-- KEYS[1] = the lock key, KEYS[2] = its writer-waiting key (unused), KEYS[3] = its fencing
-- counter; ARGV[1] = lock value, ARGV[2] = new TTL in ms, ARGV[3] = counter retention in ms (0:
-- no fencing).
-- Returns 1 if extended, 0 otherwise.
local held = held_as(KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if held and ARGV[3] ~= "0" then
    redis.call("pexpire", KEYS[3], ARGV[3])
end
if held == "w" then
    return redis.call("pexpire", KEYS[1], ttl)
elseif held == "r" then
    local now = node_ms()
    redis.call("zadd", KEYS[1], "XX", now + ttl, ARGV[1])
    fit_expiry(KEYS[1], now)
    return 1
end
return 0
