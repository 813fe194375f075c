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

Usage: benches/redis_script.py [--calls 20000] [--per-call 15] [--keys 100000] [--rounds 3]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--per-call", type=int, default=15)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (1 <= args.calls <= 1_000_000 and 1 <= args.per_call <= 64
            and 1 <= args.keys <= 10_000_000 and 1 <= args.rounds <= 9):
        sys.exit("--calls 1..1000000, --per-call 1..64, --keys 1..10000000, --rounds 1..9")
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
