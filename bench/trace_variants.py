#!/usr/bin/env python3
"""Builds pod lists of the same family as the openb default trace, to check
that a placement policy is not fitted to the published files (BENCHMARKS.md §4).

usage: bench/trace_variants.py OUT_DIR
writes cpu050.csv, cpu200.csv (CPU requests ×0.5 / ×2, like the FGD paper's
cpu050/cpu200 traces), share60.csv (60 % of 1-GPU pods become shares whose
sizes are drawn from the trace's own shares) and sub60.csv (a random 60 %
subsample). Seeded, so the files are the same on every run.
"""
import csv
import os
import random
import sys

SOURCE = os.path.join(os.path.dirname(__file__), "..", "data", "alibaba-gpu-v2023",
                      "openb_pod_list_default.csv")


def write(path, fields, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rows = list(csv.DictReader(open(SOURCE)))
    fields = list(rows[0].keys())
    rnd = random.Random(1)
    for name, factor in (("cpu050", 0.5), ("cpu200", 2.0)):
        write(os.path.join(out, name + ".csv"), fields,
              [dict(r, cpu_milli=str(max(1, int(int(r["cpu_milli"]) * factor)))) for r in rows])
    shares = [int(r["gpu_milli"]) for r in rows
              if r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000]
    converted = []
    for r in rows:
        r = dict(r)
        if r["num_gpu"] == "1" and r["gpu_milli"] == "1000" and rnd.random() < 0.6:
            r["gpu_milli"] = str(rnd.choice(shares))
        converted.append(r)
    write(os.path.join(out, "share60.csv"), fields, converted)
    write(os.path.join(out, "sub60.csv"), fields, [r for r in rows if rnd.random() < 0.6])


if __name__ == "__main__":
    main()
