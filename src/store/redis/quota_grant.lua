-- meshlimit: grant this replica's reporters of one quota bucket their shares, within what
-- the other replicas' reporters hold, atomically (so the sum of all assignments never
-- passes the rule, whichever replica grants first).
--
-- KEYS[1]  the bucket's hash (see quota_demands.lua)
-- ARGV[1]  now, milliseconds; ARGV[2] entries older than this many milliseconds are gone
-- ARGV[3]  the rule's tokens_per_fill over the shares' interval; ARGV[4] its max_tokens
-- ARGV[5]  n, then n times: field, demand, tokens_per_fill wanted, max_tokens wanted
-- then     the channel that tells the other replicas to look at a bucket again, and this
--          replica's name
--
-- Returns the granted tokens_per_fill, max_tokens of each field, in order: the wanted
-- ones, cut down in proportion when the others leave less.
--
-- Publishes "<replica> <key>" on the channel when a grant is cut (the others hold what it
-- wanted: they should shrink now, not at their next look) or when one of this replica's
-- fields holds less than before (room freed: a replica that was cut can grant again).
local now = tonumber(ARGV[1])
local stale = tonumber(ARGV[2])
local total_rate = tonumber(ARGV[3])
local total_burst = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local channel = ARGV[6 + 4 * n]
local replica = ARGV[7 + 4 * n]
local mine = {}
local want_rate, want_burst = 0, 0
for i = 0, n - 1 do
  mine[ARGV[6 + 4 * i]] = {0, 0}
  want_rate = want_rate + tonumber(ARGV[8 + 4 * i])
  want_burst = want_burst + tonumber(ARGV[9 + 4 * i])
end
local held_rate, held_burst = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local rate, burst, at = string.match(all[i + 1], '^%S+ (%d+) (%d+) (%d+)$')
  if at then
    if mine[all[i]] then
      mine[all[i]] = {tonumber(rate), tonumber(burst)}
    elseif now - tonumber(at) <= stale then
      held_rate = held_rate + tonumber(rate)
      held_burst = held_burst + tonumber(burst)
    end
  end
end
local free_rate = math.max(0, total_rate - held_rate)
local free_burst = math.max(0, total_burst - held_burst)
local cut = want_rate > free_rate or want_burst > free_burst
local freed = false
local out = {}
for i = 0, n - 1 do
  local field = ARGV[6 + 4 * i]
  local rate = tonumber(ARGV[8 + 4 * i])
  local burst = tonumber(ARGV[9 + 4 * i])
  if want_rate > free_rate then rate = math.floor(rate * free_rate / want_rate) end
  if want_burst > free_burst then burst = math.floor(burst * free_burst / want_burst) end
  if rate < mine[field][1] or burst < mine[field][2] then freed = true end
  redis.call('HSET', KEYS[1], field,
    ARGV[7 + 4 * i] .. ' ' .. rate .. ' ' .. burst .. ' ' .. ARGV[1])
  out[#out + 1] = rate
  out[#out + 1] = burst
end
redis.call('PEXPIRE', KEYS[1], stale * 2)
if (cut or freed) and channel then
  redis.call('PUBLISH', channel, replica .. ' ' .. KEYS[1])
end
return out
