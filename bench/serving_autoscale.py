#!/usr/bin/env python3
"""Autoscaling under a step load (BENCHMARKS.md, section 9).

Starts `atrium dev` (local sandbox backend) with a short autoscaling cooldown,
gives the platform's serving tenant a quota, and creates two shared managed
deployments of the engine simulator (h100-llama3-8b profile, 4 gateway slots
per replica), measured in the same run against the same load:

  auto   "autoscale": true, 1..4 replicas
  fixed  1 replica (the baseline)

Both get the same open-loop step load at once: --low requests/s, then --high
for --step seconds, then --low again. Every second it samples each
deployment's wanted and ready replicas; afterwards it reads the gateway's own
usage records of each deployment (their queue_ms: the time a request waited
for a slot) and prints the queue wait p50/p99 per phase, for the autoscaled
deployment split at the moment its second replica became ready. With
--plot FILE it draws replicas and load over time (matplotlib).

usage: bench/serving_autoscale.py [--atrium build/apps/atrium/atrium]
                                  [--plot docs/serving-autoscale.png] [--quick]
"""
import argparse
import asyncio
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_fairness import call, wait_line  # noqa: E402
from gateway_load import open_loop, percentile, stream_request  # noqa: E402

PROMPT = "Tell me about autoscaling model servers on a shared GPU fleet." * 2


class Platform:
    """`atrium dev` with a serving tenant's quota and a client tenant's key;
    with `deployments`, this benchmark's two deployments too."""

    def __init__(self, atrium, cooldown_ms, deployments=True, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="atrium-autoscale-")
        self.proc = subprocess.Popen(
            [atrium, "dev", "--data", self.tmp + "/data", "--api-listen", "127.0.0.1:0",
             "--gateway-listen", "127.0.0.1:0", "--autoscale-cooldown-ms", str(cooldown_ms)]
            + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _, lines = wait_line(self.proc, r"^Demo tenant key:", timeout=120)
        text = "".join(lines)
        self.api = re.search(r"^API: (\S+)", text, re.M).group(1)
        self.gateway = re.search(r"^Gateway: (\S+)", text, re.M).group(1)
        self.admin = open(self.tmp + "/data/admin.token").read().strip()
        serving = call(self.api, "POST", "/api/v1/tenants", self.admin,
                       {"name": "platform-serving"})
        self.serving_tenant = serving["id"]
        call(self.api, "PUT", "/api/v1/tenants/%s/quotas" % serving["id"], self.admin,
             {"model": "H100-80GB", "kind": "gpu", "guarantee_milli": 8000,
              "limit_milli": 8000})
        t = call(self.api, "POST", "/api/v1/tenants", self.admin, {"name": "bench-client"})
        u = call(self.api, "POST", "/api/v1/tenants/%s/users" % t["id"], self.admin,
                 {"username": "app", "role": "tenant-member", "kind": "service"})
        self.key = call(self.api, "POST", "/api/v1/tenants/%s/keys" % t["id"], self.admin,
                        {"name": "bench", "owner_user_id": u["id"]})["key"]
        call(self.api, "PUT", "/api/v1/tenants/%s/gateway-limits" % t["id"], self.admin,
             {"requests_per_minute": 0, "tokens_per_minute": 0, "max_concurrent": 0,
              "max_queued": 100000})
        self.tenant_id = t["id"]
        self.deployments = {}
        for name, serving_spec in () if not deployments else (
                ("auto", {"autoscale": True, "replicas": 1, "min_replicas": 1,
                          "max_replicas": 4}),
                ("fixed", {"replicas": 1})):
            # 4 slots a replica (and 1 burst slot): small replicas, so that
            # a step load a 2-core machine can offer needs several.
            spec = {"template": "engine-sim", "capacity": 4,
                    "resources": {"kind": "gpu", "model": "H100-80GB", "gpus": 1}}
            spec.update(serving_spec)
            d = call(self.api, "POST", "/api/v1/deployments", self.admin, {
                "model": "bench-" + name, "version": "bench", "region": "local",
                "latency_tier": "interactive", "visibility": "shared", "serving": spec})
            call(self.api, "PUT", "/api/v1/tenants/%s/entitlements/bench-%s" % (t["id"], name),
                 self.admin)
            self.deployments[name] = d["id"]
        host, port = self.gateway[len("http://"):].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def replicas(self, name):
        """(wanted, ready) replicas of a deployment now."""
        dep = self.deployments[name]
        d = call(self.api, "GET", "/api/v1/deployments/" + dep, self.admin)
        wanted = d["serving"]["replicas"]
        return wanted, len(d["endpoints"])

    def usage(self, name, since, until):
        path = "/api/v1/tenants/%s/usage?limit=1000&deployment=%s&from=%d&to=%d" % (
            self.tenant_id, self.deployments[name], int(since * 1000), int(until * 1000))
        out, cursor = [], None
        while True:
            page = call(self.api, "GET", path + ("&cursor=" + cursor if cursor else ""),
                        self.admin)
            out += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def audit(self):
        page = call(self.api, "GET", "/api/v1/audit?limit=1000", self.admin)
        return [a for a in page["items"] if a["action"] == "serving.autoscaled"]

    def close(self):
        """Deletes every managed deployment and waits for its replicas' jobs
        to end (a replica outlives the server that started it), then stops
        the server."""
        try:
            page = call(self.api, "GET", "/api/v1/deployments?limit=1000", self.admin)
            for d in page["items"]:
                if d.get("serving"):
                    call(self.api, "DELETE", "/api/v1/deployments/" + d["id"], self.admin)
            deadline = time.time() + 120
            while time.time() < deadline:
                jobs = call(self.api, "GET", "/api/v1/jobs?state=running&tenant_id=%s" %
                            self.serving_tenant, self.admin)
                if not jobs["items"]:
                    break
                time.sleep(0.5)
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def sampler(p, stop, samples, t0):
    while not stop.is_set():
        row = {"t": time.time() - t0}
        for name in p.deployments:
            try:
                row[name + "_wanted"], row[name + "_ready"] = p.replicas(name)
            except OSError:
                pass
        samples.append(row)
        stop.wait(1.0)


async def step_load(p, name, phases, max_tokens, seed):
    results = []
    offset = 0.0
    for rate, duration in phases:
        part = await open_loop(rate, duration, lambda: stream_request(
            p.host, p.port, p.key, "bench-" + name, max_tokens, PROMPT, 120_000), seed)
        for r in part:
            r["due"] += offset
        results += part
        offset += duration
        seed += 1
    return results


def waits(records, since, until):
    return [r["queue_ms"] for r in records
            if since * 1000 <= r["created_at_ms"] < until * 1000 and r["queue_ms"] is not None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--low", type=float, default=1.0, help="requests/s before and after the step")
    ap.add_argument("--high", type=float, default=6.0, help="requests/s during the step")
    ap.add_argument("--before", type=float, default=30, help="seconds at --low first")
    ap.add_argument("--step", type=float, default=90, help="seconds at --high")
    ap.add_argument("--after", type=float, default=60, help="seconds at --low after")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cooldown-ms", type=int, default=20_000)
    ap.add_argument("--plot", default="")
    ap.add_argument("--csv", default="")
    ap.add_argument("--quick", action="store_true", help="a short run (CI smoke)")
    args = ap.parse_args()
    if args.quick:
        args.before, args.step, args.after = 5, 20, 5

    p = Platform(args.atrium, args.cooldown_ms)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if all(p.replicas(n)[1] >= 1 for n in p.deployments):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the deployments never became ready")
        time.sleep(1.0)  # the gateway's policy poll
        samples, stop = [], threading.Event()
        t0 = time.time()
        th = threading.Thread(target=sampler, args=(p, stop, samples, t0), daemon=True)
        th.start()
        phases = [(args.low, args.before), (args.high, args.step), (args.low, args.after)]

        async def both():
            return await asyncio.gather(*[step_load(p, n, phases, args.max_tokens, 7)
                                          for n in p.deployments])
        results = dict(zip(p.deployments, asyncio.run(both())))
        stop.set()
        th.join()
        t_end = time.time()
        time.sleep(2.0)  # usage records reach the store within the journal's ship period
        step_at = t0 + args.before
        step_end = step_at + args.step
        second_ready = next((s["t"] + t0 for s in samples
                             if s.get("auto_ready", 0) >= 2 and s["t"] + t0 >= step_at), None)

        def parse(recs):
            for r in recs:
                r["created_at_ms"] = datetime.fromisoformat(
                    r["created_at"].replace("Z", "+00:00")).timestamp() * 1000
            return recs
        records = {n: parse(p.usage(n, t0 - 1, t_end + 5)) for n in p.deployments}
        windows = [("before the step", t0, step_at)]
        if second_ready:
            windows += [("step, until auto's 2nd replica is ready", step_at, second_ready),
                        ("step, after it", second_ready, step_end)]
        else:
            windows += [("step", step_at, step_end)]
        windows += [("after the step", step_end, t_end + 5)]
        print("deployment  window                                    requests  "
              "queue p50 ms  queue p99 ms  failed")
        for n in p.deployments:
            for label, a, b in windows:
                w = waits(records[n], a, b)
                failed = sum(1 for r in results[n]
                             if a <= t0 + r["due"] < b and r["status"] != 200)
                print("%-10s  %-40s  %8d  %12.0f  %12.0f  %6d" % (
                    n, label, len(w), percentile(w, 50), percentile(w, 99), failed))
        peak = max((s.get("auto_wanted", 0) for s in samples), default=0)
        print("auto: second replica ready %s s after the step; peak %d replicas; %d "
              "autoscaling decisions audited" % (
                  "%.1f" % (second_ready - step_at) if second_ready else "never",
                  peak, len(p.audit())))
        for a in p.audit():
            print("  audit:", a.get("detail"))
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=sorted({k for s in samples for k in s}))
                w.writeheader()
                w.writerows(samples)
        if args.plot:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(9, 4.5))
            ts = [s["t"] for s in samples]
            ax.step(ts, [s.get("auto_ready", 0) for s in samples], where="post",
                    label="auto: ready replicas")
            ax.step(ts, [s.get("auto_wanted", 0) for s in samples], where="post",
                    linestyle="--", label="auto: wanted replicas")
            ax.step(ts, [s.get("fixed_ready", 0) for s in samples], where="post",
                    label="fixed: ready replicas")
            ax.set_xlabel("seconds")
            ax.set_ylabel("replicas")
            ax2 = ax.twinx()
            load = [(0, args.low), (args.before, args.high),
                    (args.before + args.step, args.low), (ts[-1] if ts else 0, args.low)]
            ax2.step([x for x, _ in load], [y for _, y in load], where="post", color="grey",
                     alpha=0.5, label="offered load (req/s, each deployment)")
            ax2.set_ylabel("requests/s")
            lines = ax.get_legend_handles_labels()
            lines2 = ax2.get_legend_handles_labels()
            ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right",
                      fontsize="small")
            ax.set_title("Autoscaling under a step load (engine-sim h100-llama3-8b, 4 slots)")
            fig.tight_layout()
            fig.savefig(args.plot, dpi=100)
            print("plot:", args.plot)
    finally:
        p.close()


if __name__ == "__main__":
    main()
