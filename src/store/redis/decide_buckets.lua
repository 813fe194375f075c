-- meshlimit: decide requests whose checks are all token buckets, many requests per call.
--
-- The specialised twin of decide.lua for the shape most requests have: every check a token
-- bucket in enforce or shadow mode, no lease, no bucket twice in one request (Shape in
-- src/store/redis/script_args.rs). It makes the same decisions and stores the same states
-- as decide.lua; its reply is shorter, and script_args.rs (BucketCheck::reply) derives
-- decide.lua's reply from it. tests/redis_batches.rs runs both on the same sequences.
--
-- Requests are decided one after the other, in order, each all-or-nothing on its own: a
-- later request sees what the earlier ones consumed, and one request's denial never undoes
-- another's consumption. Each bucket is read once (GET) and written once at the end (SET
-- with a TTL, or DEL when full), however many requests of the call name it; the states in
-- between live in `known`, exactly as the requests one call each would have read them back
-- (a bucket that would have been deleted reads as absent).
--
-- KEYS      every check's bucket, request after request
-- ARGV[1]   little-endian doubles (struct '<d', read in one go): now in microseconds (-1:
--           Redis' clock, TIME), then per request the number of checks n, then per check
--           six: hits, token, rate, cap, q (a Scale's exact integers, see script_args.rs),
--           and 1 when the check being over denies the request (enforce), 0 if not (shadow)
-- Numbers stay below 2^53, where Lua's doubles are exact integers.
--
-- Returns, request after request: denied, then per check the bucket's debt before the
-- request's hits (refilled to now, scaled). Whether each check passes, what it reports and
-- what it left follow from that, the check's numbers and the request's fate.
--
-- Stored state: decide.lua's token bucket, 32 bytes '<dddd' debt, at (quanta), token, q;
-- a key holding anything else (another algorithm before a reload) starts a fresh bucket.

local floor, ceil = math.floor, math.ceil

-- floor(a / b) for non-negative integers, corrected for the division's rounding.
local function floor_div(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_div(a, b)
  if b == 0 then return 0 end
  local q = floor_div(a, b)
  if q * b < a then q = q + 1 end
  return q
end

local packed = ARGV[1]
-- Unpacked in one call: per call, not per number, is what struct.unpack costs most.
local v = { struct.unpack('<' .. string.rep('d', #packed / 8), packed) }
local now = v[1]
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Every bucket met: { debt, at, token, q, rate } after the latest request, or false
-- (absent); and the keys in order of first use, for the writes.
local known, keys = {}, {}
-- One request's checks between its two passes (reused by the next request).
local debts, ats, passing = {}, {}, {}
local out, o = {}, 0
local k, a = 0, 2
local last = #v - 1 -- struct.unpack adds the next position
while a <= last do
  -- Pass 1: each check as if the request passes.
  local n = v[a]
  local denied = false
  local c = a + 1
  for i = 1, n do
    local hits, token, rate, cap, q = v[c], v[c + 1], v[c + 2], v[c + 3], v[c + 4]
    local key = KEYS[k + i]
    local s = known[key]
    if s == nil then
      local raw = redis.call('GET', key)
      if raw and #raw == 32 then
        s = { struct.unpack('<dddd', raw) }
      else
        s = false
      end
      known[key] = s
      keys[#keys + 1] = key
    end
    local now_q = now
    if q ~= 1 then now_q = floor(now / q) end
    local debt, at = 0, now_q
    if s then
      local d, sat, stok, sq = s[1], s[2], s[3], s[4]
      if sq ~= q then sat = floor(sat * sq / q) end
      if stok ~= token then
        -- Same tokens missing in the new scale (a reload changed the limit).
        local whole = floor_div(d, stok)
        d = whole * token + ceil((d - whole * stok) * token / stok)
      end
      if now_q > sat then
        local refill = (now_q - sat) * rate
        if refill >= d then d = 0 else d = d - refill end
      else
        at = sat -- Redis' clock went back (a failover): keep the later instant
      end
      if d > cap then d = cap end
      debt = d
    end
    local need = hits * token
    if need < token then need = token end
    local passes = rate > 0 and need <= cap - debt
    if not passes and v[c + 5] == 1 then denied = true end
    debts[i], ats[i], passing[i] = debt, at, passes
    c = c + 6
  end
  -- Pass 2: the buckets keep what an allowed request took, none when denied.
  o = o + 1
  out[o] = denied and 1 or 0
  c = a + 1
  for i = 1, n do
    local debt = debts[i]
    o = o + 1
    out[o] = debt
    local token, rate = v[c + 1], v[c + 2]
    if passing[i] and not denied then debt = debt + v[c] * token end
    local key = KEYS[k + i]
    if debt <= 0 or rate <= 0 then
      known[key] = false
    else
      local s = known[key]
      if s then
        s[1], s[2], s[3], s[4], s[5] = debt, ats[i], token, v[c + 4], rate
      else
        known[key] = { debt, ats[i], token, v[c + 4], rate }
      end
    end
    c = c + 6
  end
  k = k + n
  a = c
end

-- Keep every bucket, with a TTL until it is full again; a full one is deleted.
for i = 1, #keys do
  local key = keys[i]
  local s = known[key]
  if s then
    local d, rate, q = s[1], s[5], s[4]
    redis.call('SET', key, struct.pack('<dddd', d, s[2], s[3], q), 'PX',
      ceil(ceil_div(d, rate) * q / 1000))
  else
    redis.call('DEL', key)
  end
end

return out
