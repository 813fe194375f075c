-- meshlimit: decide requests whose checks are all token buckets, many requests per call.
--
-- The specialised twin of decide.lua for the shape most requests have: every check a token
-- bucket in enforce or shadow mode, no lease, no bucket twice in one request (Shape in
-- src/store/redis/part.rs). It makes the same decisions and stores the same states as
-- decide.lua; its reply is shorter, and part.rs (BucketCheck::reply) derives decide.lua's
-- reply from it. tests/redis_batches.rs runs both on the same sequences.
--
-- Requests are decided one after the other, in order, each all-or-nothing on its own: a
-- later request sees what the earlier ones consumed, and one request's denial never undoes
-- another's consumption. Every bucket of the call is read at the start, all in one MGET,
-- and written once at the end (SET with a TTL; the full ones in one DEL), however many
-- requests of the call name it; the states in between live in `known`, exactly as the
-- requests one call each would have read them back (a bucket that would have been deleted
-- reads as absent). The caller names each bucket once in KEYS and each check points at
-- its bucket by number, so the script neither hashes a key nor passes over the keys to
-- find the distinct ones (which, done here, had made an MGET slower than a GET per bucket
-- on hot buckets).
--
-- KEYS      every bucket of the call, each once (part.rs, evalsha)
-- ARGV[1]   little-endian doubles (struct '<d', read in one go): now in microseconds (-1:
--           Redis' clock, TIME); the number of limits L, then each limit's token, rate,
--           cap, q and debt ceiling (a Scale's exact integers, see script_args.rs; the
--           ceiling passes cap only for a limit that charges); then per request the number
--           of checks n, then per check three: hits, its limit's number (1..L), negative
--           when the check being over does not deny the request (shadow mode), and its
--           bucket's number in KEYS (1..#KEYS).
--           A request with a check of a limit that charges, or a refund, sends -n instead:
--           its checks are decided by `careful`, where hits below zero (-0 included) are a
--           refund, and a charge (hits on a limit that charges) or a refund lands whatever
--           the request's fate (a bucket may owe up to its ceiling). Other requests never
--           meet that code, nor pay for it.
-- Numbers stay below 2^53, where Lua's doubles are exact integers.
--
-- Returns one string of little-endian doubles, request after request: denied (0 or 1), then
-- per check the bucket's debt before the request's hits (refilled to now, scaled; above
-- the capacity when the bucket is in debt). Whether
-- each check passes, what it reports and what it left follow from that, the check's
-- numbers and the request's fate. One string rather than an array of integers: a client
-- reads it in one go instead of parsing a RESP integer per number.
--
-- Stored state: decide.lua's token bucket, 32 bytes '<dddd' debt, at (quanta), token, q;
-- a key holding any other string (another algorithm before a reload) starts a fresh
-- bucket. (A key of another type, which meshlimit never writes under its prefix, reads as
-- absent in an MGET and is replaced; decide.lua's GET fails the call on it instead.)
--
-- Runs after exact.lua (floor, ceil, floor_div, ceil_div, refilled), which script.rs puts
-- before it.

local packed = ARGV[1]
-- Unpacked in one call: per call, not per number, is what struct.unpack costs most.
local v = { struct.unpack('<' .. string.rep('d', #packed / 8), packed) }
local now = v[1]
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The call's limits: token, rate, cap, q and ceiling of limit l at v[3 + 5 * (l - 1)] on.
local limits = v[2]
-- Every bucket of the call by its number in KEYS: { debt, at, token, q, rate } as the
-- latest request left it, or false (absent).
local known = #KEYS > 0 and redis.call('MGET', unpack(KEYS)) or {}
for b = 1, #KEYS do
  local raw = known[b]
  if raw and #raw == 32 then
    known[b] = { struct.unpack('<dddd', raw) }
  else
    known[b] = false
  end
end
local out, o = {}, 0

-- Decides the requests from v[a] on that sent their count of checks as -n, one after the
-- other until one did not (or the call's end), with the care of charges and refunds,
-- appending their replies to `out`; returns where the next request starts and the
-- reply's new length. One Lua call for a run of such requests, not one each: a gateway's
-- charges and checks of a charging limit come in runs, and a call costs about what a
-- check does. The same steps as the loop below, but for: a charge (hits on a limit that
-- charges) or a refund (hits below zero, -0 included) lands, at most the ceiling and at
-- least 0, and stays when the request is denied; a bucket in debt passes nothing; a
-- stored debt is refilled up to the limit's ceiling, not its capacity.
local function careful(a, last)
  -- The call's tables, clock and reply position as locals: an upvalue costs an
  -- instruction more at every use, and this loop uses them for every check as the main
  -- chunk's loop does its locals.
  local v, known, out, now, floor, o = v, known, out, now, floor, o
  while a <= last and v[a] < 0 do
    local n = -v[a]
    local denied = false
    local at_denied = o + 1
    o = at_denied
    local c = a + 1
    for i = 1, n do
      local hits, l, b = v[c], v[c + 1], v[c + 2]
      local enforce = l > 0
      if not enforce then l = -l end
      l = 5 * l - 2
      local token, rate, cap, q, top = v[l], v[l + 1], v[l + 2], v[l + 3], v[l + 4]
      local s = known[b]
      local now_q = now
      if q ~= 1 then now_q = floor(now / q) end
      local debt, at = 0, now_q
      if s then
        local d, sat = s[1], s[2]
        if s[3] == token and s[4] == q and now_q >= sat then
          -- Inline, as the loop below: a Lua call per bucket costs a tenth of a decision.
          d = d - (now_q - sat) * rate
          if d < 0 then d = 0 elseif d > top then d = top end
          debt = d
        else
          debt, at = refilled(d, sat, s[3], s[4], now_q, token, rate, top, q)
        end
      end
      o = o + 1
      out[o] = debt
      -- A charge first, the commonest here: it lands, up to the ceiling (above the
      -- capacity only for a limit that charges and refills).
      if hits > 0 and top > cap then
        debt = debt + hits * token
        if debt > top then debt = top end
        if enforce and debt > cap then denied = true end
      elseif rate > 0 and (hits < 0 or 1 / hits < 0) then
        -- A refund: lands, down to full.
        debt = debt + hits * token
        if debt < 0 then debt = 0 end
        if enforce and debt > cap then denied = true end
      elseif rate > 0 and (hits > 1 and hits or 1) * token <= cap - debt then
        debt = debt + hits * token
      elseif enforce then
        denied = true
      end
      if debt <= 0 or rate <= 0 then
        known[b] = false
      elseif s then
        s[1], s[2], s[3], s[4], s[5] = debt, at, token, q, rate
      else
        known[b] = { debt, at, token, q, rate }
      end
      c = c + 3
    end
    if denied then
      out[at_denied] = 1
      -- What did not land takes nothing: its bucket keeps its refilled debt.
      for i = 1, n do
        local hits, l, b = v[a + 3 * i - 2], v[a + 3 * i - 1], v[a + 3 * i]
        if l < 0 then l = -l end
        l = 5 * l - 2
        local lands = v[l + 1] > 0 and (hits < 0 or 1 / hits < 0 or (hits > 0 and v[l + 4] > v[l + 2]))
        local s = known[b]
        if s and not lands then
          local debt = out[at_denied + i]
          if debt <= 0 then known[b] = false else s[1] = debt end
        end
      end
    else
      out[at_denied] = 0
    end
    a = c
  end
  return a, o
end

local a = 3 + 5 * limits
local last = #v - 1 -- struct.unpack adds the next position
while a <= last do
  local n = v[a]
  if n < 0 then
    a, o = careful(a, last)
  else
    -- Each check as if the request passes: it takes its hits when it can (the reply keeps
    -- the debt before), and a check over its limit in enforce mode denies the request.
    local denied = false
    local at_denied = o + 1
    o = at_denied
    local c = a + 1
    for i = 1, n do
      local hits, l, b = v[c], v[c + 1], v[c + 2]
      local enforce = l > 0
      if not enforce then l = -l end
      l = 5 * l - 2
      local token, rate, cap, q = v[l], v[l + 1], v[l + 2], v[l + 3]
      local s = known[b]
      local now_q = now
      if q ~= 1 then now_q = floor(now / q) end
      local debt, at = 0, now_q
      if s then
        local d, sat = s[1], s[2]
        if s[3] == token and s[4] == q and now_q >= sat then
          -- Most buckets: stored in this scale, the clock not gone back. Inline, as
          -- refilled (exact.lua) computes it: a Lua call per bucket cost a tenth of a hot
          -- decision.
          d = d - (now_q - sat) * rate
          if d < 0 then d = 0 elseif d > cap then d = cap end
          debt = d
        else
          debt, at = refilled(d, sat, s[3], s[4], now_q, token, rate, cap, q)
        end
      end
      o = o + 1
      out[o] = debt
      local take = hits * token
      local need = take
      if need < token then need = token end
      if rate > 0 and need <= cap - debt then
        debt = debt + take
      elseif enforce then
        denied = true
      end
      if debt <= 0 or rate <= 0 then
        known[b] = false
      elseif s then
        s[1], s[2], s[3], s[4], s[5] = debt, at, token, q, rate
      else
        known[b] = { debt, at, token, q, rate }
      end
      c = c + 3
    end
    -- A denied request takes nothing: its buckets keep their refilled debt.
    if denied then
      out[at_denied] = 1
      for i = 1, n do
        local debt, b = out[at_denied + i], v[a + 3 * i]
        local s = known[b]
        if s then
          if debt <= 0 then known[b] = false else s[1] = debt end
        end
      end
    else
      out[at_denied] = 0
    end
    a = c
  end
end

-- Keep every bucket, with a TTL until it is full again; the full ones are deleted, in one
-- DEL. Each TTL is passed as text made once per call: Redis turns a number argument into
-- text with snprintf, which costs as much as a quarter of the SET.
local ttls, full = {}, {}
for b = 1, #KEYS do
  local s = known[b]
  if s then
    local d, rate, q = s[1], s[5], s[4]
    local ms = with_jitter(ceil(ceil_div(d, rate) * q / 1000))
    local ttl = ttls[ms]
    if not ttl then
      ttl = string.format('%d', ms)
      ttls[ms] = ttl
    end
    redis.call('SET', KEYS[b], struct.pack('<dddd', d, s[2], s[3], q), 'PX', ttl)
  else
    full[#full + 1] = KEYS[b]
  end
end
if #full > 0 then redis.call('DEL', unpack(full)) end

return struct.pack('<' .. string.rep('d', o), unpack(out, 1, o))
