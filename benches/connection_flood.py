#!/usr/bin/env python3
"""Idle-connection flood against a meshlimit binary (issue 9, defect 7 figures).

Starts BINARY (optionally under `prlimit --nofile=L:L`), opens N idle TCP connections
to each of its gRPC and HTTP ports (they never send a byte), then at each checkpoint
counts how many the server still holds open and how many fresh calls succeed
(10 gRPC ShouldRateLimit calls with curl over h2c, 10 GET /healthcheck).

Usage: benches/connection_flood.py BINARY [--per-port 2000] [--nofile 256]
         [--checkpoints 5,15,30,45] [-- extra serve flags]
Needs python3 (standard library), curl, prlimit (util-linux). Loopback only; the flood is
bounded by --per-port and every wait by a timeout.
"""
import argparse, os, re, socket, subprocess, sys, tempfile, time

# RateLimitRequest{domain: "d", descriptors: [{entries: [{key: "k", value: "v"}]}]}
REQUEST = bytes([0x0a, 1, ord("d"), 0x12, 8, 0x0a, 6, 0x0a, 1, ord("k"), 0x12, 1, ord("v")])
FRAME = bytes([0, 0, 0, 0, len(REQUEST)]) + REQUEST
LIMITS = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"


def start(binary, nofile, extra, workdir):
    config = os.path.join(workdir, "d.yaml")
    open(config, "w").write(LIMITS)
    log = open(os.path.join(workdir, "server.log"), "w")
    argv = [binary, "serve", "--config", config, "--grpc-addr", "127.0.0.1:0",
            "--http-addr", "127.0.0.1:0", "--log", "info", *extra]
    if nofile:
        argv = ["prlimit", f"--nofile={nofile}:{nofile}", "--", *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHLIMIT_")}
    env["NO_COLOR"] = "1"
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 20
    while time.time() < deadline:
        text = open(log.name).read()
        m = re.search(r"meshlimit serving grpc=(\S+) http=(\S+)", text)
        if m:
            return proc, log.name, m.group(1), m.group(2)
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not start:\n" + open(log.name).read())


def addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def flood(target, n):
    socks, failures = [], 0
    for _ in range(n):
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect(target)
            s.setblocking(False)  # so that held() can peek without waiting
            socks.append(s)
            failures = 0
        except OSError:
            s.close()
            failures += 1
            if failures >= 20:
                break
    return socks


def held(socks):
    """Connections the server still holds: reads what it sent (an HTTP/2 server's
    SETTINGS) until there is nothing more to read (open) or the end (closed)."""
    count = 0
    for s in socks:
        try:
            while True:
                if not s.recv(65536):
                    break  # closed by the server
        except BlockingIOError:
            count += 1
        except OSError:
            pass  # reset by the server
    return count


def grpc_call(grpc):
    out = subprocess.run(
        ["curl", "-s", "-m", "3", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_code}",
         "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", "@-",
         f"http://{grpc}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"],
        input=FRAME, capture_output=True)
    body, _, code = out.stdout.rpartition(b"\n")
    return code == b"200" and len(body) > 5 and body[0] == 0


def health_call(http):
    out = subprocess.run(["curl", "-s", "-m", "3", f"http://{http}/healthcheck"], capture_output=True)
    return out.returncode == 0 and out.stdout.strip() == b"OK"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--per-port", type=int, default=2000)
    parser.add_argument("--nofile", type=int, default=0)
    parser.add_argument("--checkpoints", default="5,15,30,45")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        proc, log, grpc, http = start(args.binary, args.nofile, args.extra, workdir)
        try:
            t0 = time.time()
            socks = {"grpc": flood(addr(grpc), args.per_port), "http": flood(addr(http), args.per_port)}
            print(f"{args.binary} nofile={args.nofile or 'default'} extra={args.extra}")
            print(f"connected: grpc {len(socks['grpc'])}, http {len(socks['http'])} "
                  f"of {args.per_port} each, in {time.time() - t0:.1f} s")
            for checkpoint in [float(c) for c in args.checkpoints.split(",")]:
                time.sleep(max(0.0, t0 + checkpoint - time.time()))
                g = sum(grpc_call(grpc) for _ in range(10))
                h = sum(health_call(http) for _ in range(10))
                print(f"t={checkpoint:4.0f} s  held: grpc {held(socks['grpc'])}, http {held(socks['http'])}"
                      f"  calls ok: gRPC {g}/10, /healthcheck {h}/10")
            for s in socks["grpc"] + socks["http"]:
                s.close()
            time.sleep(2)
            g = sum(grpc_call(grpc) for _ in range(10))
            h = sum(health_call(http) for _ in range(10))
            print(f"flood closed, +2 s: calls ok: gRPC {g}/10, /healthcheck {h}/10")
            text = open(log).read()
            print(f"log lines: {len(text.splitlines())}, 'Too many open files': "
                  f"{text.count('Too many open files')}, 'out of file descriptors': "
                  f"{text.count('out of file descriptors')}")
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
