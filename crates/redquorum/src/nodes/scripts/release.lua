-- Compare-and-delete: remove the lock only if it still holds our value; then tell the waiters.
-- KEYS[1] = resource; ARGV[1] = lock value, ARGV[2] = the id of a waiter leaving the queue
-- ("" for none), ARGV[3] = "1" to announce, ARGV[4] = under a lock-delay, the remaining time in
-- ms at or below which our key outlived its holder's validity and is left to expire
-- (`release_timely.lua`), "0" without one, ARGV[5] = the queue's hash tag (`queue.lua`: last).
-- Returns 1 if deleted, -1 if left to the lock-delay, 0 otherwise (`released.lua`). Without a
-- lock-delay, the lock key is handled exactly as by the standard script.
local deleted, late = 0, 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    local bound = tonumber(ARGV[4])
    if bound > 0 and outlived(KEYS[1], bound) then
        late = 1
    else
        deleted = redis.call("del", KEYS[1])
    end
end
-- Announced only to our waiters, who are in the queue: without one, a release costs one EXISTS
-- more than the standard script (pcall: an ACL may deny the queue's key).
local leaving = ARGV[2] ~= ""
if leaving or (deleted == 1 and redis.pcall("exists", "redlock-queue:" .. QUEUE_TAG .. KEYS[1]) == 1) then
    with_queue(function(q)
        local queue, leases = q.keys(KEYS[1])
        if leaving then
            redis.call("zrem", queue, ARGV[2])
            redis.call("zrem", leases, ARGV[2])
        end
        if redis.call("exists", queue) == 1 and redis.call("exists", KEYS[1]) == 0 then
            q.announce(KEYS[1], q.live_head(queue, leases, q.node_ms()))
        end
    end)
end
return released(deleted, late)
