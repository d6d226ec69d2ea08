-- Compare-and-delete: remove the lock only if it still holds our value; then tell the waiters.
-- KEYS[1] = resource, KEYS[2] = its waiting queue, KEYS[3] = the queue's leases;
-- ARGV[1] = lock value, ARGV[2] = the id of a waiter leaving the queue ("" for none).
-- Returns 1 if deleted, 0 otherwise. The lock key is handled exactly as by the standard script.
local deleted = 0
if redis.call("get", KEYS[1]) == ARGV[1] then
    deleted = redis.call("del", KEYS[1])
end
if ARGV[2] ~= "" then
    redis.call("zrem", KEYS[2], ARGV[2])
    redis.call("zrem", KEYS[3], ARGV[2])
end
-- Announced only to our waiters, who are in the queue: without one, a release costs one EXISTS
-- more than the standard script.
if (deleted == 1 or ARGV[2] ~= "") and redis.call("exists", KEYS[2]) == 1
        and redis.call("exists", KEYS[1]) == 0 then
    announce(KEYS[1], live_head(KEYS[2], KEYS[3], node_ms()))
end
return deleted
