-- Shared by the scripts that store a fencing token (fencing step 3), prepended to each: raises
-- the counter at `key` to the token (ARGV[2]) unless it holds as much already, and keeps it for
-- the counter retention (ARGV[3], in ms) from now either way. Tokens are below 2^53, so Lua's
-- doubles compare them exactly.
local function store_token(key)
    local current = tonumber(redis.call("get", key) or "0") or 0
    if tonumber(ARGV[2]) > current then
        redis.call("set", key, ARGV[2], "PX", ARGV[3])
    else
        redis.call("pexpire", key, ARGV[3])
    end
end
