-- Compare-and-delete for a read-write lock (`rw_common.lua` prepended): the writer's key if it
-- holds `value`, or `value` from the readers (and the set with its last reader); and a writer that
-- gives up leaves the waiting writers.
-- KEYS[1] = the lock key, KEYS[2] = its writer-waiting key; ARGV[1] = lock value, ARGV[2] = the
-- id of a writer leaving the waiting writers ("" for none), ARGV[3] = the lock-delay's bound, as
-- in `release.lua` ("0" without one): a writer's key, or a reader's entry, with no more time
-- left than that is left to expire.
-- Returns 1 if something of ours was removed from the lock, -1 if left to the lock-delay, 0
-- otherwise.
local bound = tonumber(ARGV[3] or "0")
if ARGV[2] ~= "" then
    redis.call("zrem", KEYS[2], ARGV[2])
end
local kind = redis.call("type", KEYS[1]).ok
if kind == "string" then
    if redis.call("get", KEYS[1]) == ARGV[1] then
        local left = redis.call("pttl", KEYS[1])
        if bound > 0 and left >= 0 and left <= bound then
            return -1
        end
        return redis.call("del", KEYS[1])
    end
elseif kind == "zset" then
    local expires = redis.call("zscore", KEYS[1], ARGV[1])
    -- An entry already past its expiry is simply swept, not late.
    local left = expires and (tonumber(expires) - node_ms())
    if bound > 0 and left and left > 0 and left <= bound then
        return -1
    end
    local removed = redis.call("zrem", KEYS[1], ARGV[1])
    -- When others are left (the common last release needs no clock read): readers that died
    -- are swept, so a set of expired readers is deleted now and waiters hear the lock freed;
    -- and the set expires with the longest-lived reader left, not with the one that just left.
    if redis.call("zcard", KEYS[1]) > 0 then
        local now = node_ms()
        redis.call("zremrangebyscore", KEYS[1], "-inf", now)
        fit_expiry(KEYS[1], now)
    end
    if redis.call("zcard", KEYS[1]) == 0 then
        redis.call("del", KEYS[1])
    end
    return removed
end
return 0
