-- Shared by the read-write lock's scripts, prepended to each. A read-write lock is one key: a
-- string holding the writer's value (exactly a lock's key, so a writer is refused by, and
-- refuses, every other Redlock client's lock of the same name), or a sorted set of readers, each
-- a lock value scored by its expiry in this node's milliseconds. The set itself expires with its
-- longest-lived reader (set again whenever a reader leaves or extends), so readers that die leave
-- nothing behind for longer than their TTL.

local function node_ms()
    local now = redis.call("time")
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- How `value` holds the lock at `key` now: "w" (the writer), "r" (a reader whose expiry has not
-- passed), or nil.
local function held_as(key, value)
    local kind = redis.call("type", key).ok
    if kind == "string" then
        if redis.call("get", key) == value then
            return "w"
        end
    elseif kind == "zset" then
        local expiry = redis.call("zscore", key, value)
        if expiry and tonumber(expiry) > node_ms() then
            return "r"
        end
    end
    return nil
end

-- Makes the reader set at `key` expire with its longest-lived reader, `now` being the node's
-- time in ms.
local function fit_expiry(key, now)
    local last = redis.call("zrange", key, -1, -1, "WITHSCORES")[2]
    if last then
        redis.call("pexpire", key, math.max(1, tonumber(last) - now))
    end
end

-- Makes the reader set at `key` live at least `ttl` ms more, for a reader that just got `ttl`.
local function outlive(key, ttl)
    if redis.call("pttl", key) < ttl then
        redis.call("pexpire", key, ttl)
    end
end
