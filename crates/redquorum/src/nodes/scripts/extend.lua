-- Compare-and-PEXPIRE: reset the lock's TTL only if it still holds our value.
-- KEYS[1] = resource, ARGV[1] = lock value, ARGV[2] = new TTL in milliseconds.
-- Returns 1 if extended, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
