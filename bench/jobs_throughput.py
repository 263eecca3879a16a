#!/usr/bin/env python3
"""Submit -> running latency and throughput of N short jobs through Atrium's
REST API on each execution backend, against Slurm's own `sbatch` of the same
jobs in the same run (BENCHMARKS.md §8.1).

Three paths, each submitting N jobs of `true` that ask for one GPU, one
after another from one client: as fast as the submitter gets its answer (a
deep queue: throughput), or one every --interval seconds (GPUs mostly free:
latency):

  sbatch  `sbatch --wrap true` straight to the one-host Slurm: the same
          node, GRES (gpu:1), account, QOS (batch), Unix user, time limit,
          --export=NONE and --no-requeue as Atrium's own submissions.
  slurm   POST /api/v1/jobs to `atrium dev --slurm DIR --fleet 1xH100-80GBx4`.
  local   POST /api/v1/jobs to `atrium dev --fleet 1xH100-80GBx4`
          (bubblewrap sandboxes on this machine).

Both fleets have the same 4 (fake) GPUs, so at most 4 jobs run at once on
every path. Atrium has no GPU-less job (a request asks for 1..8 GPUs).
atrium dev runs with --scrub-command as given (its own default "sleep 1";
"none" scrubs nothing, as plain sbatch).

Measured per path (t0 = the moment the first submit request is sent), all
on this host's clock to the millisecond:
  submit_s    t0 -> the last submission answered
  makespan_s  t0 -> the last job ended: slurmctld's "_job_complete ... done"
              on the Slurm paths (its log; sacct keeps whole seconds), the
              job's ended_at on the local path
  jobs/s      N / makespan_s
  start mean/p50/p95  per job: its start - the moment its own submit was
              sent. Start is slurmctld's "Allocate"/"Started" of the job on
              sbatch and slurm, the job's started_at (the sandbox's
              supervisor start) on local.
  ratios      each path's figure over sbatch's in the same repetition.

Each repetition runs the three paths in a rotated order; every figure in
BENCHMARKS.md is a median over repetitions. Needs root, bubblewrap and a
cluster from `SLURM_DEV_NODE=h100-80gb-0 scripts/slurm-dev.sh start DIR`.

usage: bench/jobs_throughput.py --atrium build/apps/atrium/atrium --slurm-dir DIR
                                [--jobs 1000] [--reps 1] [--paths sbatch,slurm,local]
                                [--interval 0] [--scrub-command none]
"""
import argparse
import datetime
import json
import os
import shutil
import pwd
import re
import grp
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jobs_common import (AtriumDev, load_average, median, percentile,  # noqa: E402
                         parse_time)

NODE = "h100-80gb-0"
FLEET = "1xH100-80GBx4"
TIME_LIMIT_S = 600


def slurm_env(slurm_dir):
    env = dict(os.environ)
    env["SLURM_CONF"] = os.path.join(slurm_dir, "slurm.conf")
    env["SLURM_TIME_FORMAT"] = "%s"
    return env


def sacct_records(env, since, names=None, name=None):
    """{job name: (submit, start, end, state)} from sacct (Unix seconds)."""
    argv = ["sacct", "-X", "-n", "-P", "-a", "-S", time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                   time.localtime(since - 60)),
            "--format=JobID,JobName,Submit,Start,End,State"]
    if name:
        argv.append("--name=" + name)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    recs = {}
    for line in out.splitlines():
        f = line.split("|")
        if len(f) < 6:
            continue
        key = f[0] if name else f[1]
        if names is not None and key not in names:
            continue

        def num(x):
            return int(x) if x.isdigit() else None
        recs[key] = (num(f[2]), num(f[3]), num(f[4]), f[5], f[0])
    return recs


ALLOCATED = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] "
                       r"(?:sched: Allocate|sched/backfill: _start_job: Started) JobId=(\d+) ")


COMPLETED = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] "
                       r"_job_complete: JobId=(\d+) done")


def slurmctld_times(slurm_dir):
    """({job id: started}, {job id: ended}) in Unix seconds to the ms, from
    slurmctld's log: the main scheduler's "Allocate" and the backfill's
    "Started" lines, and "_job_complete: ... done". sacct keeps whole
    seconds only; these are the same events to the millisecond."""
    started, ended = {}, {}
    with open(os.path.join(slurm_dir, "run", "log", "slurmctld.log"), errors="replace") as f:
        for line in f:
            for pattern, out in ((ALLOCATED, started), (COMPLETED, ended)):
                m = pattern.match(line)
                if m:
                    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
                    out[m.group(2)] = t.timestamp()  # the log is in local time
    return started, ended


def summarize(path, n, t0, submit_done, submit_at, starts, ends, extra=None):
    """starts and ends: Unix seconds to the ms on this host's clock (slurmctld's
    log on the Slurm paths, the job's record on the local one)."""
    lat = [starts[k] - submit_at[k] for k in submit_at if starts.get(k) is not None]
    end_times = [e for e in ends.values() if e is not None]
    r = {"path": path, "jobs": n, "started": len(lat), "ended": len(end_times),
         "submit_s": submit_done - t0,
         "makespan_s": (max(end_times) - t0) if end_times else None}
    r["jobs_per_s"] = n / r["makespan_s"] if r["makespan_s"] else None
    if lat:
        r["start_mean_s"] = sum(lat) / len(lat)
        r["start_p50_s"] = percentile(lat, 50)
        r["start_p95_s"] = percentile(lat, 95)
        r["start_max_s"] = max(lat)
    r.update(extra or {})
    return r


def wait_until(pred, timeout, every=1.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def pace(args, t0, i):
    """--interval: job i is submitted no sooner than t0 + i * interval."""
    if args.interval > 0:
        delay = t0 + i * args.interval - time.time()
        if delay > 0:
            time.sleep(delay)


def run_sbatch(args, env, account, user, group, tag):
    name = "bench-sbatch-" + tag
    argv = ["sbatch", "--parsable", "--job-name=" + name, "--nodelist=" + NODE,
            "--account=" + account, "--qos=batch", "--uid=" + user, "--gid=" + group,
            "--chdir=/", "--output=/dev/null", "--export=NONE", "--no-requeue", "--ntasks=1",
            "--time=%d" % (TIME_LIMIT_S // 60), "--gres=gpu:1", "--wrap", "true"]
    submit_at = {}
    t0 = time.time()
    for i in range(args.jobs):
        pace(args, t0, i)
        t = time.time()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("sbatch: " + p.stderr)
        submit_at[p.stdout.strip().split(";")[0]] = t
    submit_done = time.time()

    def queue_empty():
        q = subprocess.run(["squeue", "-h", "-a", "--name=" + name, "-o", "%A"], env=env,
                           capture_output=True, text=True)
        return q.returncode == 0 and not q.stdout.strip()
    if not wait_until(queue_empty, args.timeout):
        raise RuntimeError("sbatch jobs still queued after %d s" % args.timeout)
    recs = {}

    def accounted():
        nonlocal recs
        recs = sacct_records(env, t0, name=name)
        return len(recs) >= args.jobs and all(r[2] for r in recs.values())
    wait_until(accounted, 120)
    allocated, completed = slurmctld_times(args.slurm_dir)
    starts = {k: allocated.get(k) for k in recs}
    ends = {k: completed.get(k) for k in recs}
    bad = sum(1 for r in recs.values() if r[3] != "COMPLETED")
    return summarize("sbatch", args.jobs, t0, submit_done, submit_at, starts, ends,
                     {"not_completed": bad,
                      "no_start_in_log": sum(1 for s in starts.values() if s is None)})


def run_atrium(args, dev, path, tag, env=None):
    submit_at = {}
    t0 = time.time()
    errors = {}
    for i in range(args.jobs):
        pace(args, t0, i)
        t = time.time()
        status, job = dev.submit("bench-%s-%d" % (tag, i), "/bin/true", time_limit_s=TIME_LIMIT_S)
        if status not in (200, 201):
            errors[status] = errors.get(status, 0) + 1
            if len(errors) == 1 and errors[status] == 1:
                print("  submit refused: %s %s" % (status, job), flush=True)
            continue
        submit_at[job["id"]] = t
    submit_done = time.time()
    if not wait_until(lambda: dev.live_count() == 0, args.timeout, every=2.0):
        raise RuntimeError("%s: jobs still live after %d s" % (path, args.timeout))
    jobs = {j["id"]: j for j in dev.list_jobs() if j["id"] in submit_at}
    states = {}
    for j in jobs.values():
        states[j["state"]] = states.get(j["state"], 0) + 1
    extra = {"states": states, "submit_errors": errors}
    if path == "slurm":
        # Slurm's own Submit/Start/End of each job's workload (named
        # "<job id>.<attempt>"), on the same clock as the sbatch path.
        names = {"%s.%d" % (jid, j["attempt"]): jid for jid, j in jobs.items()}
        recs = {}

        def accounted():
            nonlocal recs
            recs = sacct_records(env, t0, names=set(names))
            return len(recs) >= len(names) and all(r[2] for r in recs.values())
        wait_until(accounted, 120)
        allocated, completed = slurmctld_times(args.slurm_dir)
        starts = {names[k]: allocated.get(r[4]) for k, r in recs.items()}
        extra["no_start_in_log"] = sum(1 for s in starts.values() if s is None)
        ends = {names[k]: completed.get(r[4]) for k, r in recs.items()}
        handed = [recs[k][0] - int(submit_at[names[k]]) for k in recs if recs[k][0]]
        if handed:
            extra["to_sbatch_p50_s"] = percentile(handed, 50)
            extra["to_sbatch_p95_s"] = percentile(handed, 95)
    else:
        starts, ends = {}, {}
        for jid, j in jobs.items():
            s = parse_time(j.get("started_at"))
            if s is None:
                # Ended before a reconcile saw it running: the placed event.
                for e in dev.events(jid):
                    if e["to"] in ("running", "starting"):
                        s = parse_time(e["time"])
                        if e["to"] == "running":
                            break
            starts[jid] = s
            ends[jid] = parse_time(j.get("ended_at"))
    return summarize(path, args.jobs, t0, submit_done, submit_at, starts, ends, extra)


def remove_tenant_user(name):
    """The Unix user atrium dev --slurm made for a tenant of this run, if any."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return
    if entry.pw_gecos.startswith("Atrium tenant"):
        subprocess.run(["userdel", name], capture_output=True)


def fmt(r):
    keys = ["submit_s", "makespan_s", "jobs_per_s", "start_mean_s", "start_p50_s", "start_p95_s",
            "start_max_s",
            "to_sbatch_p50_s", "to_sbatch_p95_s"]
    parts = ["%s=%.2f" % (k, r[k]) for k in keys if r.get(k) is not None]
    for k in ("states", "submit_errors", "not_completed", "started", "ended"):
        if k in r and r[k]:
            parts.append("%s=%s" % (k, r[k]))
    return "%-6s %s" % (r["path"], " ".join(parts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--atrium", default="build/apps/atrium/atrium")
    ap.add_argument("--slurm-dir", required=True)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--paths", default="sbatch,slurm,local")
    ap.add_argument("--timeout", type=int, default=3600, help="per path, seconds")
    ap.add_argument("--json", help="append every result as a JSON line to this file")
    ap.add_argument("--interval", type=float, default=0.0,
                    help="seconds between submissions (0: as fast as each answer comes back, "
                         "a deep queue: throughput); e.g. 0.37 spreads submissions over the "
                         "second and leaves GPUs free: submit-to-running latency")
    ap.add_argument("--scrub-command", default="sleep 1",
                    help="atrium dev's --scrub-command (its own default: 'sleep 1', the simulated "
                         "fleet's stand-in for a GPU reset); 'none': no scrub, as plain sbatch")
    args = ap.parse_args()
    slurm_dir = os.path.abspath(args.slurm_dir)
    env = slurm_env(slurm_dir)
    paths = args.paths.split(",")
    results = []
    for rep in range(args.reps):
        order = paths[rep % len(paths):] + paths[:rep % len(paths)]
        tag = "%d-%d" % (os.getpid(), rep)
        print("rep %d: order %s, scrub %r, load %s" %
              (rep + 1, ",".join(order), args.scrub_command, load_average()), flush=True)
        sdev = None
        try:
            if "slurm" in order or "sbatch" in order:
                # One Atrium on Slurm per repetition: its tenant's account,
                # user and QOS are what the sbatch path submits with too.
                sdev = AtriumDev(args.atrium, ["--fleet", FLEET, "--slurm", slurm_dir,
                                               "--scrub-command"] + args.scrub_command.split())
                sdev.set_gpu_quota(4)
                print("  atrium dev --slurm served after %.1f s" % sdev.start_s, flush=True)
                user = sdev.tenant  # Unix user = tenant id (no prefix under atrium dev)

                def synced():
                    try:
                        pwd.getpwnam(user)
                    except KeyError:
                        return False
                    out = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc",
                                          "where", "account=" + sdev.tenant, "format=user,qos"],
                                         env=env, capture_output=True, text=True).stdout
                    return user in out and "batch" in out
                if not wait_until(synced, 120):
                    raise RuntimeError("tenant %s never reached Slurm:\n%s" %
                                       (sdev.tenant, sdev.tail_log()))
                group = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
            for path in order:
                if path == "sbatch":
                    r = run_sbatch(args, env, sdev.tenant, user, group, tag)
                elif path == "slurm":
                    r = run_atrium(args, sdev, "slurm", tag, env)
                else:
                    ldev = AtriumDev(args.atrium, ["--fleet", FLEET, "--scrub-command"] +
                                    args.scrub_command.split())
                    try:
                        ldev.set_gpu_quota(4)
                        r = run_atrium(args, ldev, "local", tag)
                    finally:
                        ldev.stop()
                        ldev.remove()
                r["rep"] = rep + 1
                r["load_after"] = load_average()
                results.append(r)
                print("  " + fmt(r), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
        finally:
            if sdev:
                sdev.stop()
                sdev.remove()
                remove_tenant_user(sdev.tenant)
                # Its workloads' folders: the next repetition's Atrium (a new
                # control plane over the same cluster) would otherwise find
                # a thousand orphans to forget while it is measured.
                shutil.rmtree(os.path.join(slurm_dir, "jobs", "atrium"), ignore_errors=True)
    # Ratios to sbatch within each repetition, then medians over repetitions.
    print("\nmedians over %d repetition(s) of %d jobs (ratio: path / sbatch of the same rep)" %
          (args.reps, args.jobs))
    for path in paths:
        rows = [r for r in results if r["path"] == path]
        line = [path.ljust(6)]
        for k in ("submit_s", "makespan_s", "jobs_per_s", "start_mean_s", "start_p50_s",
                  "start_p95_s"):
            vals = [r[k] for r in rows if r.get(k) is not None]
            if not vals:
                continue
            ratios = []
            for r in rows:
                base = [b for b in results if b["path"] == "sbatch" and b["rep"] == r["rep"]]
                if base and base[0].get(k) and r.get(k) is not None:
                    ratios.append(r[k] / base[0][k])
            line.append("%s=%.2f" % (k, median(vals)) +
                        (" (x%.2f)" % median(ratios) if ratios and path != "sbatch" else ""))
        print("  " + "  ".join(line))


if __name__ == "__main__":
    main()
