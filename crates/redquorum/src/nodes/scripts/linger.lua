-- The release of a lock that was lost while a lock-delay is set (`engine` invariant 5): instead
-- of deleting the keys, keep each that still holds our value for at least the delay from now
-- (never shorter than it already had), so the holder's last writes, still in flight, do not meet
-- the next holder's.
-- KEYS = the resources; ARGV[1] = lock value, ARGV[2] = the lock-delay in ms.
-- Returns how many keys of ours it kept.
local kept = 0
for _, key in ipairs(KEYS) do
    if redis.pcall("get", key) == ARGV[1] then
        if redis.call("pttl", key) < tonumber(ARGV[2]) then
            redis.call("pexpire", key, ARGV[2])
        end
        kept = kept + 1
    end
end
return kept
