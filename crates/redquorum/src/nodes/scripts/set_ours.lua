-- Shared by the scripts for a set, prepended to each: whether ALL of the set's keys
-- (KEYS[1..n]) still hold our value (ARGV[1]). A key of another type counts as not ours.
local function set_ours(n)
    for i = 1, n do
        if redis.pcall("get", KEYS[i]) ~= ARGV[1] then
            return false
        end
    end
    return true
end

