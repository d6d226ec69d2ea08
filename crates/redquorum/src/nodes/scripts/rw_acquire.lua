-- Acquire a read-write lock as a reader (ARGV[5] = "r") or as the writer ("w"), and with fencing
-- advance its counter in the same atomic step (`fence_advance.lua` and `rw_common.lua`,
-- prepended).
-- KEYS[1] = the lock key, KEYS[2] = its writer-waiting key, KEYS[3] = its fencing counter;
-- ARGV[1] = lock value, ARGV[2] = TTL in ms, ARGV[3] = counter retention in ms (0: no fencing),
-- ARGV[4] = the clock grain in µs, ARGV[5] = "r" or "w", ARGV[6] = how long a writer refused
-- because of readers keeps new readers out, in ms, ARGV[7] = the writer's id among the waiting
-- writers.
-- Returns nil when refused, 0 when a reader is refused because writers wait, else {the node's
-- proposed token, or 0 without fencing}.
--
-- A writer needs the key free (readers whose expiry passed are dropped first). A writer refused
-- because of readers enters the waiting writers (a sorted set at the writer-waiting key: its id,
-- scored by when it stops counting), and readers are refused while a live one is there: a
-- stream of readers cannot starve a waiting writer, who renews its entry with every attempt and
-- removes it when it gets the lock or gives up (`rw_release.lua`). A reader needs no writer and
-- no waiting writer.
local kind = redis.call("type", KEYS[1]).ok
local ttl = tonumber(ARGV[2])
local writer = ARGV[5] == "w"
if writer then
    if kind == "zset" then
        local now = node_ms()
        redis.call("zremrangebyscore", KEYS[1], "-inf", now)
        if redis.call("zcard", KEYS[1]) > 0 then
            local hold_off = tonumber(ARGV[6])
            redis.call("zadd", KEYS[2], now + hold_off, ARGV[7])
            if redis.call("pttl", KEYS[2]) < hold_off then
                redis.call("pexpire", KEYS[2], hold_off)
            end
            return false
        end
        redis.call("del", KEYS[1])
    elseif kind ~= "none" then
        return false
    end
    redis.call("set", KEYS[1], ARGV[1], "PX", ttl)
    redis.call("zrem", KEYS[2], ARGV[7])
    if ARGV[3] == "0" then
        return {0}
    end
    return {fence_advance(3, 3, ARGV[3], ARGV[4])}
end
if kind ~= "none" and kind ~= "zset" then
    return false
end
-- One clock reading for the reader's expiry and its token.
local time = redis.call("time")
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(clock / 1000)
if redis.call("exists", KEYS[2]) == 1 then
    redis.call("zremrangebyscore", KEYS[2], "-inf", now)
    if redis.call("zcard", KEYS[2]) > 0 then
        return 0
    end
end
if kind == "zset" then
    redis.call("zremrangebyscore", KEYS[1], "-inf", now)
    redis.call("zadd", KEYS[1], now + ttl, ARGV[1])
    outlive(KEYS[1], ttl)
else
    redis.call("zadd", KEYS[1], now + ttl, ARGV[1])
    redis.call("pexpire", KEYS[1], ttl)
end
if ARGV[3] == "0" then
    return {0}
end
-- A reader raises the counter to the rounded clock, without the writer's +1: concurrent readers
-- then agree, and a later writer's token is still larger than every reader's (its +1), while a
-- reader's is at least the last writer's (`rwlock` invariant 3).
local counter = tonumber(redis.call("get", KEYS[3]) or "0") or 0
local token = math.max(counter, clock - clock % tonumber(ARGV[4]))
redis.call("set", KEYS[3], string.format("%d", token), "PX", ARGV[3])
return {token}
