-- meshlimit: decide every limited descriptor of one request atomically.
--
-- The Redis twin of src/limiter (step, request_denied) and of the embedded store's
-- two-pass decision: evaluate every check as if the request passes, decide the request,
-- then keep the consumed states (allowed) or replay without consumption (denied).
-- Fixed windows count every hit either way, as the Go server does.
--
-- KEYS[i]   bucket i (the same key may repeat: one bucket, seeing earlier hits)
-- ARGV[1]   now in microseconds, or '' to read Redis' own clock (TIME)
-- ARGV[1 + (i-1)*8 + 1 ..]  check i, 8 fields:
--   kind   't' token bucket | 'w' fixed window
--   hits   hits to take (0 checks without consuming)
--   mode   'e' enforce | 's' shadow | 'q' quota | 'x' shadow quota
--   t: token, rate, cap, q   -- scaled integers (see src/store/redis/script_args.rs, Scale)
--   w: limit, window seconds, 0, 0
--   lease  extra whole tokens to lease when the request passes (token buckets)
-- Numbers stay below 2^53, where Lua's doubles are exact integers.
--
-- Returns {denied, then per check: over, remaining, reset_us, a, b} where
--   t: a = debt after the decision (scaled), b = tokens leased
--   w: a = count after the decision, b = microseconds until the window ends

local STRIDE = 8
local now_us
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us = tonumber(ARGV[1])
end

-- floor(a / b) for non-negative integers, corrected for the division's rounding.
local function floor_div(a, b)
  local q = math.floor(a / b)
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

local function decode(raw)
  if not raw then return nil end
  if #raw == 32 then
    local d, at, tok, q = struct.unpack('<dddd', raw)
    return { kind = 't', d = d, at = at, tok = tok, q = q, rate = 0 }
  elseif #raw == 24 then
    local start, count, win = struct.unpack('<ddd', raw)
    return { kind = 'w', start = start, count = count, win = win }
  end
  return nil
end

local function bucket(s, hits, token, rate, cap, q)
  local now_q = math.floor(now_us / q)
  local debt, at = 0, now_q
  if s and s.kind == 't' then
    local d, sat = s.d, s.at
    if s.q ~= q then sat = math.floor(sat * s.q / q) end
    if s.tok ~= token then
      -- Same tokens missing in the new scale (a reload changed the limit).
      local whole = floor_div(d, s.tok)
      d = whole * token + math.ceil((d - whole * s.tok) * token / s.tok)
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
  local avail = cap - debt
  local take = hits * token
  local need = math.max(take, token)
  local passes = rate > 0 and need <= avail
  local retry = 0
  if not passes and rate > 0 then
    if need <= cap then
      retry = ceil_div(need - avail, rate)
    else
      retry = ceil_div(debt, rate)
    end
  end
  return { kind = 't', debt = debt, at = at, passes = passes, take = take, retry = retry,
           token = token, rate = rate, cap = cap, q = q }
end

local function window(s, hits, limit, win)
  local now_s = math.floor(now_us / 1000000)
  local start = now_s - now_s % win
  local before = 0
  if s and s.kind == 'w' and s.start == start and s.win == win then before = s.count end
  local after = before + hits
  local over = after > limit
  local remaining = 0
  if not over then remaining = limit - after end
  return { kind = 'w', over = over, remaining = remaining,
           reset = (start + win - now_s) * 1000000,
           until_end = (start + win) * 1000000 - now_us,
           state = { kind = 'w', start = start, count = after, win = win } }
end

local function step(i, s)
  local o = 1 + (i - 1) * STRIDE
  local hits = tonumber(ARGV[o + 2])
  local a, b = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
  if ARGV[o + 1] == 't' then
    return bucket(s, hits, a, b, tonumber(ARGV[o + 6]), tonumber(ARGV[o + 7]))
  end
  return window(s, hits, a, b)
end

local function over(st)
  if st.kind == 't' then return not st.passes end
  return st.over
end

-- State and report {over, remaining, reset_us, a} of a step for one fate.
local function outcome(st, consumed)
  if st.kind == 'w' then
    return st.state, { st.over, st.remaining, st.reset, st.state.count, st.until_end }
  end
  local debt = st.debt
  if consumed and st.passes then debt = debt + st.take end
  local remaining = 0
  if st.rate > 0 then remaining = floor_div(st.cap - debt, st.token) end
  local reset
  if st.passes then reset = ceil_div(debt, st.rate) else reset = st.retry end
  local state = { kind = 't', d = debt, at = st.at, tok = st.token, q = st.q, rate = st.rate,
                  cap = st.cap }
  return state, { not st.passes, remaining, reset * st.q, debt, 0 }
end

local n = #KEYS
local first, stored, cur = {}, {}, {}
for i = 1, n do
  first[i] = i
  for j = 1, i - 1 do
    if KEYS[j] == KEYS[i] then
      first[i] = first[j]
      break
    end
  end
  if first[i] == i then
    stored[i] = decode(redis.call('GET', KEYS[i]))
    cur[i] = stored[i]
  end
end

-- Pass 1: as if the request passes.
local steps = {}
local denied, quota_seen, quota_all_over = false, false, true
for i = 1, n do
  local st = step(i, cur[first[i]])
  steps[i] = st
  cur[first[i]] = outcome(st, true)
  local mode = ARGV[1 + (i - 1) * STRIDE + 3]
  local is_over = over(st)
  if mode == 'e' then
    if is_over then denied = true end
  elseif mode == 'q' then
    quota_seen = true
    if not is_over then quota_all_over = false end
  elseif mode == 'x' then
    quota_seen = true
    quota_all_over = false
  end
end
if quota_seen and quota_all_over then denied = true end

-- Pass 2: settle.
local reports = {}
if denied then
  for i = 1, n do
    if first[i] == i then cur[i] = stored[i] end
  end
  for i = 1, n do
    local state, report = outcome(step(i, cur[first[i]]), false)
    cur[first[i]] = state
    report[1] = over(steps[i])
    reports[i] = report
  end
else
  for i = 1, n do
    local _, report = outcome(steps[i], true)
    reports[i] = report
  end
  -- Leases: whole tokens beyond the request's own, never more than the bucket holds.
  for i = 1, n do
    local want = tonumber(ARGV[1 + (i - 1) * STRIDE + 8])
    local s = cur[first[i]]
    if want > 0 and s.kind == 't' and s.rate > 0 then
      local lease = math.min(want, floor_div(s.cap - s.d, s.tok))
      if lease > 0 then
        s.d = s.d + lease * s.tok
        reports[i][5] = lease
      end
    end
  end
end

-- Keep every bucket, each with a TTL: until full again, or until its window ends.
for i = 1, n do
  if first[i] == i then
    local s = cur[i]
    if s.kind == 't' then
      if s.d <= 0 or s.rate <= 0 then
        redis.call('DEL', KEYS[i])
      else
        local ttl_ms = math.ceil(ceil_div(s.d, s.rate) * s.q / 1000)
        redis.call('SET', KEYS[i], struct.pack('<dddd', s.d, s.at, s.tok, s.q), 'PX', ttl_ms)
      end
    else
      local ttl_ms = math.max(1, math.ceil(((s.start + s.win) * 1000000 - now_us) / 1000))
      redis.call('SET', KEYS[i], struct.pack('<ddd', s.start, s.count, s.win), 'PX', ttl_ms)
    end
  end
end

local out = { denied and 1 or 0 }
for i = 1, n do
  local r = reports[i]
  out[#out + 1] = r[1] and 1 or 0
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
  out[#out + 1] = r[4]
  out[#out + 1] = r[5]
end
return out
