-- Compare-and-delete for a read-write lock (`rw_common.lua` prepended): the writer's key if it
-- holds `value`, or `value` from the readers (and the set with its last reader).
-- KEYS[1] = the lock key; ARGV[1] = lock value.
-- Returns 1 if something of ours was removed, 0 otherwise.
local kind = redis.call("type", KEYS[1]).ok
if kind == "string" then
    if redis.call("get", KEYS[1]) == ARGV[1] then
        return redis.call("del", KEYS[1])
    end
elseif kind == "zset" then
    local removed = redis.call("zrem", KEYS[1], ARGV[1])
    -- Readers that died are swept only when some are left (the common last release costs no
    -- clock read): a set of expired readers is deleted now, so waiters hear the lock freed.
    if redis.call("zcard", KEYS[1]) > 0 then
        redis.call("zremrangebyscore", KEYS[1], "-inf", node_ms())
    end
    if redis.call("zcard", KEYS[1]) == 0 then
        redis.call("del", KEYS[1])
    end
    return removed
end
return 0
