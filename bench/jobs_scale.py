#!/usr/bin/env python3
"""Control-plane memory and CPU with many running jobs on the local backend
(BENCHMARKS.md §8.2), until the host stops it.

`atrium dev --fleet 1250xH100-80GBx8` (10,000 simulated GPUs; every node's
fake /dev/nvidiaN are the same 8 device files) and a GPU quota of 10,000 for
the demo tenant. Jobs of `/bin/sleep 100000` asking one GPU each are
submitted through POST /api/v1/jobs, one after another. At each level
(1,000, 2,000, ...) once every job is running the script sends nothing for
--settle seconds, then for --hold seconds samples, without API calls:

  - the control plane's RSS (/proc/PID/status VmRSS) and CPU % of one core
    (utime+stime from /proc/PID/stat over the hold): the cost of the job
    service's reconcile of every live job once a second, and of the rest;
  - the host: MemAvailable (/proc/meminfo) and threads (/proc/loadavg), and
    the PSS of the processes of 20 workloads (/proc/PID/smaps_rollup).
Per-workload host cost = the drop of MemAvailable since the start / jobs.

Before each batch it stops when the next one would leave less than
--min-avail-gib of memory or --pid-reserve free PIDs (pid_max counts every
thread of the host, and other people's builds share it), and it stops when a
submission is refused or a job fails to start (printing why). Then it
cancels every job through the API, waits for them to end, stops atrium dev,
checks that no supervisor of this build is left (killing by PID those that
are, after the exe check) and removes the data dir.

usage: bench/jobs_scale.py --atrium build/apps/atrium/atrium [--levels 1000,2000,...]
"""
import argparse
import concurrent.futures
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jobs_common import (AtriumDev, call, cpu_seconds, load_average,  # noqa: E402
                         mem_available_kib, pid_max, rss_kib, supervisor_pids, tasks_on_host)


def pss_kib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def workload_tree(pid):
    """A supervisor and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def sample_workloads(supervisor, n=20):
    pids = supervisor_pids(supervisor)[:n]
    if not pids:
        return None, None
    procs, pss = 0, 0
    for p in pids:
        tree = workload_tree(p)
        procs += len(tree)
        pss += sum(pss_kib(q) for q in tree)
    return procs / len(pids), pss / len(pids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--levels", default="1000,2000,3000,4000,5000,6000,7000,8000,9000,10000")
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--min-avail-gib", type=float, default=5.0)
    ap.add_argument("--pid-reserve", type=int, default=4000)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    supervisor = os.path.join(os.path.dirname(os.path.abspath(args.atrium)),
                              "atrium-workload-supervisor")
    if supervisor_pids(supervisor):
        sys.exit("workload supervisors of this build already run; stop them first")

    print("host: pid_max %d, threads now %d, MemAvailable %.1f GiB, load %s" %
          (pid_max(), tasks_on_host(), mem_available_kib() / 2**20, load_average()), flush=True)
    avail0, tasks0 = mem_available_kib(), tasks_on_host()
    dev = AtriumDev(args.atrium, ["--fleet", "1250xH100-80GBx8"])
    stop_reason = "reached the last level"
    submitted = []
    try:
        dev.set_gpu_quota(10000)
        time.sleep(args.settle)
        rss0 = rss_kib(dev.proc.pid)
        c0, w0 = cpu_seconds(dev.proc.pid), time.time()
        time.sleep(args.hold)
        cpu_idle = (cpu_seconds(dev.proc.pid) - c0) / (time.time() - w0)
        print("jobs      0: control plane RSS %.1f MiB, CPU %.1f %%" % (rss0 / 1024,
                                                                      100 * cpu_idle), flush=True)
        print("%8s %10s %9s %9s %11s %8s %9s %9s %10s %6s" % (
            "running", "submit/s", "RSS MiB", "CPU %", "RSS KiB/job", "threads",
            "host MiB", "KiB/job", "procs/wl", "load"), flush=True)
        for level in levels:
            # Submit up to the level, checking the host before each batch.
            t_sub = time.time()
            n_before = len(submitted)
            while len(submitted) < level and stop_reason == "reached the last level":
                n = min(args.batch, level - len(submitted))
                per_job_kib = (avail0 - mem_available_kib()) / max(1, len(submitted))
                per_job_tasks = (tasks_on_host() - tasks0) / max(1, len(submitted))
                if submitted and (mem_available_kib() - n * per_job_kib) < args.min_avail_gib * 2**20:
                    stop_reason = ("memory: MemAvailable %.1f GiB, another %d jobs would leave "
                                   "less than %.1f GiB" % (mem_available_kib() / 2**20, n,
                                                           args.min_avail_gib))
                    break
                if submitted and tasks_on_host() + n * per_job_tasks > pid_max() - args.pid_reserve:
                    stop_reason = ("pids: %d threads on the host, %.1f per job; another %d jobs "
                                   "would leave fewer than %d of pid_max %d" % (
                                       tasks_on_host(), per_job_tasks, n, args.pid_reserve,
                                       pid_max()))
                    break
                for _ in range(n):
                    i = len(submitted)
                    status, job = dev.submit("sleep-%d" % i, "/bin/sleep", ["100000"],
                                             time_limit_s=86400)
                    if status not in (200, 201):
                        stop_reason = "submission %d refused: %s %s" % (i, status, job)
                        break
                    submitted.append(job["id"])
                    if job["state"] not in ("running", "starting"):
                        stop_reason = "job %d is %s: %s" % (i, job["state"], job.get("reason"))
                        break
                if stop_reason != "reached the last level":
                    break
            sub_rate = (len(submitted) - n_before) / max(1e-9, time.time() - t_sub)
            # Wait until every submitted job runs (or some ended: a failure).
            deadline = time.time() + 300
            running = 0
            while time.time() < deadline:
                running = dev.count("running")
                if running >= len(submitted):
                    break
                time.sleep(2)
            if running < len(submitted):
                failed = dev.list_jobs("failed")
                why = failed[0]["reason"] if failed else "still starting after 300 s"
                stop_reason = "%d of %d running: %s" % (running, len(submitted), why)
            time.sleep(args.settle)
            rss = rss_kib(dev.proc.pid)
            c0, w0 = cpu_seconds(dev.proc.pid), time.time()
            time.sleep(args.hold)
            cpu = (cpu_seconds(dev.proc.pid) - c0) / (time.time() - w0)
            host_kib = avail0 - mem_available_kib()
            procs, _ = sample_workloads(supervisor)
            print("%8d %10.1f %9.1f %9.1f %11.1f %8d %9.0f %9.0f %10s %6s" % (
                running, sub_rate, rss / 1024, 100 * cpu, (rss - rss0) / max(1, running),
                tasks_on_host(), host_kib / 1024, host_kib / max(1, running),
                "%.1f" % procs if procs else "-", load_average()), flush=True)
            if stop_reason != "reached the last level":
                break
        _, pss = sample_workloads(supervisor)
        if pss:
            print("PSS of one workload's processes (supervisor, bubblewrap, sleep; mean of 20): "
                  "%.0f KiB" % pss)
        print("stopped: " + stop_reason, flush=True)
    finally:
        t = time.time()
        # Cancel every job (SIGTERM to its sandbox; sleep ends at once).
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda jid: call(dev.api, "POST", "/api/v1/jobs/%s/cancel" % jid,
                                           dev.key), submitted))
        deadline = time.time() + 600
        while time.time() < deadline and dev.live_count() > 0:
            time.sleep(2)
        print("cancelled %d jobs in %.0f s" % (len(submitted), time.time() - t), flush=True)
        dev.stop()
        left = supervisor_pids(supervisor)
        for pid in [q for p in left for q in workload_tree(p)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            print("killed %d leftover supervisors by PID" % len(left))
        dev.remove()
        print("after cleanup: threads %d, MemAvailable %.1f GiB" % (
            tasks_on_host(), mem_available_kib() / 2**20), flush=True)


if __name__ == "__main__":
    main()
