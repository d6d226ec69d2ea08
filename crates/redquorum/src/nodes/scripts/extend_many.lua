-- Compare-and-PEXPIRE for a set: reset every key's TTL, only if ALL still hold our value.
-- KEYS = the resources, ARGV[1] = lock value, ARGV[2] = new TTL in milliseconds.
-- Returns 1 if extended, 0 (changing nothing) otherwise.
if not set_ours(#KEYS) then
    return 0
end
for _, key in ipairs(KEYS) do
    redis.call("pexpire", key, ARGV[2])
end
return 1
