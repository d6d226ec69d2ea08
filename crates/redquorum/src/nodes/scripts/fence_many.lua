-- Store one fencing token in the counter of every resource of a set, only while ALL of its keys
-- still hold our value (`set_ours.lua` and `fence_store.lua` prepended).
-- KEYS[1..n] = the resources, KEYS[n+1..2n] = their fencing counters, in the same order;
-- ARGV[1] = lock value, ARGV[2] = token, ARGV[3] = counter retention in ms.
-- Returns 1 when every counter is now at least the token, 0 (changing nothing) when the lock is
-- no longer ours on this node.
local n = #KEYS / 2
if not set_ours(n) then
    return 0
end
for i = n + 1, 2 * n do
    store_token(KEYS[i])
end
return 1
