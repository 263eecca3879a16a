#!/usr/bin/env python3
"""10,000 concurrent idle streaming connections through the gateway: its RSS
and CPU (BENCHMARKS.md).

An engine simulator with the `idle` profile (a stream's first token only after
a minute) stands behind `atrium dev`'s gateway. The script opens N streamed
chat completions through the gateway, waits until every one has its response
headers (the stream is open and relayed), then samples the gateway process's
resident memory and CPU time for --hold seconds while nothing flows, and
closes them. Reported: RSS before and with the streams open (and per stream),
CPU % while they are held.

usage: bench/gateway_idle_streams.py [--atrium build/apps/atrium/atrium] [--streams 10000]
"""
import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_fairness import call, wait_line  # noqa: E402
from procstat import cpu_seconds, rss_kib  # noqa: E402

MODEL = "bench-idle"


async def open_stream(host, port, key, opened):
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 4,
                       "messages": [{"role": "user", "content": "wait"}]}).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (host, key, len(body)))
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(head.encode() + body)
    await writer.drain()
    opened.append(1)
    # Nothing comes back yet: the simulator, like vLLM, sends the response
    # head with the first token, a minute away.
    return reader, writer


def sim_running(sim_url):
    import urllib.request
    with urllib.request.urlopen(sim_url + "/sim/status", timeout=10) as r:
        return json.loads(r.read())["running"]


async def hold(args, host, port, key, pid, sim_url):
    opened = []
    sem = asyncio.Semaphore(500)  # connect in waves, not all at once

    async def one():
        async with sem:
            return await open_stream(host, port, key, opened)

    t0 = time.perf_counter()
    conns = await asyncio.gather(*(one() for _ in range(args.streams)))
    # Every stream open at the simulator means the gateway relays it.
    ok = 0
    for _ in range(600):
        ok = sim_running(sim_url)
        if ok >= len(opened):
            break
        await asyncio.sleep(0.1)
    setup = time.perf_counter() - t0
    # A stream the gateway answered already did not stay open: its status.
    early = {}
    for reader, _ in conns:
        try:
            line = await asyncio.wait_for(reader.readline(), 0.001)
        except asyncio.TimeoutError:
            continue
        status = line.split()[1].decode() if line.startswith(b"HTTP/") else "closed"
        early[status] = early.get(status, 0) + 1
    if early:
        print("streams answered at once instead of held open: %s" % early)
    await asyncio.sleep(2)
    rss_open = rss_kib(pid)
    cpu0, w0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(args.hold)
    cpu = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - w0)
    for _, writer in conns:
        writer.close()
    return ok, setup, rss_open, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--hold", type=float, default=20.0)
    args = ap.parse_args()
    # The gateway holds two descriptors per stream (client and upstream), and
    # the processes started here inherit this limit: raise the hard limit too
    # where allowed (root), else say how many streams fit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * args.streams + 1024
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, want)), hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit < 2 * args.streams + 256:
        print("note: the open-file limit (%d) lets the gateway hold about %d streams" %
              (limit, (limit - 256) // 2))

    tmp = "/tmp/atrium-idle-%d" % os.getpid()
    sim = subprocess.Popen([args.atrium, "engine-sim", "--listen", "127.0.0.1:0", "--model", MODEL,
                            "--profile", "idle"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    dev = None
    try:
        sim_url = wait_line(sim, r"listening on (http://\S+)")[0].group(1)
        dev = subprocess.Popen([args.atrium, "dev", "--data", tmp, "--api-listen", "127.0.0.1:0",
                                "--gateway-listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _, lines = wait_line(dev, r"^Demo tenant key:")
        text = "".join(lines)
        api = text.split("API: ")[1].split()[0]
        gateway = text.split("Gateway: ")[1].split()[0]
        admin = open(tmp + "/admin.token").read().strip()
        key = open(tmp + "/demo.key").read().strip()
        tenant = call(api, "GET", "/api/v1/whoami", key)["tenant"]["id"]
        call(api, "POST", "/api/v1/deployments", admin, {
            "model": MODEL, "version": "bench", "region": "local", "latency_tier": "batch",
            "visibility": "shared", "endpoints": [{"url": sim_url, "capacity": 4 * args.streams}]})
        call(api, "PUT", "/api/v1/tenants/%s/entitlements/%s" % (tenant, MODEL), admin)
        time.sleep(1.0)
        host, port = gateway[len("http://"):].rsplit(":", 1)
        rss_before = rss_kib(dev.pid)
        ok, setup, rss_open, cpu = asyncio.run(hold(args, host, int(port), key, dev.pid, sim_url))
        print("streams open through the gateway: %d of %d (opened in %.1f s)" %
              (ok, args.streams, setup))
        print("gateway process RSS: %.1f MiB before, %.1f MiB with the streams open "
              "(+%.1f KiB per stream)" % (rss_before / 1024, rss_open / 1024,
                                          (rss_open - rss_before) / max(ok, 1)))
        print("gateway process CPU while they are held idle for %.0f s: %.1f %% of one core" %
              (args.hold, 100 * cpu))
    finally:
        for p in (dev, sim):
            if p:
                p.terminate()
                p.wait(timeout=30)
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
