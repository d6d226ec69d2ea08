-- Compare-and-delete for a set: remove every key that still holds our value; then, for a fair
-- client, tell the queued waiters of each key that is now free.
-- KEYS = the resources; ARGV[1] = lock value, ARGV[2] = the id of a waiter leaving the queues
-- ("" for none), ARGV[3] = "1" to announce, ARGV[4] = the lock-delay's bound, as in
-- `release.lua` ("0" without one), ARGV[5] = the queue's hash tag (`queue.lua`: last).
-- Returns how many keys were deleted or, when none was, minus how many were left to the delay
-- (`released.lua`).
-- pcall: a key of another type is simply not ours, and must not stop the others' release.
local deleted, late = 0, 0
local bound = tonumber(ARGV[4])
for _, key in ipairs(KEYS) do
    local freed = 0
    if redis.pcall("get", key) == ARGV[1] then
        if bound > 0 and outlived(key, bound) then
            late = late + 1
        else
            freed = redis.call("del", key)
            deleted = deleted + freed
        end
    end
    local leaving = ARGV[2] ~= ""
    local announce = ARGV[3] == "1" and freed == 1
    if leaving or (announce and redis.pcall("exists", "redlock-queue:" .. QUEUE_TAG .. key) == 1) then
        with_queue(function(q)
            local queue, leases = q.keys(key)
            if leaving then
                redis.call("zrem", queue, ARGV[2])
                redis.call("zrem", leases, ARGV[2])
            end
            if redis.call("exists", queue) == 1 and redis.call("exists", key) == 0 then
                q.announce(key, q.live_head(queue, leases, q.node_ms()))
            end
        end)
    end
end
return released(deleted, late)
