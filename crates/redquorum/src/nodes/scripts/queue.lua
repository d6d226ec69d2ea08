-- The fair waiting queue, prepended to every script that uses it (see `waiting` in the crate).
-- A resource's queue is two sorted sets next to its lock key: its waiters by ticket (arrival
-- time, chosen by the waiter and the same on every node, so every node orders them alike), and
-- the same waiters by lease expiry in this node's milliseconds. A waiter that stops renewing its
-- lease drops out at the next look: a dead waiter blocks nobody for longer than its lease.
--
-- The queue is only ever a hint, so its part of every script runs through `with_queue`: a server
-- that refuses it (an ACL without access to the queue's keys or channel, a key of another type)
-- costs the queue, never the lock's own step. For the same reason its keys are named here, from
-- the lock key, rather than declared: Redis checks every declared key against the caller's ACL
-- before it runs a script at all. Undeclared keys are fine on standalone masters, and on a Redis
-- Cluster node as long as they are in the lock key's slot: every script that uses the queue
-- takes, as its last argument, a hash tag ("{t}", where t hashes to the lock key's slot) that
-- goes in front of the resource in the queue's key names, or "" on a standalone master.
local QUEUE_TAG = ARGV[#ARGV]

-- Runs `work(q)` as a best effort, `q` holding the queue's helpers, and says whether it ran to
-- the end. The helpers are made here, not at the top of every script: a release with nobody
-- queued, the common case, never pays for them.
local function with_queue(work)
    local q = {}

    function q.keys(resource)
        return "redlock-queue:" .. QUEUE_TAG .. resource,
            "redlock-queue-lease:" .. QUEUE_TAG .. resource
    end

    function q.node_ms()
        local now = redis.call("time")
        return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    end

    -- Drops the waiters whose lease ran out, then names the first live one ("" when none).
    function q.live_head(queue, leases, now)
        local dead = redis.call("zrangebyscore", leases, "-inf", now)
        if #dead > 0 then
            redis.call("zrem", queue, unpack(dead))
            redis.call("zrem", leases, unpack(dead))
        end
        return redis.call("zrange", queue, 0, 0)[1] or ""
    end

    -- Tells the resource's subscribers it is free: the payload names the waiter whose turn it
    -- is, or is empty when nobody live queues (every waiter may try).
    function q.announce(resource, head)
        redis.call("publish", "redlock-released:" .. resource, head)
    end

    return pcall(work, q)
end

