#!/usr/bin/env python3
"""Fairness of the gateway's queue on the engine simulator (BENCHMARKS.md).

Starts an engine simulator (h100-llama3-8b profile, a small max batch so that
one tenant can saturate it) and `atrium dev` with the chosen queue, creates
two tenants of equal weight entitled to the simulated model, and runs:

  1. B alone at half its fair share                       -> B's TTFT p50/p99
  2. A at 10x its fair share, B at half its share          -> B's TTFT p50/p99
  3. A and B both backlogged (5x their share each), 60 s   -> output tokens each

for --queue fair (VTC) and then --queue fifo, and prints one table with the
ratios the issue sets bars on. A tenant's fair share is half the engine's
measured capacity (requests/s at saturation).

usage: bench/gateway_fairness.py [--atrium build/apps/atrium/atrium] [--quick]
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_load import open_loop, percentile, sent_per_second, stream_request  # noqa: E402

MODEL = "bench-fair"
PROMPT = "Write a short poem about fair queueing for GPU inference, please." * 2


def wait_line(proc, pattern, timeout=30):
    deadline = time.time() + timeout
    lines = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m, lines
    raise RuntimeError("no line matching %r:\n%s" % (pattern, "".join(lines)))


def call(base, method, path, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


class Platform:
    """`atrium dev` with two tenants entitled to MODEL: served by the engine
    simulator at `sim_url` with the slots given, or (sim_url None) by a
    managed deployment whose one replica the platform runs, with the slots
    it derives from the engine's batch (no operator tuning)."""

    def __init__(self, atrium, queue, sim_url, slots, max_prefill, burst):
        self.tmp = tempfile.mkdtemp(prefix="atrium-fair-")
        self.proc = subprocess.Popen(
            [atrium, "dev", "--data", self.tmp + "/data", "--api-listen", "127.0.0.1:0",
             "--gateway-listen", "127.0.0.1:0", "--gateway-queue", queue],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _, lines = wait_line(self.proc, r"^Demo tenant key:")
        text = "".join(lines)
        self.api = re.search(r"^API: (\S+)", text, re.M).group(1)
        self.gateway = re.search(r"^Gateway: (\S+)", text, re.M).group(1)
        admin = open(self.tmp + "/data/admin.token").read().strip()
        self.admin = admin
        self.tenant_ids = {}
        self.deployment = None
        deployment = {"model": MODEL, "version": "bench", "region": "local",
                      "latency_tier": "interactive", "visibility": "shared"}
        if sim_url is None:
            t = call(self.api, "POST", "/api/v1/tenants", admin, {"name": "platform-serving"})
            call(self.api, "PUT", "/api/v1/tenants/%s/quotas" % t["id"], admin,
                 {"model": "H100-80GB", "kind": "gpu", "guarantee_milli": 1000,
                  "limit_milli": 1000})
            deployment["serving"] = {"template": "engine-sim", "replicas": 1,
                                     "resources": {"kind": "gpu", "model": "H100-80GB",
                                                   "gpus": 1}}
        else:
            deployment["endpoints"] = [{"url": sim_url, "capacity": slots,
                                        "max_prefill": max_prefill, "burst": burst}]
        self.deployment = call(self.api, "POST", "/api/v1/deployments", admin, deployment)["id"]
        if sim_url is None:
            deadline = time.time() + 60
            while not call(self.api, "GET", "/api/v1/deployments/" + self.deployment,
                           admin)["endpoints"]:
                if time.time() > deadline:
                    raise RuntimeError("the managed deployment's replica never became ready")
                time.sleep(0.2)
            self.endpoint = call(self.api, "GET", "/api/v1/deployments/" + self.deployment,
                                 admin)["endpoints"][0]
        self.keys = {}
        for name in ("tenant-a", "tenant-b"):
            t = call(self.api, "POST", "/api/v1/tenants", admin, {"name": name, "tier": "shared"})
            u = call(self.api, "POST", "/api/v1/tenants/%s/users" % t["id"], admin,
                     {"username": "app", "role": "tenant-member", "kind": "service"})
            k = call(self.api, "POST", "/api/v1/tenants/%s/keys" % t["id"], admin,
                     {"name": "bench", "owner_user_id": u["id"]})
            call(self.api, "PUT", "/api/v1/tenants/%s/entitlements/%s" % (t["id"], MODEL), admin)
            call(self.api, "PUT", "/api/v1/tenants/%s/gateway-limits" % t["id"], admin,
                 {"requests_per_minute": 0, "tokens_per_minute": 0, "max_concurrent": 0,
                  "max_queued": 100000})
            self.keys[name] = k["key"]
            self.tenant_ids[name] = t["id"]
        time.sleep(1.0)  # the gateway picks the policy up within its poll period
        host, port = self.gateway[len("http://"):].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def records(self, tenant, since, until):
        """The gateway's own view of a tenant's requests in [since, until]
        (usage records: queue_ms, ttft_ms as the gateway measured them)."""
        time.sleep(1.0)  # records reach the store within the journal's ship period
        path = "/api/v1/tenants/%s/usage?limit=1000&from=%d&to=%d" % (
            self.tenant_ids[tenant], int(since * 1000), int(until * 1000))
        out, cursor = [], None
        while True:
            page = call(self.api, "GET", path + ("&cursor=" + cursor if cursor else ""), self.admin)
            out += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def close(self):
        if getattr(self, "endpoint", None) is not None:
            # A replica outlives `atrium dev`: stop it first.
            call(self.api, "DELETE", "/api/v1/deployments/" + self.deployment, self.admin)
            deadline = time.time() + 60
            while time.time() < deadline and any(
                    j["state"] in ("pending", "starting", "running") for j in call(
                        self.api, "GET", "/api/v1/jobs?limit=100", self.admin)["items"]):
                time.sleep(0.2)
        self.proc.terminate()
        self.proc.wait(timeout=30)


async def run_tenant(p, tenant, rate, duration, max_tokens, seed, deadline_ms):
    key = p.keys[tenant]
    return await open_loop(rate, duration, lambda: stream_request(
        p.host, p.port, key, MODEL, max_tokens, PROMPT, deadline_ms), seed)


def _flood(host, port, key, rate, duration, max_tokens, seed, deadline_ms, nice, out):
    # A flooding tenant's clients run on machines of their own; here they share
    # the CPUs with the gateway, the engine simulator and B's client, so they
    # run at a lower priority (what they do not get only delays A's excess).
    os.nice(nice)
    results = asyncio.run(open_loop(rate, duration, lambda: stream_request(
        host, port, key, MODEL, max_tokens, PROMPT, deadline_ms), seed))
    out.put(results)


def both(p, a_rate, b_rate, duration, max_tokens, seeds, a_deadline, b_deadline, nice):
    """A's load from its own process, so that its thousands of connections do
    not delay B's client (B's times are what is measured)."""
    out = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_flood, args=(
        p.host, p.port, p.keys["tenant-a"], a_rate, duration, max_tokens, seeds[0], a_deadline,
        nice, out))
    proc.start()
    b = asyncio.run(run_tenant(p, "tenant-b", b_rate, duration, max_tokens, seeds[1], b_deadline))
    a = out.get()
    proc.join()
    return a, b


def gateway_stats(records):
    """(n, TTFT p50, TTFT p99, queue p99) of completed requests as the gateway saw them."""
    done = [r for r in records if r["status"] == "completed"]
    ttft = [r["ttft_ms"] for r in done]
    queue = [r["queue_ms"] for r in done]
    return len(done), percentile(ttft, 50), percentile(ttft, 99), percentile(queue, 99)


def ttft_stats(results):
    ok = [r["ttft"] * 1000 for r in results if r["status"] == 200 and r["ttft"] is not None]
    return len(ok), percentile(ok, 50), percentile(ok, 99)


async def capacity(p, max_tokens, seconds):
    """Requests/s the engine completes when saturated (closed loop)."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(i):
        nonlocal done
        while time.perf_counter() < stop:
            r = await stream_request(p.host, p.port, p.keys["tenant-a"], MODEL, max_tokens, PROMPT)
            if r["status"] == 200:
                done += 1

    await asyncio.gather(*(worker(i) for i in range(64)))
    return done / seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--slots", type=int, default=0,
                    help="the deployment's concurrency capacity (default: the max batch)")
    ap.add_argument("--max-prefill", type=int, default=0,
                    help="the endpoint's max_prefill: streams in prefill at once for tenants "
                         "running their share or more (default 0: no pacing)")
    ap.add_argument("--burst", type=int, default=0,
                    help="the endpoint's burst slots above capacity, for tenants served less "
                         "than their share lately (default 0)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--backlog-duration", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="short runs, for a smoke test")
    ap.add_argument("--flood-nice", type=int, default=10,
                    help="CPU niceness of tenant A's load generator while it floods (0: same as "
                         "everything else; the backlogged phase always runs both at 0)")
    ap.add_argument("--queues", default="fair,fifo",
                    help="which queues to run, comma-separated (default: fair,fifo)")
    ap.add_argument("--managed", action="store_true",
                    help="serve the model from a managed deployment (one engine-sim replica "
                         "the platform runs, slots derived from its engine's batch; "
                         "--max-batch, --slots, --max-prefill and --burst do not apply)")
    args = ap.parse_args()
    args.slots = args.slots or args.max_batch
    if args.quick:
        args.duration, args.backlog_duration = 8.0, 10.0

    sim, sim_url = None, None
    if not args.managed:
        sim = subprocess.Popen(
            [args.atrium, "engine-sim", "--listen", "127.0.0.1:0", "--model", MODEL,
             "--profile", "h100-llama3-8b", "--max-batch", str(args.max_batch)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m, _ = wait_line(sim, r"listening on (http://\S+)")
        sim_url = m.group(1)
    rows = {}
    endpoint = None
    try:
        for queue in args.queues.split(","):
            p = Platform(args.atrium, queue, sim_url, args.slots, args.max_prefill, args.burst)
            endpoint = getattr(p, "endpoint", None)
            try:
                cap = asyncio.run(capacity(p, args.max_tokens, 5.0))
                share = cap / 2
                t0 = time.time()
                alone = asyncio.run(run_tenant(p, "tenant-b", share / 2, args.duration,
                                               args.max_tokens, 1, None))
                t1 = time.time()
                a_res, b_res = both(p, share * 10, share / 2, args.duration, args.max_tokens,
                                    (2, 3), 5000, None, args.flood_nice)
                t2 = time.time()
                gw_alone = gateway_stats(p.records("tenant-b", t0, t1))
                gw_contended = gateway_stats(p.records("tenant-b", t1, t2))
                ba, bb = both(p, share * 5, share * 5, args.backlog_duration, args.max_tokens,
                              (4, 5), 3000, 3000, 0)
                tokens_a = sum(r["tokens"] for r in ba)
                tokens_b = sum(r["tokens"] for r in bb)
                late = [r["late"] * 1000 for r in b_res]
                print("%s: B's sends while A floods: late p99 %.1f ms, max %.1f ms; at most %d "
                      "in one second (%.1f/s on average)" % (
                          queue, percentile(late, 99), max(late), sent_per_second(b_res),
                          share / 2), flush=True)
                rows[queue] = {
                    "capacity_rps": cap, "alone": ttft_stats(alone), "contended": ttft_stats(b_res),
                    "gw_alone": gw_alone, "gw_contended": gw_contended,
                    "a_served": sum(1 for r in a_res if r["status"] == 200),
                    "tokens_a": tokens_a, "tokens_b": tokens_b}
            finally:
                p.close()
    finally:
        if sim is not None:
            sim.terminate()
            sim.wait(timeout=30)

    if endpoint is not None:
        print("managed deployment (template engine-sim, its batch from the template), slots as "
              "the platform set them: capacity %d, max_prefill %d, burst %d" % (
                  endpoint["capacity"], endpoint.get("max_prefill", 0), endpoint.get("burst", 0)))
        args.slots, args.max_prefill, args.burst = (
            endpoint["capacity"], endpoint.get("max_prefill", 0), endpoint.get("burst", 0))
    print("engine: h100-llama3-8b profile, max batch %s, deployment capacity %d, max_prefill %d, "
          "burst %d, max_tokens %d; B at half its share, A at 10x (its load generator at nice "
          "%d); %.0f s per phase, %.0f s backlogged" %
          ("of the engine-sim template" if args.managed else str(args.max_batch), args.slots,
           args.max_prefill, args.burst, args.max_tokens, args.flood_nice,
           args.duration, args.backlog_duration))
    print("%-6s %9s %22s %22s %8s %12s %12s %9s" % (
        "queue", "cap req/s", "B alone TTFT p50/p99", "B + A flood p50/p99", "p99 x",
        "tokens A", "tokens B", "A/B diff"))
    for queue, r in rows.items():
        n0, a50, a99 = r["alone"]
        n1, c50, c99 = r["contended"]
        diff = abs(r["tokens_a"] - r["tokens_b"]) / max(r["tokens_a"], r["tokens_b"], 1)
        print("%-6s %9.1f %12.1f / %6.1f ms %12.1f / %6.1f ms %8.2f %12d %12d %8.1f%%" % (
            queue, r["capacity_rps"], a50, a99, c50, c99, c99 / a99, r["tokens_a"],
            r["tokens_b"], 100 * diff))
    print("B's requests as the gateway measured them (usage records: arrival to first upstream "
          "byte, and the wait in the gateway's queue):")
    print("%-6s %26s %26s %18s" % ("queue", "B alone TTFT p50/p99", "B + A flood p50/p99",
                                   "queue p99 flood"))
    for queue, r in rows.items():
        _, g50, g99, _ = r["gw_alone"]
        _, h50, h99, q99 = r["gw_contended"]
        print("%-6s %16.1f / %6.1f ms %16.1f / %6.1f ms %15.1f ms" % (queue, g50, g99, h50, h99, q99))
    print("bars: B's p99 TTFT with A flooding within 1.5x of B alone; backlogged tokens within 5%")


if __name__ == "__main__":
    main()
