#!/usr/bin/env python3
"""Issue 9 "Exposure" figures for one meshlimit binary (run it on the before and the after
binary, the same way):

- label cardinality: N distinct tenants sent to a detailed_metric rule through POST /json
  (one keep-alive connection); the scrape's size, its per-rule series and the RSS growth;
- /json with other methods: three GETs with a body on a 3-a-day rule, then a POST.

Usage: scripts/exposure_figures.py BINARY [TENANTS]   (default 50000)
With PLAIN=1 the tenant rule has no detailed_metric: the RSS growth of the buckets alone.
Only loopback; every loop is bounded by its count.
"""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

CONFIG = """domain: saas
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: three
    rate_limit: {unit: day, requests_per_unit: 3}
"""


def start(binary, workdir):
    config = os.path.join(workdir, "saas.yaml")
    with open(config, "w") as f:
        text = CONFIG
        if os.environ.get("PLAIN") == "1":
            text = text.replace("detailed_metric: true", "detailed_metric: false")
        f.write(text)
    log = open(os.path.join(workdir, "log"), "w+")
    proc = subprocess.Popen(
        [binary, "serve", "--config", config, "--grpc-addr", "127.0.0.1:0",
         "--http-addr", "127.0.0.1:0", "--log", "info"],
        stdout=log, stderr=subprocess.STDOUT, env={"NO_COLOR": "1", "PATH": os.environ["PATH"]})
    for _ in range(200):
        log.seek(0)
        m = re.search(r"meshlimit serving.* http=127\.0\.0\.1:(\d+)", log.read())
        if m:
            return proc, int(m.group(1))
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("meshlimit did not start")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def body(key, value):
    return json.dumps({"domain": "saas", "descriptors": [{"entries": [{"key": key, "value": value}]}]})


def main():
    binary = sys.argv[1]
    tenants = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start(binary, workdir)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
            rss_before = rss_kb(proc.pid)
            started = time.monotonic()
            for i in range(tenants):
                conn.request("POST", "/json", body("tenant", f"tenant-{i}"),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status == 200, r.status
            sent = time.monotonic() - started
            conn.request("GET", "/metrics")
            scrape = conn.getresponse().read()
            rss_after = rss_kb(proc.pid)
            series = [l for l in scrape.decode().splitlines()
                      if l.startswith("ratelimit_service_rate_limit_") and 'domain="saas"' in l]
            print(f"{tenants} tenants sent in {sent:.1f} s: scrape {len(scrape)} bytes "
                  f"({len(scrape) / 1e6:.2f} MB), {len(series)} per-rule series in domain saas, "
                  f"RSS {rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MB "
                  f"(+{(rss_after - rss_before) / 1024:.1f} MB)")
            overflow = [l for l in scrape.decode().splitlines()
                        if l.startswith("meshlimit_metric_values_overflow_total")]
            if overflow:
                print("  " + "; ".join(overflow))

            codes = []
            for _ in range(3):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/json", body("three", "x"), {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                codes.append((r.status, r.getheader("Allow")))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", "/json", body("three", "x"), {"Content-Type": "application/json"})
            r = c.getresponse()
            answer = r.read().decode()
            print(f"3 x GET /json: {codes}; then POST /json: {r.status} {answer}")
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
