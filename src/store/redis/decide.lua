-- meshlimit: decide every limited descriptor of a request atomically, many requests per call.
--
-- The Redis twin of src/limiter (step, request_denied, sliding.rs) and of the embedded
-- store's two-pass decision: evaluate every check as if the request passes, decide the
-- request, then keep the consumed states (allowed) or replay without consumption (denied).
-- Fixed windows count every hit either way, as the Go server does; so do a charge (hits on
-- a limit that charges) and a refund (hits given back): they land, both passes give them
-- the same state. A token bucket of a limit that charges may owe more than its capacity
-- (its level below zero), up to its ceiling.
--
-- Requests are decided one after the other, in ARGV order, each all-or-nothing on its own:
-- a later request sees what the earlier ones consumed, and one request's denial never
-- undoes another's consumption. Each bucket is read once and written once at the end of
-- the call; the states in between live in `known`, exactly as the requests one call each
-- would have read them back (a bucket that would have been deleted reads as absent).
-- decide_buckets.lua is the same for requests of token buckets only, faster. Both run
-- after exact.lua (floor_div, ceil_div, refilled), which script.rs puts before them.
--
-- KEYS      every check's bucket, request after request (the same key may repeat within a
--           request: one bucket, seeing earlier hits)
-- ARGV      request after request: now in microseconds, or '' to read Redis' own clock
--           (TIME, read once per call); the number of checks n; then per check 9 fields:
--   kind   't' token bucket | 'w' fixed window | 's' sliding window; upper case ('T', 'W',
--          'S') when the limit charges (or the check is a refund): hits then land
--   hits   hits to take (0 checks without consuming); negative: a refund of that many
--          ('-0': a refund of nothing, which lands as one)
--   mode   'e' enforce | 's' shadow | 'q' quota | 'x' shadow quota
--   desc   the request descriptor the check belongs to: checks of one descriptor are
--          consecutive, and a descriptor is over when any of its checks is
--   t: token, rate, cap, q   -- scaled integers (see src/store/redis/script_args.rs, Scale)
--   w: limit, window seconds, 0, 0
--   s: limit, period microseconds, 0, 0
--   lease  extra whole tokens to lease when the request passes ('t'); for 'T', which never
--          leases, the debt ceiling (scaled): the capacity plus ten periods' refill
-- Numbers stay below 2^53, where Lua's doubles are exact integers.
--
-- Holds (src/store/hold.rs): a request whose checks include holds sends its number of
-- checks negative (-n), so that requests without them cost nothing more; after its checks
-- come h, the number of hold ops, then per op 5 fields:
--   check  the index (1 on) in the request of the check it belongs to (one op a check)
--   op     'r' reserve | 's' settle a reservation | 'v' a reservation's other checks: its
--          expired holds released, nothing held | 'c' take a slot | 'x' give a slot back
--          | 'p' peek at the slots
--   id     the hold's name ('' for a peek)
--   ttl    how long a new hold lasts, in microseconds
--   max    the concurrency limit's slots ('c', 'x', 'p'); 0 for a reservation
-- and its KEYS after the request's check keys: per op, the check key's hold keys (see
-- hold_keys in src/store/redis/part.rs): '<key>:h' (hash id -> hits held; for a slot, the
-- settles it waits for when its name was held twice) and '<key>:e' (sorted set id scored
-- by expiry in microseconds).
--
-- Returns, request after request: denied, then per check: over, remaining, reset_us, a, b
-- where over is 1 or 0, plus, for a check with a hold op, twice the holds (and slots) of
-- its key that the request released unsettled after their TTL (what the rule's `expired`
-- statistics count), and
--   t: a = debt after the decision (scaled, above the capacity when in debt), b = tokens
--      leased
--   w: a = count after the decision, b = microseconds until the window ends
--   s: a = hits counted in the window after the decision, b = when over, microseconds
--      until one hit could pass (0 when one could pass now)
--
-- Stored states (struct.pack, told apart by length):
--   t: 32 bytes '<dddd' debt, at (quanta), token, q
--   w: 24 bytes '<ddd' start (seconds), count, window seconds
--   s: 60 bytes '<dd' newest sub-window, period microseconds, then 11 'I4' counters of
--      admitted hits, the newest sub-window's first

local STRIDE = 9
-- A sliding window's sub-windows per period, and its counters: the current sub-window and
-- the SUBWINDOWS before it (SLIDING_SUBWINDOWS in src/rules.rs).
local SUBWINDOWS = 10
local SLOTS = SUBWINDOWS + 1
local SLIDING_FORMAT = '<dd' .. string.rep('I4', SLOTS)
-- The time of the request being decided, in microseconds; Redis' clock once read.
local now_us, clock
-- Hits that replace a check's own, by the check's ARGV offset: a settle's, what was used
-- less what was held (negative: a refund).
local hits_at = {}

local function decode(raw)
  if not raw then return nil end
  if #raw == 32 then
    local d, at, tok, q = struct.unpack('<dddd', raw)
    return { kind = 't', d = d, at = at, tok = tok, q = q, rate = 0 }
  elseif #raw == 24 then
    local start, count, win = struct.unpack('<ddd', raw)
    return { kind = 'w', start = start, count = count, win = win }
  elseif #raw == 16 + 4 * SLOTS then
    local v = { struct.unpack(SLIDING_FORMAT, raw) }
    local c = {}
    for k = 1, SLOTS do c[k] = v[k + 2] end
    return { kind = 's', newest = v[1], period = v[2], c = c }
  end
  return nil
end

-- A token bucket's step; `top` is its debt ceiling (cap, unless the limit charges). In
-- debt (debt > cap) `avail` is negative: nothing passes.
local function bucket(s, hits, token, rate, cap, q, top)
  local now_q = math.floor(now_us / q)
  local debt, at = 0, now_q
  if s and s.kind == 't' then
    debt, at = refilled(s.d, s.at, s.tok, s.q, now_q, token, rate, top, q)
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

-- A fixed window's step; negative hits (a refund) take hits out, never below 0.
local function window(s, hits, limit, win)
  local now_s = math.floor(now_us / 1000000)
  local start = now_s - now_s % win
  local before = 0
  if s and s.kind == 'w' and s.start == start and s.win == win then before = s.count end
  local after = before + hits
  if after < 0 then after = 0 end
  local over = after > limit
  local remaining = 0
  if not over then remaining = limit - after end
  return { kind = 'w', over = over, remaining = remaining,
           reset = (start + win - now_s) * 1000000,
           until_end = (start + win) * 1000000 - now_us,
           state = { kind = 'w', start = start, count = after, win = win } }
end

-- A sliding window (src/limiter/sliding.rs): SLOTS counters of admitted hits, c[1] for
-- sub-window `newest`, c[k] for `newest - k + 1`. Sub-window i starts at i * width
-- microseconds, width = period / SUBWINDOWS exactly: periods are whole seconds.
local function sliding(s, hits, limit, period)
  local width = period / SUBWINDOWS
  local current = floor_div(now_us, width)
  local newest, c = current, {}
  if s and s.kind == 's' and s.period == period then
    -- A clock that went back keeps counting in the newest sub-window seen.
    newest = math.max(current, s.newest)
    local by = newest - s.newest
    for k = 1, SLOTS do
      if k > by then c[k] = s.c[k - by] else c[k] = 0 end
    end
  else
    -- Fresh, another algorithm or another period before a reload: empty.
    for k = 1, SLOTS do c[k] = 0 end
  end
  local counted = 0
  for k = 1, SLOTS do counted = counted + c[k] end
  local need = math.max(hits, 1)
  return { kind = 's', newest = newest, c = c, period = period, width = width,
           limit = limit, hits = hits, counted = counted,
           passes = limit > 0 and counted + need <= limit }
end

-- Microseconds from now until the window (newest, counters c) holds no admitted hit: the
-- start of the sub-window after which its newest counted hit no longer counts.
local function sliding_empty_in(newest, c, width)
  for k = 1, SLOTS do
    if c[k] > 0 then
      return math.max(0, (newest - (k - 1) + SLOTS) * width - now_us)
    end
  end
  return 0
end

-- Microseconds from now until `need` hits fit in window step `w` (which refuses them).
local function sliding_retry(w, need)
  if w.limit == 0 then
    return w.period -- never passes: one period, as the other algorithms report
  end
  if need > w.limit then
    -- More than the window can ever admit: the best moment is when it is empty.
    return sliding_empty_in(w.newest, w.c, w.width)
  end
  local still = w.counted
  for dropped = 1, SLOTS do
    still = still - w.c[SLOTS - dropped + 1]
    if still + need <= w.limit then
      return math.max(0, (w.newest + dropped) * w.width - now_us)
    end
  end
  return w.period -- unreachable: an empty window admits what the limit allows
end

-- A sliding window's state after step `w`, the hits taken when `consumed` and the step
-- passes.
local function sliding_state(w, consumed)
  local c = w.c
  if consumed and w.passes and w.hits > 0 then
    -- A copy: the step is settled again for the request's final fate.
    c = {}
    for k = 1, SLOTS do c[k] = w.c[k] end
    c[1] = c[1] + w.hits
  end
  return { kind = 's', newest = w.newest, c = c, period = w.period, width = w.width }
end

-- A sliding window's state and report for one fate, the hits taken when `consumed` and
-- the step passes.
local function sliding_outcome(w, consumed)
  local state = sliding_state(w, consumed)
  local c, counted = state.c, w.counted
  if consumed and w.passes then counted = counted + w.hits end
  local reset, one = 0, 0
  if w.passes then
    reset = sliding_empty_in(w.newest, c, w.width)
  else
    reset = sliding_retry(w, math.max(w.hits, 1))
    -- What the over-limit cache may rely on: nothing passes before one hit can.
    if w.limit == 0 or counted + 1 > w.limit then one = sliding_retry(w, 1) end
  end
  return state, { not w.passes, math.max(0, w.limit - counted), reset, counted, one }
end

-- Whether hits n are a refund: below zero, -0 included.
local function refund(n)
  return n < 0 or 1 / n < 0
end

-- A charge (hits > 0) or refund (refund(hits)) landing on token bucket state s: the step
-- for no hits, its debt moved by the hits (at most top, at least 0), the same for both
-- fates. Over while in debt; then until one hit passes. A bucket that never refills
-- records nothing.
local function landed_bucket(s, hits, token, rate, cap, q, top)
  local st = bucket(s, 0, token, rate, cap, q, top)
  if rate <= 0 then return st end
  local before = st.debt
  local debt = before + hits * token
  if debt > top then debt = top elseif debt < 0 then debt = 0 end
  st.debt, st.passes = debt, debt <= cap
  if not st.passes and (debt ~= before or token <= cap) then
    st.retry = ceil_div(debt - cap + token, rate)
  end
  return st
end

-- A charge or refund landing on sliding window step w (for no hits): hits added to the
-- newest sub-window (at most a u32), or taken back from the newest first (never below 0).
local function landed_sliding(w, hits)
  local c = {}
  for k = 1, SLOTS do c[k] = w.c[k] end
  if hits > 0 then
    c[1] = math.min(c[1] + hits, 4294967295)
  else
    local back = -hits
    for k = 1, SLOTS do
      local taken = math.min(back, c[k])
      c[k] = c[k] - taken
      back = back - taken
    end
  end
  local counted = 0
  for k = 1, SLOTS do counted = counted + c[k] end
  local after = { newest = w.newest, c = c, period = w.period, width = w.width,
                  limit = w.limit, counted = counted }
  local over = w.limit == 0 or counted > w.limit
  local reset, one = 0, 0
  if over then
    reset = sliding_retry(after, 1)
    one = reset
  else
    reset = sliding_empty_in(w.newest, c, w.width)
  end
  return { kind = 'l', passes = not over,
           state = { kind = 's', newest = w.newest, c = c, period = w.period, width = w.width },
           report = { over, math.max(0, w.limit - counted), reset, counted, one } }
end

-- The step of an upper-case kind (a limit that charges, or a refund): hits land, but for a
-- check of nothing, which is decided as usual (a token bucket's debt up to its ceiling).
local function landed(kind, s, hits, o, a, b)
  if kind == 'T' then
    local cap, q, top = tonumber(ARGV[o + 7]), tonumber(ARGV[o + 8]), tonumber(ARGV[o + 9])
    if hits > 0 or refund(hits) then return landed_bucket(s, hits, a, b, cap, q, top) end
    return bucket(s, 0, a, b, cap, q, top)
  elseif kind == 'S' then
    if hits > 0 or refund(hits) then return landed_sliding(sliding(s, 0, a, b), hits) end
    return sliding(s, 0, a, b)
  end
  return window(s, hits, a, b) -- 'W': every hit counts anyway; a refund's are taken out
end

-- The step of the check whose fields follow ARGV[o], on bucket state s.
local function step(o, s)
  local kind, hits = ARGV[o + 1], hits_at[o] or tonumber(ARGV[o + 2])
  local a, b = tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  if kind == 't' then
    local cap = tonumber(ARGV[o + 7])
    return bucket(s, hits, a, b, cap, tonumber(ARGV[o + 8]), cap)
  elseif kind == 's' then
    return sliding(s, hits, a, b)
  elseif kind == 'w' then
    return window(s, hits, a, b)
  end
  return landed(kind, s, hits, o, a, b)
end

local function over(st)
  if st.kind == 'w' then return st.over end
  return not st.passes
end

-- State and report {over, remaining, reset_us, a, b} of a step for one fate.
local function outcome(st, consumed)
  if st.kind == 'w' then
    return st.state, { st.over, st.remaining, st.reset, st.state.count, st.until_end }
  elseif st.kind == 's' then
    return sliding_outcome(st, consumed)
  elseif st.kind == 'l' then
    return st.state, st.report -- landed: the same for both fates
  end
  local debt = st.debt
  if consumed and st.passes then debt = debt + st.take end
  local remaining = 0
  if st.rate > 0 and debt < st.cap then remaining = floor_div(st.cap - debt, st.token) end
  local reset
  if st.passes then reset = ceil_div(debt, st.rate) else reset = st.retry end
  local state = { kind = 't', d = debt, at = st.at, tok = st.token, q = st.q, rate = st.rate,
                  cap = st.cap }
  return state, { not st.passes, remaining, reset * st.q, debt, 0 }
end

-- Holds (see the header and src/store/hold.rs). Hold keys are written as the call goes,
-- not at its end as buckets are: nothing reads them back from `known`.
local HOLD_STRIDE = 5
-- Most holds (or slots) one key keeps: a reserve or a take beyond is over, so that callers
-- that never settle cannot grow a key without bound (each purge reads its expired part).
local HOLD_CAP = 100000
-- Expired holds read at once when purging: unpack's arguments stay well within Lua's stack.
local PURGE_BATCH = 1000

-- Removes the holds of hash hk and sorted set ek past their time (expiry <= now); the
-- hits they held, together, and how many they were.
local function purge(hk, ek)
  local total, count = 0, 0
  while true do
    local gone = redis.call('ZRANGEBYSCORE', ek, '-inf', now_us, 'LIMIT', 0, PURGE_BATCH)
    if #gone == 0 then return total, count end
    count = count + #gone
    local amounts = redis.call('HMGET', hk, unpack(gone))
    for k = 1, #gone do total = total + (tonumber(amounts[k]) or 0) end
    redis.call('HDEL', hk, unpack(gone))
    redis.call('ZREM', ek, unpack(gone))
  end
end

-- State s of the bucket of the check at ARGV[o] after `back` hits are given back: expired
-- holds released, landing as a refund does (never past the burst, a window never below 0).
local function released(o, s, back)
  local kind = ARGV[o + 1]
  local a, b = tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  local st
  if kind == 't' or kind == 'T' then
    local cap, q = tonumber(ARGV[o + 7]), tonumber(ARGV[o + 8])
    local top = cap
    if kind == 'T' then top = tonumber(ARGV[o + 9]) end
    st = landed_bucket(s, -back, a, b, cap, q, top)
  elseif kind == 'w' or kind == 'W' then
    st = window(s, -back, a, b)
  else
    st = landed_sliding(sliding(s, 0, a, b), -back)
  end
  local state = outcome(st, false)
  return state
end

-- Microseconds after which a release of the check at ARGV[o] can no longer matter: its
-- bucket full again from its ceiling, or its window over. Hold keys outlive their last
-- hold by that, so that a hold expiring unseen is still released if it would count.
local function release_span(o)
  local kind = ARGV[o + 1]
  local a, b = tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  if kind == 't' or kind == 'T' then
    local top = tonumber(ARGV[o + 7])
    if kind == 'T' then top = tonumber(ARGV[o + 9]) end
    return ceil_div(top, b) * tonumber(ARGV[o + 8])
  elseif kind == 'w' or kind == 'W' then
    return b * 1000000
  end
  return b
end

-- Keeps hold keys hk and ek until their latest hold expires and `span` microseconds more,
-- or deletes them when they hold nothing.
local function expire_holds(hk, ek, span)
  local last = redis.call('ZRANGE', ek, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', hk, ek)
    return
  end
  local ms = math.max(1, math.ceil((tonumber(last[2]) - now_us + span) / 1000) + 1)
  redis.call('PEXPIRE', ek, ms)
  if redis.call('EXISTS', hk) == 1 then redis.call('PEXPIRE', hk, ms) end
end

-- Whether op letter `op` is a concurrency slot's.
local function is_slot(op)
  return op == 'c' or op == 'x' or op == 'p'
end

-- A slot op's step as if the request passes: over when every slot is in use (counting
-- those this request takes before it), or, taking one, when `id` has one already. A slot
-- given back is given back at once, whatever the fate.
local function slot_step(op, pending)
  local taken = pending[op.ek] or {}
  pending[op.ek] = taken
  local live = redis.call('ZCARD', op.ek) + (taken.count or 0)
  if op.op == 'x' then
    -- One of the settles the slot waits for; the last gives it back.
    local more = tonumber(redis.call('HGET', op.hk, op.id))
    if more and more > 2 then
      redis.call('HINCRBY', op.hk, op.id, -1)
    elseif more then
      redis.call('HDEL', op.hk, op.id)
    else
      redis.call('ZREM', op.ek, op.id)
    end
    return { kind = 'c', passes = true }
  elseif op.op == 'p' then
    return { kind = 'c', passes = live < op.max }
  end
  local has = taken[op.id] or redis.call('ZSCORE', op.ek, op.id)
  if has and not taken[op.id] then
    -- A second hold of a slot's name: refused, and settled by Envoy all the same after
    -- its stream, so the slot waits for one more settle (hk counts them past the first).
    if redis.call('HEXISTS', op.hk, op.id) == 1 then
      redis.call('HINCRBY', op.hk, op.id, 1)
    else
      redis.call('HSET', op.hk, op.id, 2)
    end
  end
  local passes = not has and live < op.max and live < HOLD_CAP
  if passes then
    taken[op.id] = true
    taken.count = (taken.count or 0) + 1
  end
  return { kind = 'c', passes = passes, take = passes }
end

-- A slot check's report after the decision: over, slots left, microseconds until the
-- soonest slot expires (0 when none is in use), slots in use, 0.
local function slot_report(op, is_over)
  local live = redis.call('ZCARD', op.ek)
  local reset = 0
  local soonest = redis.call('ZRANGE', op.ek, 0, 0, 'WITHSCORES')
  if #soonest > 0 then reset = math.max(0, tonumber(soonest[2]) - now_us) end
  return { is_over, math.max(0, op.max - live), reset, live, 0 }
end

-- The hold ops of the request whose h follows ARGV[hb - 1] and whose hold keys follow
-- KEYS[kh], by check index.
local function hold_ops(hb, kh)
  local ops = {}
  for j = 1, tonumber(ARGV[hb]) do
    local p = hb + (j - 1) * HOLD_STRIDE
    ops[tonumber(ARGV[p + 1])] = {
      op = ARGV[p + 2], id = ARGV[p + 3], ttl = tonumber(ARGV[p + 4]),
      max = tonumber(ARGV[p + 5]), hk = KEYS[kh + 2 * j - 1], ek = KEYS[kh + 2 * j] }
  end
  return ops
end

-- Every bucket the call has met: its state after the latest request (false: absent), and
-- what to write at the end ({ value, ttl_ms }, or false: delete), in order of first use.
local known, writes, touched = {}, {}, {}

-- The state of bucket `key` as the request being decided finds it (nil: absent).
local function load(key)
  local s = known[key]
  if s == nil then
    s = decode(redis.call('GET', key)) or false
    known[key] = s
    touched[#touched + 1] = key
  end
  return s or nil
end

-- Records state s of bucket `key` after a request decided at now_us: what later requests
-- of the call find, and what the call writes, with a TTL until full again, until its
-- window ends, or until its sliding window holds no admitted hit (a full bucket or an
-- empty sliding window is deleted, so later requests find it absent).
local function keep(key, s)
  if s.kind == 't' then
    if s.d <= 0 or s.rate <= 0 then
      known[key], writes[key] = false, false
    else
      known[key] = s
      writes[key] = { struct.pack('<dddd', s.d, s.at, s.tok, s.q),
                      with_jitter(math.ceil(ceil_div(s.d, s.rate) * s.q / 1000)) }
    end
  elseif s.kind == 's' then
    local empty_in = sliding_empty_in(s.newest, s.c, s.width)
    if empty_in <= 0 then
      known[key], writes[key] = false, false
    else
      known[key] = s
      writes[key] = { struct.pack(SLIDING_FORMAT, s.newest, s.period, unpack(s.c)),
                      with_jitter(math.ceil(empty_in / 1000)) }
    end
  else
    known[key] = s
    writes[key] = { struct.pack('<ddd', s.start, s.count, s.win),
                    with_jitter(math.max(1, math.ceil(((s.start + s.win) * 1000000 - now_us) / 1000))) }
  end
end

-- Decides the request of n checks whose fields follow ARGV[b + 1] (its now is ARGV[b - 1])
-- and whose keys follow KEYS[kb], its hold ops `ops` by check index (see hold_ops; nil
-- without holds, which then cost nothing but a test per loop); appends its reply to `out`.
local function decide(b, kb, n, out, ops)
  local first, stored, cur, expired = {}, {}, {}, {}
  for i = 1, n do
    local op = ops and ops[i]
    -- A slot's check never reads or writes its bucket: it has no `first`.
    if not (op and is_slot(op.op)) then
      first[i] = i
      for j = 1, i - 1 do
        if first[j] and KEYS[kb + j] == KEYS[kb + i] then
          first[i] = first[j]
          break
        end
      end
      if first[i] == i then
        stored[i] = load(KEYS[kb + i])
        cur[i] = stored[i]
      end
    end
  end

  -- Holds first, whatever the request's fate: expired ones purged (a reservation's hits
  -- released to its bucket, before anything is decided on it), settled ones removed and
  -- their check's hits made what was used less what was held.
  if ops then
    for i = 1, n do
      local op = ops[i]
      if op then
        local o = b + (i - 1) * STRIDE
        -- A slot's purge gives nothing back: it has no bucket.
        local back, gone = purge(op.hk, op.ek)
        expired[i] = gone
        if back > 0 and not is_slot(op.op) then
          stored[first[i]] = released(o, stored[first[i]], back)
          cur[first[i]] = stored[first[i]]
        end
        if op.op == 's' then
          local held = tonumber(redis.call('HGET', op.hk, op.id))
          if held then
            redis.call('HDEL', op.hk, op.id)
            redis.call('ZREM', op.ek, op.id)
          end
          hits_at[o] = tonumber(ARGV[o + 2]) - (held or 0)
        end
      end
    end
  end

  -- Pass 1: as if the request passes. Verdicts count per descriptor (over when any of its
  -- checks is), as src/limiter's request_denied: a quota descriptor with two limits is over
  -- when either is, not when both are.
  local steps, capped, pending = {}, {}, {}
  local denied, quota_seen, quota_all_over = false, false, true
  local function descriptor_verdict(mode, is_over)
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
  local group_mode, group_over = nil, false
  for i = 1, n do
    local o = b + (i - 1) * STRIDE
    local st
    if not first[i] then
      st = slot_step(ops[i], pending)
    else
      st = step(o, cur[first[i]])
      local op = ops and ops[i]
      if op and op.op == 'r' and st.kind ~= 'w'
          and redis.call('ZCARD', op.ek) >= HOLD_CAP
          and redis.call('HEXISTS', op.hk, op.id) == 0 then
        st.passes = false -- beyond the cap: over, nothing taken (a window counts anyway)
        capped[i] = true
      end
      -- What later checks of the same bucket start from (a window's report waits for
      -- pass 2).
      if st.kind == 's' then
        cur[first[i]] = sliding_state(st, true)
      else
        cur[first[i]] = outcome(st, true)
      end
    end
    steps[i] = st
    if i == 1 or ARGV[o + 4] ~= ARGV[o + 4 - STRIDE] then
      if i > 1 then descriptor_verdict(group_mode, group_over) end
      group_mode, group_over = ARGV[o + 3], false
    end
    group_over = group_over or over(st)
  end
  if n > 0 then descriptor_verdict(group_mode, group_over) end
  if quota_seen and quota_all_over then denied = true end

  -- Pass 2: settle.
  local reports = {}
  if denied then
    for i = 1, n do
      if first[i] == i then cur[i] = stored[i] end
    end
    for i = 1, n do
      if first[i] then
        local st = step(b + (i - 1) * STRIDE, cur[first[i]])
        if capped[i] then st.passes = false end
        local state, report = outcome(st, false)
        cur[first[i]] = state
        report[1] = over(steps[i])
        reports[i] = report
      end
    end
  else
    for i = 1, n do
      if first[i] then
        local _, report = outcome(steps[i], true)
        reports[i] = report
      end
    end
    -- Leases: whole tokens beyond the request's own, never more than the bucket holds
    -- ('T' never leases: its field is its ceiling).
    for i = 1, n do
      local o = b + (i - 1) * STRIDE
      local want = tonumber(ARGV[o + 9])
      local s = first[i] and cur[first[i]]
      if s and want > 0 and s.kind == 't' and s.rate > 0 and ARGV[o + 1] == 't' then
        local lease = math.min(want, floor_div(s.cap - s.d, s.tok))
        if lease > 0 then
          s.d = s.d + lease * s.tok
          reports[i][5] = lease
        end
      end
    end
  end

  -- Holds kept when the request passed: a reservation's hits that were taken, a slot.
  if ops then
    for i = 1, n do
      local op = ops[i]
      if op then
        local o = b + (i - 1) * STRIDE
        if denied then -- nothing kept
        elseif op.op == 'r' then
          local hits = tonumber(ARGV[o + 2])
          if not reports[i][1] and hits > 0 and redis.call('HEXISTS', op.hk, op.id) == 0 then
            redis.call('HSET', op.hk, op.id, hits)
            redis.call('ZADD', op.ek, now_us + op.ttl, op.id)
          end
        elseif op.op == 'c' and steps[i].take then
          redis.call('ZADD', op.ek, now_us + op.ttl, op.id)
        end
      end
    end
    for i = 1, n do
      local op = ops[i]
      if op then
        if is_slot(op.op) then
          reports[i] = slot_report(op, over(steps[i]))
          expire_holds(op.hk, op.ek, 0)
        else
          expire_holds(op.hk, op.ek, release_span(b + (i - 1) * STRIDE))
        end
      end
    end
  end

  for i = 1, n do
    if first[i] == i then keep(KEYS[kb + i], cur[i]) end
  end
  out[#out + 1] = denied and 1 or 0
  for i = 1, n do
    local r = reports[i]
    out[#out + 1] = (r[1] and 1 or 0) + 2 * (expired[i] or 0)
    out[#out + 1] = r[2]
    out[#out + 1] = r[3]
    out[#out + 1] = r[4]
    out[#out + 1] = r[5]
  end
end

local out = {}
local a, kb = 1, 0
while a <= #ARGV do
  if ARGV[a] == '' then
    if not clock then
      local t = redis.call('TIME')
      clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now_us = clock
  else
    now_us = tonumber(ARGV[a])
  end
  local n = tonumber(ARGV[a + 1])
  if n < 0 then
    -- Holds follow the checks (see the header).
    n = -n
    local hb = a + 2 + n * STRIDE
    local h = tonumber(ARGV[hb])
    decide(a + 1, kb, n, out, hold_ops(hb, kb + n))
    a = hb + 1 + h * HOLD_STRIDE
    kb = kb + n + 2 * h
  else
    decide(a + 1, kb, n, out, nil)
    a = a + 2 + n * STRIDE
    kb = kb + n
  end
end

-- Keep every bucket the call met, as the last request to decide it left it.
for i = 1, #touched do
  local key = touched[i]
  local w = writes[key]
  if w then
    redis.call('SET', key, w[1], 'PX', w[2])
  else
    redis.call('DEL', key)
  end
end

return out
