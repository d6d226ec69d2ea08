-- Compare-and-PEXPIRE for a read-write lock (`rw_common.lua` prepended): the writer's key, or
-- one reader's expiry (and the set's, if shorter), reset only if `value` still holds the lock.
-- KEYS[1] = the lock key; ARGV[1] = lock value, ARGV[2] = new TTL in ms.
-- Returns 1 if extended, 0 otherwise.
local held = held_as(KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if held == "w" then
    return redis.call("pexpire", KEYS[1], ttl)
elseif held == "r" then
    redis.call("zadd", KEYS[1], "XX", node_ms() + ttl, ARGV[1])
    outlive(KEYS[1], ttl)
    return 1
end
return 0
