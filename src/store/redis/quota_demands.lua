-- meshlimit: the demands of the Envoys that report one quota bucket, over all replicas.
--
-- KEYS[1]  the bucket's hash: field = "<replica>/<stream>",
--          value = "<demand> <tokens_per_fill> <max_tokens> <ms>" (demand in requests per
--          second, -1 when not known yet; what the reporter is assigned, 0 0 when not a
--          token bucket; ms: when written)
-- ARGV[1]  now, milliseconds (the caller's clock)
-- ARGV[2]  entries older than this many milliseconds are dropped (their replica is gone)
-- ARGV[3]  n, then n pairs (field, "<demand> <tokens_per_fill> <max_tokens>") to write,
--          then the channel of the nudges (see quota_grant.lua), then fields to delete
--
-- Returns every live entry as field, "<demand> <tokens_per_fill> <max_tokens>", ...
-- A deleted field (its Envoy's stream ended) frees what it held: "<replica> <key>" is
-- published on the channel, the replica being the deleted field's, so that the others
-- hand it out at once.
local now = tonumber(ARGV[1])
local stale = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  redis.call('HSET', KEYS[1], ARGV[4 + 2 * i], ARGV[5 + 2 * i] .. ' ' .. ARGV[1])
end
local channel = ARGV[4 + 2 * n]
local freed_by = nil
for i = 5 + 2 * n, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then
    freed_by = string.match(ARGV[i], '^(.*)/') or ARGV[i]
  end
end
if freed_by then
  redis.call('PUBLISH', channel, freed_by .. ' ' .. KEYS[1])
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local demand, at = string.match(all[i + 1], '^(%S+ %d+ %d+) (%d+)$')
  if at and now - tonumber(at) <= stale then
    out[#out + 1] = all[i]
    out[#out + 1] = demand
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
if #out > 0 then
  redis.call('PEXPIRE', KEYS[1], stale * 2)
end
return out
