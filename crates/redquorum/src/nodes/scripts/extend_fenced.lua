-- Compare-and-PEXPIRE with fencing on (`outlived.lua` prepended): reset the lock's TTL only if it
-- still holds our value, and keep the resource's fencing counter for its retention from now,
-- since an extension is a use of it: a lock held longer than the retention keeps its counter (the
-- term a leader's observers read, `election` invariant 5) instead of leaving the next token to
-- the clock term.
-- KEYS[1] = resource, KEYS[2] = its fencing counter; ARGV[1] = lock value, ARGV[2] = new TTL in
-- ms, ARGV[3] = counter retention in ms, ARGV[4] (an extension by value under a lock-delay only)
-- = a late bound in ms, as in `extend.lua`.
-- Returns 1 if extended, -1 if left to the delay, 0 otherwise.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[4] and outlived(KEYS[1], tonumber(ARGV[4])) then
    return -1
end
redis.call("pexpire", KEYS[2], ARGV[3])
return redis.call("pexpire", KEYS[1], ARGV[2])
