-- meshlimit: the exact integer arithmetic of token buckets, shared by decide.lua and
-- decide_buckets.lua. Not a script of its own: src/store/redis/script.rs puts it before
-- each of them (concat!), so each script Redis runs is still one text with one SHA1.
--
-- Numbers are doubles holding integers below 2^53 (see Scale in script_args.rs), where
-- additions, subtractions and products stay exact; divisions do not, so they go through
-- floor_div and ceil_div, which correct the quotient's rounding.

local floor, ceil = math.floor, math.ceil

-- A key's TTL of `ms` milliseconds, up to EXPIRY_JITTER_MS more at random (the line
-- script.rs puts first sets it): keys of one fixed window then do not all expire at its
-- end. The generator is seeded from Redis' clock once per call, as Redis before 7 seeds
-- it alike for every call.
local jitter_seeded = false
local function with_jitter(ms)
  if EXPIRY_JITTER_MS <= 0 then return ms end
  if not jitter_seeded then
    local t = redis.call('TIME')
    math.randomseed(tonumber(t[1]) * 1000000 + tonumber(t[2]))
    jitter_seeded = true
  end
  return ms + math.random(0, EXPIRY_JITTER_MS)
end

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

-- ceil(a / b) for non-negative integers; 0 when b is 0 (a bucket that never refills).
local function ceil_div(a, b)
  if b == 0 then return 0 end
  local q = floor_div(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- A stored bucket (debt d at quantum at, in the scale token / sq it was stored with)
-- refilled to now_q in the limit's scale (token, rate, q): its debt, at most top (the
-- limit's debt ceiling: its capacity, or for a limit that charges, the capacity plus ten
-- periods' refill), and the instant it now stands at.
local function refilled(d, at, stok, sq, now_q, token, rate, top, q)
  if sq ~= q then at = floor(at * sq / q) end
  if stok ~= token then
    -- Same tokens missing in the new scale (a reload changed the limit).
    local whole = floor_div(d, stok)
    d = whole * token + ceil((d - whole * stok) * token / stok)
  end
  if now_q > at then
    local refill = (now_q - at) * rate
    if refill >= d then d = 0 else d = d - refill end
    at = now_q
  end
  -- else Redis' clock went back (a failover): keep the later instant.
  if d > top then d = top end
  return d, at
end

