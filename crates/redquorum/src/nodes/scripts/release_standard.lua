-- The standard compare-and-delete, byte for byte what other Redlock clients send: the release of
-- one resource unless fair waiting announces releases (`Builder::fair`). Removes the lock only if
-- it still holds our value.
-- KEYS[1] = resource, ARGV[1] = lock value. Returns 1 if deleted, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
