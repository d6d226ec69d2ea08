-- Acquire a set of resources all-or-nothing: SET every key only if none of them exists.
-- KEYS = the resources (sorted); ARGV[1] = lock value, ARGV[2] = TTL in ms.
-- Returns 1 when every key was set, nil (changing nothing) when any of them exists.
for _, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then
        return false
    end
end
for _, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return 1
