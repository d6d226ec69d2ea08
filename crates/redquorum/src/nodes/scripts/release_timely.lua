-- The release of a lock under a lock-delay (`engine` invariant 6; `outlived.lua` and
-- `released.lua` prepended): compare-and-delete, except that a key whose remaining time is at
-- most ARGV[2] ms has outlived its holder's validity (it was set for the TTL plus the delay): it
-- is left to expire, so that the lock stays unavailable for its delay, whoever sends the release
-- and whether or not they know the deadline.
-- KEYS = the resources; ARGV[1] = lock value, ARGV[2] = that bound in ms (the delay, plus the
-- drift allowance when the sender does not know the lock's deadline).
-- Returns how many keys were deleted or, when none was, minus how many were left to the delay
-- (`released.lua`).
-- One key: a key of another type is an error (WRONGTYPE), as for the standard script; for a set,
-- pcall: it is simply not ours, and must not stop the others' release.
local get = (#KEYS == 1) and redis.call or redis.pcall
local deleted, late = 0, 0
for _, key in ipairs(KEYS) do
    if get("get", key) == ARGV[1] then
        if outlived(key, tonumber(ARGV[2])) then
            late = late + 1
        else
            deleted = deleted + redis.call("del", key)
        end
    end
end
return released(deleted, late)
