-- Shared by the release scripts that may leave a key to its lock-delay, prepended to each: their
-- answer, how many keys they deleted or, when none was, minus how many they left to the delay
-- (`engine` invariant 6).
local function released(deleted, late)
    if deleted > 0 then
        return deleted
    end
    return -late
end
