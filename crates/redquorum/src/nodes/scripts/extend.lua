-- Compare-and-PEXPIRE: reset the lock's TTL only if it still holds our value.
-- KEYS[1] = resource, ARGV[1] = lock value, ARGV[2] = new TTL in milliseconds, ARGV[3] (an
-- extension by value under a lock-delay only) = a late bound in ms: a key with no more than that
-- left has outlived its holder's validity and is left to its delay, as `release_timely.lua`
-- leaves it (`engine` invariant 10).
-- Returns 1 if extended, -1 if left to the delay, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
    local late = tonumber(ARGV[3] or "0")
    if late > 0 then
        -- A key without an expiry (-1) is no lock of ours any more: not late.
        local left = redis.call("pttl", KEYS[1])
        if left >= 0 and left <= late then
            return -1
        end
    end
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
