-- A protected resource that checks fencing tokens: refuse a write whose token is below the
-- largest seen so far, atomically. Used by examples/fenced_write.rs and tests/fencing.rs.
-- KEYS[1] = data, KEYS[2] = largest token seen; ARGV[1] = token, ARGV[2] = new value.
local seen = tonumber(redis.call("get", KEYS[2]) or "0")
if tonumber(ARGV[1]) < seen then return 0 end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[1], ARGV[2])
return 1
