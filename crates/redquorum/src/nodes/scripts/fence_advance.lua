-- Shared by the fenced acquire scripts, prepended to each: advances the fencing counters of the
-- resources just locked (KEYS[first..last]) to one new value, stores it in each (kept for
-- `retention` ms), and returns it: the node's proposal for the token (fencing step 1).
-- The value is one more than the largest counter, and no less than the node's clock in µs rounded
-- down to `grain` µs (fencing invariant 4): a missing counter (never used, expired, or lost with
-- the node's data), or one that is not a number, counts as 0. The rounding is what lets nodes
-- agree: in the steady state every node holds the same counters and reads the same rounded
-- clock, so every node proposes the same value. Counters stay below 2^53: Lua's doubles hold them
-- exactly, and "%d" writes them back exactly.
local function fence_advance(first, last, retention, grain)
    local largest = 0
    for i = first, last do
        local counter = tonumber(redis.call("get", KEYS[i]) or "0") or 0
        if counter > largest then
            largest = counter
        end
    end
    local now = redis.call("time")
    local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local token = math.max(largest + 1, clock - clock % tonumber(grain))
    local text = string.format("%d", token)
    for i = first, last do
        redis.call("set", KEYS[i], text, "PX", retention)
    end
    return token
end

