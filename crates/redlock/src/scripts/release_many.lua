-- Compare-and-delete for a set: remove every key that still holds our value.
-- KEYS = the resources, ARGV[1] = lock value. Returns how many keys were deleted.
-- pcall: a key of another type is simply not ours, and must not stop the others' release.
local deleted = 0
for _, key in ipairs(KEYS) do
    if redis.pcall("get", key) == ARGV[1] then
        deleted = deleted + redis.call("del", key)
    end
end
return deleted
