-- Store a fencing token for a read-write lock (`fence_store.lua` and `rw_common.lua` prepended),
-- only while `value` still holds it, as reader or writer.
-- KEYS[1] = the lock key, KEYS[2] = its writer-waiting key (unused), KEYS[3] = its fencing
-- counter; ARGV[1] = lock value, ARGV[2] = token, ARGV[3] = counter retention in ms.
-- Returns 1 when the counter is now at least the token, 0 when the lock is no longer ours.
if not held_as(KEYS[1], ARGV[1]) then
    return 0
end
store_token(KEYS[3])
return 1
