-- Shared by the fenced acquire scripts for sets, prepended to each: what this node knows of the
-- set's fencing counters (KEYS[first..last]) and its clock, as {largest counter or "0", seconds,
-- microseconds}. The counter is returned as stored: Lua's tostring would round a 16-digit number.
local function fence_reading(first, last)
    local largest, largest_text = 0, "0"
    for i = first, last do
        local text = redis.call("get", KEYS[i])
        local counter = tonumber(text or "0") or 0
        if counter > largest then
            largest, largest_text = counter, text
        end
    end
    local now = redis.call("time")
    return {largest_text, now[1], now[2]}
end

