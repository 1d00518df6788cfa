#!/usr/bin/env python3
"""Charts of a benchmark run: bench/plot.py RESULTS_DIR

Reads RESULTS_DIR/results.csv and writes RESULTS_DIR/<workload>.png for each
workload: tps (left), p95 latency (where the runs recorded it) and p99
latency (right, log scale) against the number of clients, one line per configuration through the medians over rounds, with
min-max error bars. Failed runs are left out.
"""

import csv
import json
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter  # noqa: E402

TITLES = {
    "tpcb": "TPC-B-like, simple protocol, loopback",
    "select": "Select-only, -M prepared (PgBouncer: -M %s)",
    "slow": "Slow client (1 ms think time twice per transaction)",
    "sysbench-rw": "sysbench oltp_read_write (prepared statements; PgBouncer: --db-ps-mode=%s)",
    "sysbench-ro": "sysbench oltp_read_only (prepared statements; PgBouncer: --db-ps-mode=%s)",
}
FAMILY_ORDER = {"bare": 0, "pgbouncer": 1, "gatekeeper": 2}
POOL_COLORS = ["#9ecae1", "#4292c6", "#08519c", "#08306b"]
GK_COLORS = ["#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]


def minor_label(v, _pos):
    """Label only the 2s and 5s between the decades of a log axis."""
    if v <= 0:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9))
    return "%g" % v if lead in (2, 5) else ""


def style(cfgs):
    out = {}
    pi = gi = 0
    for name, fam in cfgs:
        if fam == "bare":
            out[name] = dict(color="#444444", marker="s", linestyle="--")
        elif fam == "pgbouncer":
            out[name] = dict(color=POOL_COLORS[min(pi, len(POOL_COLORS) - 1)], marker="o", linestyle="-")
            pi += 1
        else:
            out[name] = dict(color=GK_COLORS[gi % len(GK_COLORS)], marker="D", linestyle="-", linewidth=2.2)
            gi += 1
    return out


def main(out):
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok" and r["workload"] != "overhead"]
    meta = {}
    if os.path.exists(os.path.join(out, "meta.json")):
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
    machine = ""
    if meta:
        runs = "%s s runs" % meta.get("duration_s")
        if meta.get("warmup_per_client_ms"):
            runs += " + %g ms per client" % meta["warmup_per_client_ms"]
        machine = "%s CPUs (%s), %s, %s round(s), %s on the same machine" % (
            meta.get("nproc"), meta.get("cpu_model"), runs, meta.get("rounds"),
            "the client" if meta.get("sysbench") else "pgbench -j %s" % meta.get("jobs"))
    workloads = []
    for r in rows:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    for w in workloads:
        wr = [r for r in rows if r["workload"] == w]
        cfgs = sorted({(r["config"], r["family"], int(r["pool_size"] or 0)) for r in wr},
                      key=lambda t: (FAMILY_ORDER.get(t[1], 9), t[2], t[0]))
        st = style([(c, f) for c, f, _ in cfgs])
        clients = sorted({int(r["clients"]) for r in wr})
        fields = ["tps", "p99_latency_ms"]
        ylabels = ["tps (median, min–max)", "p99 latency, ms (median, min–max)"]
        if any(r.get("p95_latency_ms") for r in wr):
            fields.insert(1, "p95_latency_ms")
            ylabels.insert(1, "p95 latency, ms (median, min–max)")
        fig, axes = plt.subplots(1, len(fields), figsize=(6 * len(fields), 4.8))
        n = len(cfgs)
        for i, (cfg, fam, _) in enumerate(cfgs):
            # spread the markers a little so that the error bars do not hide each other
            shift = 1.0 + 0.025 * (i - (n - 1) / 2) if len(clients) > 1 else 1.0
            for ax, field in zip(axes, fields):
                xs, meds, lo, hi = [], [], [], []
                for c in clients:
                    vals = [float(r[field]) for r in wr
                            if r["config"] == cfg and int(r["clients"]) == c and r[field] not in ("", None)]
                    if not vals:
                        continue
                    m = statistics.median(vals)
                    xs.append(c * shift)
                    meds.append(m)
                    lo.append(m - min(vals))
                    hi.append(max(vals) - m)
                if not xs:
                    continue
                label = cfg if fam != "pgbouncer" else "PgBouncer, pool %s" % cfg.split("-")[-1]
                ax.errorbar(xs, meds, yerr=[lo, hi], capsize=3, markersize=5, label=label, **st[cfg])
        for ax, ylabel in zip(axes, ylabels):
            ax.set_xlabel("clients")
            ax.set_ylabel(ylabel)
            if len(clients) > 1:
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(FixedLocator(clients))
                ax.xaxis.set_minor_locator(NullLocator())
                ax.xaxis.set_major_formatter(ScalarFormatter())
            else:
                ax.set_xticks(clients)
            ax.grid(True, which="major", alpha=0.3)
        axes[0].set_ylim(bottom=0)
        for ax in axes[1:]:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: "%g" % v))
            ax.yaxis.set_minor_formatter(FuncFormatter(minor_label))
            for lab in ax.yaxis.get_minorticklabels():
                lab.set_fontsize(7)
        axes[0].legend(fontsize=8, loc="best")
        title = TITLES.get(w, w)
        if "%s" in title and w.startswith("sysbench"):
            title = title % (meta.get("sysbench_ps_mode") or {}).get("pgbouncer", "disable")
        elif "%s" in title:
            title = title % meta.get("pgbouncer_select_protocol", "simple")
        fig.suptitle(title + ("\n" + machine if machine else ""), fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, "%s.png" % w)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print("wrote %s" % path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot.py RESULTS_DIR")
    main(sys.argv[1])
