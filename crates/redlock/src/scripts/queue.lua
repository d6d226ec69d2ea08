-- The fair waiting queue, prepended to every script that uses it (see `waiting` in the crate).
-- A resource's queue is two sorted sets next to its lock key: its waiters by ticket (arrival
-- time, chosen by the waiter and the same on every node, so every node orders them alike), and
-- the same waiters by lease expiry in this node's milliseconds. A waiter that stops renewing its
-- lease drops out at the next look: a dead waiter blocks nobody for longer than its lease.

local function node_ms()
    local now = redis.call("time")
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- Drops the waiters whose lease ran out, then names the first live one ("" when none).
local function live_head(queue, leases, now)
    local dead = redis.call("zrangebyscore", leases, "-inf", now)
    if #dead > 0 then
        redis.call("zrem", queue, unpack(dead))
        redis.call("zrem", leases, unpack(dead))
    end
    return redis.call("zrange", queue, 0, 0)[1] or ""
end

-- Tells the resource's subscribers it is free: the payload names the waiter whose turn it is,
-- or is empty when nobody queues (every waiter may try).
local function announce(resource, head)
    redis.call("publish", "redlock-released:" .. resource, head)
end

