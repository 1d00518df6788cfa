#!/usr/bin/env python3
"""Summary of a bench/adaptive.sh run: bench/adaptive_report.py DIR

DIR holds one bench.py results directory per mode and workload
(DIR/<shared|pinned>-<tpcb|wait>/). Writes DIR/results.csv (their rows
joined; `pin_mode` tells the modes apart) and DIR/summary.md: per mode,
workload and client count, the median tps (min–max over rounds) and the
median p99 latency of every configuration; the ratios of medians that the
adaptive limit is judged by (gk-adaptive against the best fixed gate, bare
PostgreSQL and the best PgBouncer pool); and, for each gate, the worker's CPU
and what the limit did (its value after the run, tickets and queue during it).

Configurations are recognised by name, as bench/adaptive.sh names them:
`gk-adaptive`, `gk-fixed<N>`, `bare` and `pgbouncer-<pool>`.
"""

import csv
import glob
import json
import os
import re
import sys

from report import TITLES, cell, fmt, machine_lines, median, num, placement

ADAPTIVE = "gk-adaptive"
MODES = ("shared", "pinned")


def load(out):
    """(rows, {mode: meta}, adaptive.json) from DIR's bench.py runs."""
    rows, metas, fields = [], {}, None
    for sub in sorted(glob.glob(os.path.join(out, "*", "results.csv"))):
        d = os.path.dirname(sub)
        with open(sub, newline="") as f:
            r = csv.DictReader(f)
            fields = fields or r.fieldnames
            rows += list(r)
        p = os.path.join(d, "meta.json")
        if os.path.exists(p):
            with open(p) as f:
                m = json.load(f)
            metas.setdefault(m.get("pin_mode", "shared"), m)
    info = {}
    p = os.path.join(out, "adaptive.json")
    if os.path.exists(p):
        with open(p) as f:
            info = json.load(f)
    return rows, metas, info, fields


def fixed_n(cfg):
    m = re.match(r"gk-fixed(\d+(?:\.\d+)?)$", cfg)
    return float(m.group(1)) if m else None


def order(cfgs):
    def key(c):
        if c == ADAPTIVE:
            return (0, 0, c)
        if fixed_n(c) is not None:
            return (1, fixed_n(c), c)
        if c == "bare":
            return (2, 0, c)
        m = re.match(r"pgbouncer-(\d+)$", c)
        return (3, int(m.group(1)) if m else 0, c)
    return sorted(cfgs, key=key)


def header(metas, info):
    m = next(iter(metas.values()), {})
    lines = ["## The adaptive limit side by side", ""]
    if m:
        lines += machine_lines(m)
    if info:
        lines.append("- **Command:** `%s`%s" % (info.get("command"), " (smoke: the script's own test; "
                                                 "its figures measure nothing)" if info.get("smoke") else ""))
    if m:
        warm = m.get("warmup_s") or 0
        lines.append("- **Runs:** pgbench scale %s, %s s per run%s, %s round(s) interleaved (every configuration "
                     "once per round and client count), `-j %s`, TCP to 127.0.0.1; figures are medians over the "
                     "rounds, ratios are ratios of medians" % (
                         m.get("scale"), m.get("duration_s"),
                         ", measured from %g s after the first transaction (plus %g ms per client)" % (
                             warm, m.get("warmup_per_client_ms") or 0) if warm else ", measured whole",
                         m.get("rounds"), m.get("jobs")))
        ss = m.get("server_settings", {})
        lines.append("- **Server:** %s; everything else default" % ", ".join(
            "`%s = %s`" % (k, v.strip("'")) for k, v in ss.items()
            if k in ("max_connections", "shared_buffers", "synchronous_commit", "huge_pages")))
    for mode in MODES:
        if mode in metas:
            lines.append("- **CPUs:** %s; PgBouncer pools %s" % (
                placement(metas[mode]), ", ".join(map(str, metas[mode].get("pgbouncer_pools") or []))))
    gkv = {}
    for meta in metas.values():
        gkv.update(meta.get("gatekeeper_variants") or {})
    if gkv:
        lines.append("- **Gates:** " + "; ".join(
            "`%s`: %s" % (n, ", ".join("`%s = %s`" % kv for kv in s.items()) or "the defaults (adaptive)")
            for n, s in ((n, gkv[n]) for n in order(gkv))))
    lines.append("")
    return lines


def section(mode, w, rows):
    wr = [r for r in rows if r.get("pin_mode", "shared") == mode and r["workload"] == w]
    if not wr:
        return []
    ok = [r for r in wr if r["status"] == "ok"]
    cfgs = order({r["config"] for r in wr})
    clients = sorted({int(r["clients"]) for r in wr})

    def vals(c, cfg, field):
        return [num(r[field]) for r in ok if int(r["clients"]) == c and r["config"] == cfg]

    def med(c, cfg, field="tps"):
        return median(vals(c, cfg, field))

    out = ["### %s, %s" % (mode, TITLES.get(w, w)), ""]
    out.append("tps, median (min–max), and p99 latency in ms, median:")
    out.append("")
    out.append("| configuration | " + " | ".join("%d clients: tps | p99 ms" % c for c in clients) + " |")
    out.append("|---|" + "---:|---:|" * len(clients))
    for cfg in cfgs:
        cells = []
        for c in clients:
            nfail = sum(1 for r in wr if r["status"] != "ok" and int(r["clients"]) == c and r["config"] == cfg)
            cells.append(cell(vals(c, cfg, "tps"), "tps") + (" (%d failed)" % nfail if nfail else ""))
            cells.append(fmt(med(c, cfg, "p99_latency_ms"), "ms"))
        out.append("| %s | %s |" % (cfg, " | ".join(cells)))
    out.append("")

    def best(c, pred):
        b = None
        for cfg in cfgs:
            v = med(c, cfg)
            if pred(cfg) and v is not None and (b is None or v > b[1]):
                b = (cfg, v)
        return b

    def ratio(a, b):
        return fmt(a / b, "ratio") if a and b else "–"

    if ADAPTIVE in cfgs:
        out.append("`%s` compared (ratios of median tps; best = the highest median at that client count):" %
                   ADAPTIVE)
        out.append("")
        out.append("| clients | adaptive / best fixed gate | adaptive / bare | adaptive / best pool | "
                   "p99: adaptive / best pool | worker CPU, % of a core |")
        out.append("|---:|---:|---:|---:|---:|---:|")
        for c in clients:
            a = med(c, ADAPTIVE)
            bf = best(c, lambda x: fixed_n(x) is not None)
            bp = best(c, lambda x: x.startswith("pgbouncer-"))
            out.append("| %d | %s | %s | %s | %s | %s |" % (
                c,
                "%s (%s)" % (ratio(a, bf[1]), bf[0]) if bf else "–",
                ratio(a, med(c, "bare")),
                "%s (%s)" % (ratio(a, bp[1]), bp[0]) if bp else "–",
                ratio(med(c, ADAPTIVE, "p99_latency_ms"), med(c, bp[0], "p99_latency_ms")) if bp else "–",
                fmt(med(c, ADAPTIVE, "worker_cpu_pct"), "pct")))
        out.append("")
    out.append("The machine's CPUs over each run (medians): idle %, and CPU pressure (PSI \"some\": "
               "the share of time a runnable task waited for a CPU) %:")
    out.append("")
    out.append("| configuration | " + " | ".join("%d clients: idle | pressure" % c for c in clients) + " |")
    out.append("|---|" + "---:|---:|" * len(clients))
    for cfg in cfgs:
        out.append("| %s | %s |" % (cfg, " | ".join(
            "%s | %s" % (fmt(med(c, cfg, "cpu_idle_pct"), "pct"), fmt(med(c, cfg, "cpu_pressure_some_pct"), "pct"))
            for c in clients)))
    out.append("")
    gates = [g for g in cfgs if g == ADAPTIVE or fixed_n(g) is not None]
    if gates:
        out.append("The gates (medians): the worker's CPU, the limit (`max_active`) read just after the run, "
                   "and tickets and queue from `gatekeeper.history` during it:")
        out.append("")
        out.append("| clients | gate | worker CPU, % of a core | limit during the run: avg (min-max) | "
                   "limit after the run | tickets avg (max) | queued avg (max) |")
        out.append("|---:|---|---:|---:|---:|---:|---:|")
        for c in clients:
            for g in gates:
                out.append("| %d | %s | %s | %s (%s-%s) | %s | %s (%s) | %s (%s) |" % (
                    c, g, fmt(med(c, g, "worker_cpu_pct"), "pct"),
                    fmt(med(c, g, "gk_limit_avg"), "pct"), fmt(med(c, g, "gk_limit_min"), "tps"),
                    fmt(med(c, g, "gk_limit_max"), "tps"), fmt(med(c, g, "gk_max_active"), "tps"),
                    fmt(med(c, g, "gk_tickets_avg"), "pct"), fmt(med(c, g, "gk_tickets_max"), "tps"),
                    fmt(med(c, g, "gk_queued_avg"), "pct"), fmt(med(c, g, "gk_queued_max"), "tps")))
        out.append("")
    failed = [r for r in wr if r["status"] != "ok"]
    if failed:
        out.append("**%d failed run(s):** %s" % (len(failed), "; ".join(
            "%s c=%s r=%s: %s" % (r["config"], r["clients"], r["round"], r["error"]) for r in failed)))
        out.append("")
    return out


def main(out):
    rows, metas, info, fields = load(out)
    if not rows:
        sys.exit("no results.csv under %s/*/" % out)
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    md = header(metas, info)
    for mode in MODES:
        for w in ("tpcb", "wait"):
            md += section(mode, w, rows)
    path = os.path.join(out, "summary.md")
    with open(path, "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    print("wrote %s and %s" % (path, os.path.join(out, "results.csv")))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: adaptive_report.py DIR")
    main(sys.argv[1])
