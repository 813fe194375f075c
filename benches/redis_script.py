#!/usr/bin/env python3
"""Redis' time per decision in the token-bucket script, with Redis alone (issue 14, part 3).

benches/redis_cpu.sh measures the script as meshlimit drives it, with meshlimit and the
load generator sharing the machine's cores. This measures the script without them: a
client pipelines EVALSHA calls straight to a redis-server of its own, so the figure is the
script's own cost, and what part of it is the bucket's read and write.

Per round, for each script: FLUSHALL, CONFIG RESETSTAT, --calls calls of --per-call
one-descriptor requests (the `strict` scenario's limit: 1,000,000 a second, burst
1,000,000), each on its own key, round-robin over --keys keys; then `INFO commandstats`,
divided by the decisions. The scripts:
  script  src/store/redis/exact.lua + decide_buckets.lua, as src/store/redis/script.rs
          joins them: what meshlimit runs
  charge  the same script, the same requests, the limit charging (`charge: always`, issue
          39: its debt ceiling sent, each request as -1 check, decided by `careful`):
          each hit a charge, which must cost no more than the normal decision
  floor   one MGET of the call's keys, then each key's SET ... PX with a constant 32-byte
          value, and nothing else: the buckets' reads and writes alone
With the default --keys, a key comes back after its bucket is full again (its TTL is 1 ms),
so nearly every decision is on a key Redis does not hold, as in redis_cpu.sh's runs;
--keys 15 makes every bucket hot.

--holds runs two other rows instead (the issue's "a reserve or a settle costs no more than a
charge of the same shape plus the hold's own bookkeeping"), both on the GENERAL script,
src/store/redis/exact.lua + decide.lua as script.rs joins them (holds go to no other), the
arguments laid out as script_args.rs' general_args and part.rs write them. --calls pairs of
calls; each call of --per-call one-descriptor requests of 100 hits on the same limit, the
second call of a pair on the first call's keys, 50 µs of script time later:
  take_charge  a call deciding the 100 hits (kind 't', no lease), then a call charging
               them (kind 'T', its debt ceiling in the lease's field): today's
               check-then-charge
  hold_settle  a call reserving them (kind 't' with hold op 'r', a unique id per
               request, TTL 300 s, the request's hold keys '<key>:h' and '<key>:e' after
               its check key), then a call settling each reservation with the 100 hits it
               used (kind 'T', its ceiling, op 's')
Every reply must be the script's list of integers, every request allowed, a charge's debt
landed and a settle's not (its hold found); anything else stops the bench. An INFO
commandstats after each call splits the pair's time into its two calls. Rows: µs a pair
of calls, a call, the first and the second call, and a request's pair (a pair / --per-call);
then the medians and hold_settle / take_charge.

Usage: benches/redis_script.py [--calls 20000] [--per-call 15] [--keys 100000] [--rounds 3]
                               [--holds]
Needs python3 (standard library) and redis-server (or REDIS_SERVER). Loopback only; the
calls are bounded by --calls and every wait by a timeout.
"""
import argparse, os, shutil, socket, struct, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT_DIR = os.path.join(ROOT, "src", "store", "redis")
FLOOR = """
redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], '0123456789abcdef0123456789abcdef', 'PX', '1')
end
return ''
"""
# The strict scenario's limit as script_args.rs' Scale writes it for 1,000,000 a second,
# burst 1,000,000: a token worth 1, 1 a microsecond, capacity 1,000,000, 1 µs quanta; its
# ceiling the capacity, or for a limit that charges ten seconds' refill more.
TOKEN, RATE, CAP, QUANTUM = 1, 1, 1_000_000, 1
CEILING = {False: CAP, True: CAP + 10 * 1_000_000 * TOKEN}
# --holds: each request's hits, and a reservation's TTL in µs (script_args.rs sends the
# rule's TTL, in whole microseconds, with the reserve and with the settle).
HOLD_HITS, HOLD_TTL_US = 100, 300_000_000
PAIRS = ("take_charge", "hold_settle")


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class Connection:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            sys.exit("redis-server closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            sys.exit(f"redis error: {rest.decode()}")
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        sys.exit(f"unexpected reply {line!r}")

    def call(self, *args):
        self.sock.sendall(command(*args))
        return self.reply()


def start_redis(workdir):
    server = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not server:
        sys.exit("redis-server not found (Debian: apt-get install redis-server)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            conn = Connection(port)
            if conn.call("PING") == b"PONG":
                return proc, conn
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not answer within 10 s")


def calls(sha, args, first_key, charge):
    """Pipelined EVALSHA calls of args.per_call requests each, from key first_key on; each
    hit a charge when `charge`."""
    now, key = 1_000_000_000_000, first_key
    for _ in range(args.calls):
        now += 50
        numbers = [now, 1, TOKEN, RATE, CAP, QUANTUM, CEILING[charge]]
        keys, number = [], {}
        for _ in range(args.per_call):
            name = b"ml1:{5:bench}7:user_id%d" % (key % args.keys)
            if name not in number:
                keys.append(name)
                number[name] = len(keys)
            # One check (-1: decided with a charge's care): 1 hit, limit 1, enforced, on
            # its bucket (each named once a call).
            numbers += [-1 if charge else 1, 1, 1, number[name]]
            key += 1
        yield command(b"EVALSHA", sha, len(keys), *keys,
                      struct.pack("<%dd" % len(numbers), *numbers))


def script_usec(conn):
    info = conn.call("INFO", "commandstats").decode()
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(f.split("=") for f in line.split(":", 1)[1].split(","))
            return float(fields["usec"]), int(fields["calls"])
    sys.exit("no EVALSHA in INFO commandstats")


def run(conn, sha, args, check, charge):
    conn.call("FLUSHALL")
    conn.call("CONFIG", "RESETSTAT")
    batch = 200
    pending = calls(sha, args, 0, charge)
    sent = 0
    while sent < args.calls:
        chunk = [c for _, c in zip(range(batch), pending)]
        conn.sock.sendall(b"".join(chunk))
        for reply in (conn.reply() for _ in chunk):
            if check:
                check(reply)
        sent += len(chunk)
    usec, n = script_usec(conn)
    return usec / n, usec / (n * args.per_call)


def evalsha_usec(info):
    """EVALSHA's total µs in an INFO commandstats text: 0 before its first call."""
    for line in info.decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(f.split("=") for f in line.split(":", 1)[1].split(","))
            return int(fields["usec"])
    return 0


def pair_calls(sha, args, scenario):
    """--calls pairs of EVALSHA calls of decide.lua for `scenario` (see the docstring), each
    with --per-call requests, in decide.lua's layout as general_args writes it (the time as
    the caller's, in µs). Yields (first call, second call)."""
    now, key, hold = 1_000_000_000_000, 0, 0
    limit = [TOKEN, RATE, CAP, QUANTUM]
    for _ in range(args.calls):
        names = []
        for _ in range(args.per_call):
            names.append(b"ml1:{5:bench}7:user_id%d" % (key % args.keys))
            key += 1
        ids = []
        for _ in names:
            ids.append(b"hold%d" % hold)
            hold += 1
        pair = []
        for second in (False, True):
            now += 50
            keys, argv = [], []
            for name, id_ in zip(names, ids):
                # kind, hits, mode (enforce), descriptor (the first, 0), the Scale, then the
                # lease (none) or, for 'T', the debt ceiling.
                check = (["T", HOLD_HITS, "e", 0] + limit + [CEILING[True]] if second
                         else ["t", HOLD_HITS, "e", 0] + limit + [0])
                if scenario == "take_charge":
                    keys.append(name)
                    argv += [now, 1] + check
                else:
                    # -1 checks: hold ops follow; one op, on check 1: op, id, TTL, slots (0:
                    # a reservation). Its KEYS: the check's, then its hold keys.
                    keys += [name, name + b":h", name + b":e"]
                    argv += [now, -1] + check + [1, 1, "s" if second else "r", id_,
                                                 HOLD_TTL_US, 0]
            pair.append(command(b"EVALSHA", sha, len(keys), *keys, *argv))
        yield pair[0], pair[1]


def decisions(reply, args, what):
    """decide.lua's reply for a call: per request, (denied, over, debt after); stops the
    bench on anything but the script's list of integers, one denied flag and five numbers a
    request (a Redis error has stopped it already, in Connection.reply)."""
    if not isinstance(reply, list) or len(reply) != 6 * args.per_call:
        sys.exit(f"{what}: not decide.lua's reply for {args.per_call} requests: "
                 f"{reply!r:.200}")
    try:
        numbers = [int(n) for n in reply]
    except (TypeError, ValueError):
        sys.exit(f"{what}: not a list of integers: {reply!r:.200}")
    return [(numbers[6 * r], numbers[6 * r + 1], numbers[6 * r + 4])
            for r in range(args.per_call)]


def check_pair(first, second, args, scenario):
    """Every request allowed and not over; the take or reserve took its hits; the charge
    landed its hits, the settle none (its hold found: used as much as it held)."""
    firsts = decisions(first, args, f"{scenario}, first call")
    seconds = decisions(second, args, f"{scenario}, second call")
    for (d1, o1, debt1), (d2, o2, debt2) in zip(firsts, seconds):
        if d1 or o1 or d2 or o2 or debt1 < HOLD_HITS * TOKEN:
            sys.exit(f"{scenario}: a request denied or over, or its hits not taken: "
                     f"{first!r:.120} / {second!r:.120}")
        # 50 µs of refill between the calls (50 units, under the 100 the hits take): a
        # charge leaves at least its hits owed, a settle of a hold it found less.
        landed = debt2 >= HOLD_HITS * TOKEN
        if landed != (scenario == "take_charge"):
            sys.exit(f"{scenario}: the second call's debt {debt2} after {debt1}: "
                     + ("the charge did not land" if scenario == "take_charge"
                        else "the settle charged (its hold not found)"))


def run_pairs(conn, sha, args, scenario):
    """One round of `scenario`: µs of Redis a pair of calls, its first call and its
    second, from an INFO commandstats after each call."""
    conn.call("FLUSHALL")
    conn.call("CONFIG", "RESETSTAT")
    info = command("INFO", "commandstats")
    batch = 100
    pending = pair_calls(sha, args, scenario)
    sent, before, spent = 0, 0, [0, 0]
    while sent < args.calls:
        chunk = [p for _, p in zip(range(batch), pending)]
        conn.sock.sendall(b"".join(first + info + second + info for first, second in chunk))
        for _ in chunk:
            first, after_first = conn.reply(), conn.reply()
            second, after_second = conn.reply(), conn.reply()
            check_pair(first, second, args, scenario)
            mid, end = evalsha_usec(after_first), evalsha_usec(after_second)
            spent[0] += mid - before
            spent[1] += end - mid
            before = end
        sent += len(chunk)
    usec, n = script_usec(conn)
    if n != 2 * args.calls or usec != sum(spent):
        sys.exit(f"{scenario}: {n} EVALSHA calls for {usec} µs, not {2 * args.calls} "
                 f"for {sum(spent)}")
    return usec / args.calls, spent[0] / args.calls, spent[1] / args.calls


def main_holds(args, conn):
    """--holds: take_charge and hold_settle in turns, --rounds times."""
    text = "local EXPIRY_JITTER_MS = 0\n" + "".join(
        open(os.path.join(SCRIPT_DIR, name)).read() for name in ("exact.lua", "decide.lua"))
    sha = conn.call("SCRIPT", "LOAD", text).decode()
    print(f"{args.calls} pairs of calls of {args.per_call} one-descriptor requests of "
          f"{HOLD_HITS} hits, decide.lua, {args.keys} keys round-robin, "
          f"{args.rounds} round(s)")
    print(f"{'scenario':12} {'round':>5} {'µs/pair':>9} {'µs/call':>9} {'1st µs':>9} "
          f"{'2nd µs':>9} {'µs/request pair':>16}")
    results = {name: [] for name in PAIRS}
    for round_ in range(1, args.rounds + 1):
        # Swapped every other round, as the other rows are.
        order = PAIRS if round_ % 2 else PAIRS[::-1]
        for name in order:
            pair, first, second = run_pairs(conn, sha, args, name)
            results[name].append(pair)
            print(f"{name:12} {round_:>5} {pair:>9.2f} {pair / 2:>9.2f} {first:>9.2f} "
                  f"{second:>9.2f} {pair / args.per_call:>16.3f}")
    median = {name: sorted(v)[len(v) // 2] for name, v in results.items()}
    ratio = median["hold_settle"] / median["take_charge"]
    print("medians (µs a pair of calls): " + ", ".join(
        f"{name} {median[name]:.2f} ({median[name] / args.per_call:.3f} a request's pair)"
        for name in PAIRS) + f"; hold_settle / take_charge {ratio:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--per-call", type=int, default=15)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--holds", action="store_true",
                        help="the take_charge and hold_settle rows instead (the docstring)")
    args = parser.parse_args()
    if not (1 <= args.calls <= 1_000_000 and 1 <= args.per_call <= 64
            and 1 <= args.keys <= 10_000_000 and 1 <= args.rounds <= 9):
        sys.exit("--calls 1..1000000, --per-call 1..64, --keys 1..10000000, --rounds 1..9")
    if args.holds and args.keys < args.per_call:
        sys.exit("--holds: --keys at least --per-call (a call's keys distinct)")
    if args.holds:
        with tempfile.TemporaryDirectory(prefix="redis_script.") as workdir:
            proc, conn = start_redis(workdir)
            try:
                main_holds(args, conn)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        return
    # As script.rs runs it: after the line setting the expiry jitter (none here).
    text = "local EXPIRY_JITTER_MS = 0\n" + "".join(
        open(os.path.join(SCRIPT_DIR, name)).read()
        for name in ("exact.lua", "decide_buckets.lua"))

    def passes(reply):
        # decide_buckets.lua's reply: per request, denied then the debt found. Every
        # request here passes; a different reply means the script's format changed.
        values = struct.unpack("<%dd" % (len(reply) // 8), reply)
        if len(values) != 2 * args.per_call or any(values[0::2]):
            sys.exit(f"unexpected reply from the script: {values[:6]}...")

    with tempfile.TemporaryDirectory(prefix="redis_script.") as workdir:
        proc, conn = start_redis(workdir)
        try:
            shas = {name: conn.call("SCRIPT", "LOAD", body).decode()
                    for name, body in (("script", text), ("charge", text), ("floor", FLOOR))}
            print(f"{args.calls} calls of {args.per_call} one-descriptor requests, "
                  f"{args.keys} keys round-robin, {args.rounds} round(s)")
            print(f"{'script':8} {'round':>5} {'µs/call':>9} {'µs/decision':>12}")
            results = {name: [] for name in shas}
            for round_ in range(1, args.rounds + 1):
                # The rows in turns, the first two swapped every other round: whichever
                # runs first after another row finds the keys as that row left them.
                order = list(shas.items())
                if round_ % 2 == 0:
                    order[0], order[1] = order[1], order[0]
                for name, sha in order:
                    per_call, per_decision = run(
                        conn, sha, args, passes if name != "floor" else None,
                        name == "charge")
                    results[name].append(per_decision)
                    print(f"{name:8} {round_:>5} {per_call:>9.2f} {per_decision:>12.3f}")
            print("medians (µs a decision): " + ", ".join(
                f"{name} {sorted(v)[len(v) // 2]:.3f}" for name, v in results.items()))
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
