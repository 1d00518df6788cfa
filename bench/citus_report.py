#!/usr/bin/env python3
"""summary.md for a scripts/citus.sh result directory: meta.md (the header
lines citus.sh writes) and the table from results.csv. Medians over rounds;
hangs, overflow admissions and log lines summed over rounds; max queued
the largest seen. Ratios against Citus alone (config nogate) in DIR, or in
BASE_DIR when given.   python3 bench/citus_report.py DIR [BASE_DIR]"""
import csv
import os
import re
import statistics
import sys

d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "results.csv"))))
base_rows = rows
if len(sys.argv) > 2:
    base_rows = list(csv.DictReader(open(os.path.join(sys.argv[2], "results.csv"))))
configs, workloads = [], []
for r in rows:
    if r["config"] not in configs:
        configs.append(r["config"])
    if r["workload"] not in workloads:
        workloads.append(r["workload"])
order = ["nogate", "defaults", "small", "coordonly", "workersonly"]
configs.sort(key=lambda c: (order.index(c.split("-")[0]) if c.split("-")[0] in order else 9, c))
nodes = ("coord", "w1", "w2")


def num(x):
    try:
        return float(x)
    except ValueError:
        return None


def med(vals):
    v = [x for x in (num(x) for x in vals) if x is not None]
    return statistics.median(v) if v else None


def total(rs, k):
    v = [num(r[k]) for r in rs]
    return "" if any(x is None for x in v) else str(int(sum(v)))


out = [open(os.path.join(d, "meta.md")).read().rstrip() + "\n"]
out.append("| workload | config | tps, median (each round) | vs nogate | hung runs | stuck after kill | "
           "overflow admissions coord / w1 / w2 | max queued coord / w1 / w2 | progress / breaker log lines | failed tx / aborted clients |")
out.append("|---|---|---|---|---|---|---|---|---|---|")
for wl in workloads:
    base = med(r["tps"] for r in base_rows if r["workload"] == wl and r["config"] == "nogate")
    for cf in configs:
        rs = [r for r in rows if r["workload"] == wl and r["config"] == cf]
        if not rs:
            continue
        t = med(r["tps"] for r in rs)
        each = ", ".join(("hung" if r["hang"] == "yes" else f"{float(r['tps']):.0f}") if num(r["tps"]) is not None or r["hang"] == "yes" else "NA" for r in rs)
        tps = f"{t:.1f} ({each})" if t is not None else f"- ({each})"
        ratio = f"{t / base:.2f}x" if t is not None and base else ""
        hung = sum(r["hang"] == "yes" for r in rs)
        stuck = sum(r["stuck_after_kill"] == "yes" for r in rs)
        if cf == "nogate":
            ov = mq = ""
        else:
            ov = " / ".join(total(rs, "overflow_" + n) for n in nodes)
            mq = " / ".join(str(max(int(num(r["maxq_" + n]) or 0) for r in rs)) for n in nodes)
        lines = f"{total(rs, 'progress_log_lines')} / {total(rs, 'breaker_log_lines')}"
        fa = f"{total(rs, 'failed_tx') or 'NA'} / {total(rs, 'aborted_clients')}"
        out.append(f"| {wl} | {cf} | {tps} | {ratio} | {'**%d of %d**' % (hung, len(rs)) if hung else '0 of %d' % len(rs)} | "
                   f"{'**%d**' % stuck if stuck else '0'} | {ov} | {mq} | {lines} | {fa} |")

side = [wl for wl in workloads if any(r["side"] for r in rows if r["workload"] == wl)]
if side:
    out.append("\nSide jobs and figures (each round): mixed = a loop of multi-shard UPDATEs of tellers (its tps) and a loop of "
               "\\copy of 2000 rows into history (copies done) beside TPC-B at 32; index = CREATE INDEX, DROP, "
               "CREATE INDEX CONCURRENTLY, DROP on accounts during TPC-B at 32 (seconds each); idle-C-N = TPC-B at C "
               "clients beside N sessions that each ended one TPC-B transaction and then idle (how many were warm "
               "when the run began); rate-R-C = TPC-B at C clients held to R transactions a second in all "
               "(pgbench --rate): the latency and the lag behind pgbench's schedule.\n")
    out.append("| workload | config | side jobs |")
    out.append("|---|---|---|")
    for wl in side:
        for cf in configs:
            rs = [r for r in rows if r["workload"] == wl and r["config"] == cf]
            if not rs:
                continue
            texts = []
            for r in rs:
                s = r["side"]
                if wl == "index":
                    s = re.sub(r"(CREATE INDEX CONCURRENTLY|CREATE INDEX|DROP INDEX) ix_abal( ON pgbench_accounts \(abalance\))?: ", r"\1 ", s)
                    s = s.replace(" in ", " ").rstrip(";").replace(";", ", ")
                texts.append(s)
            out.append(f"| {wl} | {cf} | {' / '.join(texts)} |")

out.append("\ntps: pgbench's number (without initial connection time). A run *hung* when pgbench had not finished "
           "within the bound given above (it was killed, the views recorded in runs/*/hang-*.txt); *stuck after kill*: app "
           "sessions still busy on some node 10 s after that (runs/*/after-kill-*.txt). overflow admissions: the rise "
           "of gatekeeper.status.overflow_total on each node. progress / breaker log lines: 'admitted process N over "
           "the limit: no holder worked ...' or '... over its class's cap: no holder of the class worked ...' (the progress "
           "guarantee) / '... because process M waits for a lock it "
           "holds' (the deadlock breaker), all nodes. runs/*/mid-*.txt: each node's gate half-way through a run.")
open(os.path.join(d, "summary.md"), "w").write("\n".join(out) + "\n")
