-- Acquire as a fair waiter (`Builder::fair`), for one resource or a set: join (or keep) a place in
-- each resource's queue, which is what makes releases announce themselves, and take the keys only
-- as the waiter at the head of every queue. Safety does not depend on the queue: the keys are
-- still set only where none exists, exactly as SET NX.
-- A set with a busy member queues only for its busy members, and leaves the queues of its free
-- ones (announcing the next in line where it was first), so that it never closes a free
-- resource to that resource's own waiters while it cannot take it anyway (`waiting` invariant 11).
-- KEYS[1..n] = the resources (sorted), then KEYS[n+1..2n] = their fencing counters when fenced;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms, ARGV[3] = waiter id, ARGV[4] = its ticket,
-- ARGV[5] = lease in ms, ARGV[6] = n, ARGV[7] = counter retention in ms and
-- ARGV[8] = the clock grain in µs when fenced, ARGV[9] = the queue's hash tag (`queue.lua`).
-- Returns 0 when refused because another waiter is ahead, nil when refused because a key exists;
-- when granted 1, or when fenced {the node's proposed token} as acquire_many_fenced.lua.
local n = tonumber(ARGV[6])
local id, ticket, lease = ARGV[3], ARGV[4], tonumber(ARGV[5])
local free = true
local busy = {}
for i = 1, n do
    busy[i] = redis.call("exists", KEYS[i]) == 1
    if busy[i] then
        free = false
    end
end
local first = true
local queued = with_queue(function(q)
    local now = q.node_ms()
    for i = 1, n do
        local queue, leases = q.keys(KEYS[i])
        local head = q.live_head(queue, leases, now)
        if not free and not busy[i] then
            -- A free member of a set that cannot be taken yet: no claim on it, and nobody queued
            -- there is ahead of us for what we wait for (never the case for a single resource).
            if redis.call("zrem", queue, id) == 1 then
                redis.call("zrem", leases, id)
                if head == id and redis.call("exists", queue) == 1 then
                    q.announce(KEYS[i], q.live_head(queue, leases, now))
                end
            end
        else
            -- Uncontended (free, nobody queued) touches no queue; otherwise join, or renew a
            -- lease that is half gone. Renewing less often spares durable nodes a write (and an
            -- fsync) on every attempt of every waiter.
            if not (free and head == "") then
                local expiry = tonumber(redis.call("zscore", leases, id) or "0")
                if expiry < now + lease / 2 then
                    redis.call("zadd", queue, ticket, id)
                    redis.call("zadd", leases, now + lease, id)
                    redis.call("pexpire", queue, lease)
                    redis.call("pexpire", leases, lease)
                    head = redis.call("zrange", queue, 0, 0)[1]
                end
            end
            if head ~= id and head ~= "" then
                first = false
            end
        end
    end
end)
if not queued then
    first = true -- no usable queue: nobody is known to be ahead
end
if not first then
    return 0 -- another waiter's turn
elseif not free then
    return false
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
if #KEYS < 2 * n then
    return 1
end
return {fence_advance(n + 1, 2 * n, ARGV[7], ARGV[8])}
