-- Issue a fencing token on request (fencing invariant 8): only while EVERY key of the lock still
-- holds our value (set_ours.lua, prepended), advance their fencing counters to one new value
-- (fence_advance.lua, prepended) and return it, the node's proposal.
-- KEYS[1..n] = the resources, KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = counter retention in ms, ARGV[3] = the clock grain in µs.
-- Returns nil, changing nothing, when the lock is no longer ours on this node, else {the
-- proposal}.
local n = #KEYS / 2
if not set_ours(n) then
    return false
end
return {fence_advance(n + 1, 2 * n, ARGV[2], ARGV[3])}
