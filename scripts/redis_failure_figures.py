#!/usr/bin/env python3
"""Before/after figures for the Redis store's failure handling (issue 9, defects 3 and 9).

    python3 scripts/redis_failure_figures.py BINARY oom
    python3 scripts/redis_failure_figures.py BINARY cluster

`oom`: one redis-server at `maxmemory 1mb`, `noeviction`, filled until it refuses writes;
`BINARY serve --store redis --redis-failure error` (default 100 ms timeout) gets 2000
`/json` calls; prints how many
failed, what /healthcheck says, and the log lines that name the refusal.

`cluster`: 3 masters with a replica each (`cluster-node-timeout 1000`,
`cluster-require-full-coverage no`), twelve domains, four per master; one master is
killed (SIGKILL) and calls alternate between its domains and the live masters' domains;
prints how many live-domain calls failed, and when the dead master's domains decided
again compared with the cluster's promotion of its replica.

Everything runs on 127.0.0.1, on free ports, and is bounded in count and time. Needs
redis-server and redis-cli.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def free_port():
    """A free loopback port whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def cli(port, *args):
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=20
    )
    return out.stdout.strip()


def wait(what, probe, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.05)
    sys.exit(f"timed out waiting for {what}")


class Redis:
    def __init__(self, workdir, *extra):
        self.port = free_port()
        self.dir = os.path.join(workdir, f"redis-{self.port}")
        os.makedirs(self.dir)
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", *extra]
        self.proc = subprocess.Popen(args, cwd=self.dir, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait(f"redis on {self.port}", lambda: cli(self.port, "PING") == "PONG")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


class Meshlimit:
    def __init__(self, binary, workdir, config, url, policy="error", timeout_ms=100):
        self.log_path = os.path.join(workdir, "meshlimit.log")
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", config, "--grpc-addr", "127.0.0.1:0",
             "--http-addr", "127.0.0.1:0", "--log", "info", "--store", "redis",
             "--redis-url", url, "--redis-failure", policy,
             "--redis-timeout-ms", str(timeout_ms)],
            stdout=log, stderr=log, env={"NO_COLOR": "1", "PATH": os.environ["PATH"]})
        self.http = None

        def serving():
            m = re.search(r"http[=:\"\s]+\"?(127\.0\.0\.1:\d+)", self.log())
            if m and "meshlimit serving" in self.log():
                self.http = m.group(1)
                return True
            return False
        wait("meshlimit to serve", serving)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def ask(self, domain):
        """One /json call for `domain` (k=v): 'ok', 'over' or 'error: <body>'."""
        body = json.dumps({"domain": domain,
                           "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]})
        req = urllib.request.Request(f"http://{self.http}/json", data=body.encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return "ok"
        except urllib.error.HTTPError as e:
            return "over" if e.code == 429 else "error: " + e.read().decode().strip()

    def healthcheck(self):
        try:
            with urllib.request.urlopen(f"http://{self.http}/healthcheck", timeout=10) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode().strip()

    def stop(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def config_dir(workdir, domains):
    path = os.path.join(workdir, "config")
    os.makedirs(path)
    for d in domains:
        with open(os.path.join(path, f"{d}.yaml"), "w") as f:
            f.write(f"domain: {d}\ndescriptors:\n  - key: k\n"
                    "    rate_limit: {unit: day, requests_per_unit: 1000000}\n")
    return path


def fill(port):
    """Writes 1 KiB keys over one connection until OOM; returns the open connection."""
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    value = "x" * 1024
    for n in range(100000):
        key = f"fill:{n}"
        s.sendall(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n$1024\r\n{value}\r\n".encode())
        line = f.readline().decode()
        if line.startswith("-"):
            assert "OOM" in line, line
            return s
    sys.exit("no OOM after 100,000 keys")


def oom(binary, workdir):
    redis = Redis(workdir, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    ml = Meshlimit(binary, workdir, config_dir(workdir, ["bin"]), f"redis://127.0.0.1:{redis.port}")
    try:
        full = fill(redis.port)

        def script_calls():
            stats = cli(redis.port, "INFO", "commandstats")
            return sum(int(m) for m in re.findall(r"cmdstat_eval(?:sha)?:calls=(\d+)", stats))
        before = script_calls()
        answers = [ml.ask("bin") for _ in range(2000)]
        print(f"  script calls Redis received meanwhile: {script_calls() - before}")
        failed = [a for a in answers if a.startswith("error")]
        print(f"defect 3 ({binary}): {len(failed)} of {len(answers)} calls failed")
        if failed:
            print(f"  first failure: {failed[0]}")
        status, body = ml.healthcheck()
        print(f"  /healthcheck: {status} {body!r}")
        lines = [l for l in ml.log().splitlines() if "OOM" in l]
        print(f"  log lines naming OOM: {len(lines)}")
        for l in lines[:2]:
            print(f"    {l}")
        full.close()
    finally:
        ml.stop()
        redis.kill()


def cluster(binary, workdir):
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
            "--repl-diskless-sync-delay", "0"]
    nodes = [Redis(workdir, *args) for _ in range(6)]
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1",
                    "--cluster-yes"], capture_output=True, timeout=30, check=True)
    wait("cluster ok", lambda: all(
        "cluster_state:ok" in cli(n.port, "CLUSTER", "INFO") for n in nodes))
    wait("replicas synced", lambda: sum(
        "master_link_status:up" in cli(n.port, "INFO", "replication") for n in nodes) == 3)

    def master_of(key, ask):
        slot = int(cli(ask, "CLUSTER", "KEYSLOT", key))
        for line in cli(ask, "CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" not in f[2].split(",") or "fail" in f[2]:
                continue
            for r in f[8:]:
                a, _, b = r.partition("-")
                if a.isdigit() and int(a) <= slot <= int(b or a):
                    return int(f[1].split("@")[0].rsplit(":", 1)[1])
        return None

    def key(domain):
        return f"ml1:{{{len(domain)}:{domain}}}1:k1:v"

    groups = {}
    for n in range(10000):
        d = f"d{n}"
        groups.setdefault(master_of(key(d), nodes[0].port), [])
        if len(groups[master_of(key(d), nodes[0].port)]) < 4:
            groups[master_of(key(d), nodes[0].port)].append(d)
        if len(groups) == 3 and all(len(g) == 4 for g in groups.values()):
            break
    ports = sorted(groups)
    dead_port, dead_domains = ports[0], groups[ports[0]]
    live_domains = groups[ports[1]] + groups[ports[2]]
    url = "redis+cluster://" + ",".join(addrs)
    ml = Meshlimit(binary, workdir, config_dir(workdir, [d for g in groups.values() for d in g]),
                   url)
    try:
        for d in dead_domains + live_domains:
            assert ml.ask(d) == "ok", d
        victim = next(n for n in nodes if n.port == dead_port)
        if os.environ.get("FIGURES_FREEZE"):
            # A host that stopped answering (timeouts) rather than a closed port.
            victim.proc.send_signal(signal.SIGSTOP)
        else:
            victim.kill()
        killed = time.monotonic()
        promoted = {}

        def watch():
            ask = ports[1]
            while time.monotonic() - killed < 30:
                if master_of(key(dead_domains[0]), ask) not in (None, dead_port):
                    promoted["at"] = time.monotonic() - killed
                    return
                time.sleep(0.05)
        threading.Thread(target=watch, daemon=True).start()
        live = live_failed = dead_failed = 0
        first_dead_ok = None
        health_during = None
        examples = []
        i = 0
        while time.monotonic() - killed < 30:
            a = ml.ask(dead_domains[i % 4])
            if a == "ok" and first_dead_ok is None:
                first_dead_ok = time.monotonic() - killed
            elif a != "ok" and first_dead_ok is None:
                dead_failed += 1
            b = ml.ask(live_domains[i % 8])
            live += 1
            if b != "ok":
                live_failed += 1
                if len(examples) < 2:
                    examples.append(b)
            if health_during is None and first_dead_ok is None and i == 20:
                health_during = ml.healthcheck()
            i += 1
            if first_dead_ok is not None and time.monotonic() - killed > first_dead_ok + 1:
                break
        print(f"defect 9 ({binary}): {live_failed} of {live} live-domain calls failed "
              f"while one master was dead; {dead_failed} dead-domain calls failed")
        for e in examples:
            print(f"  e.g. {e}")
        print(f"  replica promoted {promoted.get('at', float('nan')):.2f} s after the kill; "
              f"dead domains decided again {first_dead_ok or float('nan'):.2f} s after it")
        print(f"  /healthcheck meanwhile: {health_during}")
        lines = [l for l in ml.log().splitlines() if "WARN" in l or "INFO" in l][1:]
        print(f"  meshlimit log lines after startup: {len(lines)}")
        for l in lines[:3]:
            print(f"    {l[:300]}")
    finally:
        ml.stop()
        for n in nodes:
            n.kill()


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("oom", "cluster"):
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    workdir = tempfile.mkdtemp(prefix="meshlimit-figures-")
    try:
        {"oom": oom, "cluster": cluster}[sys.argv[2]](binary, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
