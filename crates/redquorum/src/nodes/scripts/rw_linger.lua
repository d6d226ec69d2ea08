-- `linger.lua` for a read-write lock (`rw_common.lua` prepended): the writer's key, or one
-- reader's entry (and the set with it), kept for at least the lock-delay from now.
-- KEYS[1] = the lock key; ARGV[1] = lock value, ARGV[2] = the lock-delay in ms.
-- Returns 1 if something of ours was kept, 0 otherwise.
local delay = tonumber(ARGV[2])
local held = held_as(KEYS[1], ARGV[1])
if held == "w" then
    if redis.call("pttl", KEYS[1]) < delay then
        redis.call("pexpire", KEYS[1], delay)
    end
    return 1
elseif held == "r" then
    redis.call("zadd", KEYS[1], "XX", "GT", node_ms() + delay, ARGV[1])
    outlive(KEYS[1], delay)
    return 1
end
return 0
