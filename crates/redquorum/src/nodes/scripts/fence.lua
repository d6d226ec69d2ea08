-- Store a fencing token, only while the lock still holds our value (`fence_store.lua`
-- prepended).
-- KEYS[1] = resource, KEYS[2] = its fencing counter;
-- ARGV[1] = lock value, ARGV[2] = token, ARGV[3] = counter retention in ms.
-- Returns 1 when the counter is now at least the token, 0 when the lock is no longer ours.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
store_token(KEYS[2])
return 1
