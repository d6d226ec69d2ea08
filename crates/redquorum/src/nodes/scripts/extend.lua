-- Compare-and-PEXPIRE: reset the lock's TTL only if it still holds our value (`outlived.lua`
-- prepended).
-- KEYS[1] = resource, ARGV[1] = lock value, ARGV[2] = new TTL in milliseconds, ARGV[3] (an
-- extension by value under a lock-delay only) = a late bound in ms: a key that outlived its
-- holder's validity is left to its delay, as `release_timely.lua` leaves it (`engine`
-- invariant 10).
-- Returns 1 if extended, -1 if left to the delay, 0 otherwise.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[3] and outlived(KEYS[1], tonumber(ARGV[3])) then
    return -1
end
return redis.call("pexpire", KEYS[1], ARGV[2])
