#!/usr/bin/env python3
"""Managed deployments' two lifecycle figures (BENCHMARKS.md, section 9).

Starts `atrium dev` (the local sandbox backend, or with --slurm DIR a Slurm
cluster that scripts/slurm-dev.sh started, its node h100-80gb-0, on the fleet
1xH100-80GBx4), gives the platform's serving
tenant a quota and a client tenant a key, then:

  1. create -> first token: POST a managed deployment of the engine
     simulator (--replicas replicas) and send a chat request every 50 ms
     until one is answered 200; the time from the POST to that answer.
     Repeated --reps times (a new model name each time); median.
  2. crash -> rerouted: with the deployment's replicas ready, --clients
     closed-loop clients send chat requests without pause; one replica's
     model server is killed (SIGKILL) by hand. Reported: how many client
     requests failed (and how many after the replica was out of the
     gateway's list), how long until its URL left the deployment's
     endpoints, and until a replacement was ready.

usage: bench/serving_lifecycle.py [--atrium build/apps/atrium/atrium] [--reps 5] [--slurm DIR]
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving_autoscale import Platform, call  # noqa: E402

BODY = '{"model":"%s","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}'


def chat(p, model, timeout=30):
    req = urllib.request.Request(p.gateway + "/v1/chat/completions",
                                 data=(BODY % model).encode(), method="POST")
    req.add_header("Authorization", "Bearer " + p.key)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def create(p, model, replicas):
    spec = {"template": "engine-sim", "replicas": replicas,
            "resources": {"kind": "gpu", "model": "H100-80GB", "gpus": 1}}
    d = call(p.api, "POST", "/api/v1/deployments", p.admin, {
        "model": model, "version": "bench", "region": "local", "latency_tier": "interactive",
        "visibility": "shared", "serving": spec})
    call(p.api, "PUT", "/api/v1/tenants/%s/entitlements/%s" % (p.tenant_id, model), p.admin)
    return d["id"]


def endpoints(p, dep):
    d = call(p.api, "GET", "/api/v1/deployments/" + dep, p.admin)
    return {e["url"] for e in d["endpoints"]}


def create_to_first_token(p, reps, replicas):
    times = []
    for i in range(reps):
        model = "bench-life-%d" % i
        t0 = time.time()
        dep = create(p, model, replicas)
        while chat(p, model) != 200:
            if time.time() - t0 > 180:
                raise RuntimeError("no answer within 180 s")
            time.sleep(0.05)
        times.append(time.time() - t0)
        call(p.api, "DELETE", "/api/v1/deployments/" + dep, p.admin)
    return times


def crash_to_reroute(p, clients, replicas):
    model = "bench-crash"
    dep = create(p, model, replicas)
    deadline = time.time() + 180
    while len(endpoints(p, dep)) < replicas or chat(p, model) != 200:
        if time.time() > deadline:
            raise RuntimeError("the deployment never became ready")
        time.sleep(0.2)
    stop = threading.Event()
    results = []  # (start, status)
    lock = threading.Lock()

    def client():
        while not stop.is_set():
            start = time.time()
            status = chat(p, model)
            with lock:
                results.append((start, status))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(3)
    before = endpoints(p, dep)
    victim = sorted(before)[0]
    port = victim.rsplit(":", 1)[1]
    killed_at = time.time()
    subprocess.run(["pkill", "-9", "-f", "engine-sim --listen 127.0.0.1:" + port], check=False)
    left_at = replaced_at = None
    while time.time() - killed_at < 120:
        now_eps = endpoints(p, dep)
        if left_at is None and victim not in now_eps:
            left_at = time.time()
        if left_at is not None and len(now_eps) >= replicas and victim not in now_eps:
            replaced_at = time.time()
            break
        time.sleep(0.05)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    failed = [(s, st) for s, st in results if st != 200]
    return {
        "requests": len(results),
        "failed": len(failed),
        "failed_after_it_left": sum(1 for s, _ in failed if left_at and s >= left_at),
        "left_s": (left_at - killed_at) if left_at else None,
        "replaced_s": (replaced_at - killed_at) if replaced_at else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--slurm", default="",
                    help="run the replicas on this Slurm cluster (scripts/slurm-dev.sh's dir, "
                         "started with SLURM_DEV_NODE=h100-80gb-0)")
    args = ap.parse_args()
    extra = ("--slurm", args.slurm, "--fleet", "1xH100-80GBx4") if args.slurm else ()
    p = Platform(args.atrium, 120_000, deployments=False, extra=extra)
    print("backend: %s" % ("slurm (" + args.slurm + ")" if args.slurm else "local"))
    try:
        times = create_to_first_token(p, args.reps, args.replicas)
        print("create -> first token (%d replicas): median %.2f s, min %.2f s, max %.2f s "
              "over %d" % (args.replicas, statistics.median(times), min(times), max(times),
                           len(times)))
        crash = crash_to_reroute(p, args.clients, args.replicas)
        print("crash -> rerouted (%d clients, closed loop): %d requests, %d failed (%d after "
              "the replica left the list); out of the list after %s s, replaced after %s s" % (
                  args.clients, crash["requests"], crash["failed"],
                  crash["failed_after_it_left"],
                  "%.2f" % crash["left_s"] if crash["left_s"] is not None else "never",
                  "%.2f" % crash["replaced_s"] if crash["replaced_s"] is not None else "never"))
    finally:
        p.close()


if __name__ == "__main__":
    main()
