-- Compare-and-delete for a set: remove every key that still holds our value; then tell the
-- waiters of each key that is now free.
-- KEYS = the resources; ARGV[1] = lock value, ARGV[2] = the id of a waiter leaving the queues ("" for none).
-- Returns how many keys were deleted.
-- pcall: a key of another type is simply not ours, and must not stop the others' release.
local deleted = 0
for _, key in ipairs(KEYS) do
    local freed = 0
    if redis.pcall("get", key) == ARGV[1] then
        freed = redis.call("del", key)
        deleted = deleted + freed
    end
    best_effort(function()
        local queue, leases = queue_keys(key)
        if ARGV[2] ~= "" then
            redis.call("zrem", queue, ARGV[2])
            redis.call("zrem", leases, ARGV[2])
        end
        if (freed == 1 or ARGV[2] ~= "") and redis.call("exists", queue) == 1
                and redis.call("exists", key) == 0 then
            announce(key, live_head(queue, leases, node_ms()))
        end
    end)
end
return deleted
