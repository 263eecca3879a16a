"""Shared pieces of the jobs benchmarks (bench/jobs_throughput.py,
bench/jobs_scale.py): an `atrium dev` started for one measurement, the
REST calls they make, and /proc readings.

Nothing here is stopped by name: an `atrium dev` is stopped through the
Popen that started it, and workload processes only by PID after checking
that /proc/PID/exe is this build's workload supervisor.
"""
import calendar
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

from procstat import cpu_seconds, rss_kib  # noqa: F401

JOB_MODEL = "H100-80GB"
LIVE_STATES = ("pending", "starting", "running")


def call(base, method, path, token, body=None, headers=None, timeout=60):
    """One REST call; returns (status, parsed JSON body or None)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"error": raw.decode(errors="replace")}


def parse_time(text):
    """An API timestamp (2026-12-02T11:17:39.123Z) as Unix seconds, or None."""
    if not text:
        return None
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z$", text)
    if not m:
        raise ValueError("bad timestamp %r" % text)
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    return calendar.timegm((y, mo, d, h, mi, s)) + frac


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(q / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


# rss_kib and cpu_seconds live in procstat.py; re-exported for the drivers.


def mem_available_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def tasks_on_host():
    """Threads on the host (the 4th field of /proc/loadavg: running/total)."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])


def pid_max():
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read())


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


class AtriumDev:
    """`atrium dev` in a fresh data dir, with the demo tenant's key and the
    admin token read from it. `extra` are more `atrium dev` arguments."""

    def __init__(self, atrium, extra, data_parent=None):
        self.atrium = os.path.abspath(atrium)
        self.tmp = tempfile.mkdtemp(prefix="atrium-jobs-bench-", dir=data_parent)
        os.chmod(self.tmp, 0o755)  # workloads' users reach their folders below it
        self.data = os.path.join(self.tmp, "data")
        self.log_path = os.path.join(self.tmp, "dev.log")
        self.log = open(self.log_path, "w")
        t = time.time()
        self.proc = subprocess.Popen(
            [self.atrium, "dev", "--data", self.data, "--api-listen", "127.0.0.1:0",
             "--gateway-listen", "127.0.0.1:0"] + list(extra),
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        lines = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            lines.append(line)
            if line.startswith("Demo tenant key:"):
                break
        else:
            lines.append("(timed out)\n")
        text = "".join(lines)
        m = re.search(r"^API: (\S+)", text, re.M)
        if not m or not text.rstrip().splitlines()[-1].startswith("Demo tenant key:"):
            self.stop()
            raise RuntimeError("atrium dev did not start:\n" + text + self.tail_log())
        self.api = m.group(1)
        self.start_s = time.time() - t  # until it serves (after the jobs' reconcile)
        # Keep reading stdout so the process never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.admin = open(os.path.join(self.data, "admin.token")).read().strip()
        self.key = open(os.path.join(self.data, "demo.key")).read().strip()
        _, who = call(self.api, "GET", "/api/v1/whoami", self.key)
        self.tenant = who["tenant"]["id"]

    def tail_log(self, n=40):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def set_gpu_quota(self, gpus):
        status, body = call(self.api, "PUT", "/api/v1/tenants/%s/quotas" % self.tenant, self.admin,
                            {"model": JOB_MODEL, "kind": "gpu", "guarantee_milli": gpus * 1000,
                             "limit_milli": gpus * 1000})
        if status != 200:
            raise RuntimeError("quota: %s %s" % (status, body))

    def submit(self, name, command, args=(), time_limit_s=600):
        body = {"name": name, "command": command, "args": list(args),
                "resources": {"kind": "gpu", "model": JOB_MODEL, "gpus": 1},
                "time_limit_s": time_limit_s}
        return call(self.api, "POST", "/api/v1/jobs", self.key, body)

    def list_jobs(self, state=None):
        """Every job of the demo tenant (all pages), optionally of one state."""
        out, cursor = [], None
        while True:
            q = "?limit=1000"
            if state:
                q += "&state=" + state
            if cursor:
                q += "&cursor=" + urllib.request.quote(cursor)
            status, page = call(self.api, "GET", "/api/v1/jobs" + q, self.key)
            if status != 200:
                raise RuntimeError("list jobs: %s %s" % (status, page))
            out.extend(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def count(self, state):
        return len(self.list_jobs(state))

    def live_count(self):
        return sum(self.count(s) for s in LIVE_STATES)

    def events(self, job_id):
        _, page = call(self.api, "GET", "/api/v1/jobs/%s/events?limit=1000" % job_id, self.key)
        return page["items"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def remove(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def supervisor_pids(supervisor_path):
    """PIDs of running workload supervisors of this build (by /proc/PID/exe)."""
    target = os.path.realpath(supervisor_path)
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/exe" % name) == target:
                pids.append(int(name))
        except OSError:
            pass
    return pids
