#!/usr/bin/env python3
"""The README's table "Where the build stands" from benchmark folders:
bench/status_table.py DIR [DIR ...]

Each DIR is a bench/run.sh results folder (results.csv). For every workload
and client count in them, one row: the medians over rounds of bare's tps,
the best PgBouncer pool's (the pool with the highest median tps there) and
the gate's (configuration `gatekeeper`), the gate's ratios to both, the
ratio of its median p95 latency to the best pool's, and the gate / bare
ratio of each round (rounds pair the runs of one round, which ran side by
side). Runs that failed are left out, as in report.py.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import load, median, num  # noqa: E402

NAMES = {
    "tpcb": "TPC-B",
    "sysbench-rw": "sysbench `oltp_read_write`",
    "sysbench-ro": "sysbench `oltp_read_only`",
    "wait": "wait-bound (5 ms in each transaction)",
    "select": "select-only",
    "slow": "slow client",
}


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else ""


def rows_of(dirs):
    for d in dirs:
        rows, _ = load(d)
        for r in rows:
            if r.get("status") == "ok" and r["workload"] != "overhead":
                yield r


def table(dirs):
    ok = list(rows_of(dirs))
    keys = list(dict.fromkeys((r["workload"], int(r["clients"])) for r in ok))

    def runs(w, c, cfg):
        return [r for r in ok if r["workload"] == w and int(r["clients"]) == c and r["config"] == cfg]

    def med(w, c, cfg, field="tps"):
        return median([num(r[field]) for r in runs(w, c, cfg)])

    out = ["| workload | clients | bare | best pool | gate | gate / bare | gate / best pool "
           "| p95, gate / best pool | gate / bare by round |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for w, c in keys:
        bare, gate = med(w, c, "bare"), med(w, c, "gatekeeper")
        pools = {r["config"] for r in ok if r["workload"] == w and int(r["clients"]) == c
                 and r["config"].startswith("pgbouncer")}
        best = max(((med(w, c, p), p) for p in pools), default=(None, None))
        by_round = []
        for g in sorted(runs(w, c, "gatekeeper"), key=lambda r: int(r["round"])):
            b = [x for x in runs(w, c, "bare") if x["round"] == g["round"]]
            if b:
                by_round.append(ratio(num(g["tps"]), num(b[0]["tps"])).rstrip("x"))
        p95 = ratio(med(w, c, "gatekeeper", "p95_latency_ms"), med(w, c, best[1], "p95_latency_ms")) \
            if best[1] else ""
        out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            NAMES.get(w, w), c,
            "%.0f" % bare if bare else "",
            "%.0f (%s)" % (best[0], best[1].replace("pgbouncer-", "")) if best[1] else "",
            "%.0f" % gate if gate else "",
            ratio(gate, bare), ratio(gate, best[0]), p95, ", ".join(by_round)))
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table(sys.argv[1:]))
