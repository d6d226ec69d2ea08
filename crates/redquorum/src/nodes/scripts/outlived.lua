-- Whether `key`, holding our value, has outlived its holder's validity under a lock-delay: it has
-- no more than `bound` ms left (`engine` invariants 6 and 10). A key without an expiry (-1) is no
-- lock of ours any more: not late. Prepended to the scripts that judge it.
local function outlived(key, bound)
    local left = redis.call("pttl", key)
    return left >= 0 and left <= bound
end
