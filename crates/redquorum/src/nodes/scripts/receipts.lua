-- Receipts for a replicated node's replicas (`succession` invariant 5): on a primary, one key per
-- replica run the sentinels listed, holding this server's replication history (its
-- `master_replid`), for `max_ttl`. A replica that shows the receipt naming its own run received
-- this server's writes up to the receipt's, after it started (a run id exists only from then).
-- Never one for this server's own run: a promoted replica's receipt, which names the history it
-- continued, is the evidence a new client reads, and the client that follows it may still list
-- it as a replica for a moment.
-- KEYS = the receipts' keys; ARGV[1] = their lifetime in ms (max_ttl), ARGV[2] = the receipts'
-- key prefix, followed by the run id in each key.
-- Returns the history written, or false on a server that is not a primary (nothing written).
local replication = redis.call("info", "replication")
if not string.find(replication, "role:master", 1, true) then
    return false
end
local history = string.match(replication, "master_replid:(%x+)")
local own = string.match(redis.call("info", "server"), "run_id:(%x+)")
if not history or not own then
    return false
end
for _, key in ipairs(KEYS) do
    if key ~= ARGV[2] .. own then
        redis.call("set", key, history, "px", ARGV[1])
    end
end
return history
