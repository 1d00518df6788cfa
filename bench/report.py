#!/usr/bin/env python3
"""Markdown summary of a benchmark run: bench/report.py RESULTS_DIR

Reads RESULTS_DIR/results.csv (and meta.json when present) and writes
RESULTS_DIR/summary.md: machine and command, then per workload the median and
min-max over rounds of tps, average latency, p95 latency (runs that recorded
it) and p99 latency for every
configuration and client count, the ratios that the performance bar
speaks of, the bar itself (each line met or missed, from the medians of
this run, for the configuration named `gatekeeper`), and the overhead
measurement when the run has one.
"""

import csv
import json
import os
import re
import statistics
import sys

TITLES = {
    "tpcb": "TPC-B-like, simple protocol, loopback",
    "select": "Select-only (-S -M prepared), loopback",
    "slow": "Slow client (BEGIN; SELECT; \\sleep 1 ms; SELECT; \\sleep 1 ms; UPDATE; END)",
    "wait": "Wait-bound (BEGIN; SELECT pg_sleep(0.005), standing in for I/O; UPDATE one account; END)",
    "sysbench-rw": "sysbench oltp_read_write (20 statements per transaction)",
    "sysbench-ro": "sysbench oltp_read_only (16 statements per transaction)",
}
FAMILY_ORDER = {"bare": 0, "pgbouncer": 1, "gatekeeper": 2}


def sysbench_count_error(row):
    """Why a sysbench row's measured window cannot be right, or None. Its
    transactions, added up from sysbench's reports, cannot be more than the
    latency histogram holds: every transaction that ended after the
    warm-up, the drain included. Nor can its reports cover much more than
    the window. Rows written before the harness checked this (one committed
    row counted 28 s of reports for a 14 s window) are judged by it when
    read."""
    if not row.get("workload", "").startswith("sysbench"):
        return None
    window, logged = num(row.get("window_xacts")), num(row.get("logged_xacts"))
    if window is not None and logged and window > logged:
        return "sysbench's reports count %d transactions in the window, more than the %d it ran after the " \
            "warm-up" % (window, logged)
    got, dur, warm = num(row.get("window_s")), num(row.get("duration_s")), num(row.get("warmup_s")) or 0
    if got is not None and dur is not None and got - (dur - warm) > 1.5:
        return "sysbench's reports cover %g s of the %g s window" % (got, dur - warm)
    return None


def load(out):
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        why = sysbench_count_error(r) if r.get("status") == "ok" else None
        if why:
            r["status"], r["error"] = "failed", why
    meta = {}
    p = os.path.join(out, "meta.json")
    if os.path.exists(p):
        with open(p) as f:
            meta = json.load(f)
    return rows, meta


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, kind):
    if v is None:
        return "–"
    if kind == "tps":
        return "%.0f" % v
    if kind == "pct":
        return "%.1f" % v
    if kind == "ratio":
        return "%.2f" % v
    if abs(v) < 10:
        return "%.2f" % v
    if abs(v) < 100:
        return "%.1f" % v
    return "%.0f" % v


def cell(vals, kind):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt(med, kind)
    return "%s (%s–%s)" % (fmt(med, kind), fmt(min(vals), kind), fmt(max(vals), kind))


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def config_order(rows):
    seen = {}
    for r in rows:
        key = (FAMILY_ORDER.get(r["family"], 9), int(r["pool_size"] or 0), r["config"])
        seen[r["config"]] = key
    return [c for c, _ in sorted(seen.items(), key=lambda kv: kv[1])]


def window_range(rows):
    """': A–B s in this run', the shortest and longest measured window of the runs that succeeded."""
    w = [num(r.get("window_s")) for r in rows if r.get("status") == "ok"]
    w = [x for x in w if x is not None]
    if not w:
        return ""
    return ": %.1f–%.1f s in this run" % (min(w), max(w))


def client_tools(meta):
    """'pgbench', 'sysbench' or both, from the run's workloads."""
    ws = meta.get("workloads") or []
    tools = []
    if not ws or any(not w.startswith("sysbench") for w in ws):
        tools.append("pgbench")
    if any(w.startswith("sysbench") for w in ws):
        tools.append("sysbench")
    return ", ".join(tools)


def placement(meta):
    """Where the server, PgBouncer and the client ran (bench.py --pin)."""
    if meta.get("pin_mode") == "pinned":
        return ("pinned (`--pin`): the server (postmaster, backends, the gate's worker) and PgBouncer on "
                "CPU(s) %s, the client (%s) on CPU(s) %s, with `taskset`; the gate counts the server's CPUs" % (
                    meta.get("server_cpus"), client_tools(meta), meta.get("client_cpus")))
    return "shared: the server, PgBouncer and the client (%s) all on CPU(s) %s" % (client_tools(meta),
                                                                    meta.get("server_cpus") or "?")


def damon_note(meta):
    """The kernel's data access monitor during the run (bench/damon.py), when recorded."""
    if meta.get("damon") is None:
        return ""
    if meta.get("damon_stopped"):
        return "; DAMON: %s, **stopped for this run** (`--damon stop`)" % meta["damon"]
    return "; DAMON: %s" % meta["damon"]


def machine_lines(meta):
    """The Machine and Software lines of a run's header, from its meta.json."""
    return [
        "- **Machine:** %s CPUs (`nproc`), %s, %s GB RAM; %s, Linux %s%s" % (
            meta.get("nproc"), meta.get("cpu_model"), meta.get("memory_gb"), meta.get("os"), meta.get("kernel"),
            damon_note(meta)),
        "- **Software:** %s; %s; %s; pg_gatekeeper %s (%s)" % (
            meta.get("postgres"), meta.get("pgbouncer"), meta.get("pgbench"), meta.get("git"),
            meta.get("extension_build")),
    ]


def machine_block(meta, rows):
    lines = []
    if meta:
        lines += machine_lines(meta)
        lines.append("- **Command:** `%s`" % meta.get("command"))
        warm = meta.get("warmup_s") or 0
        only_sysbench = bool(meta.get("workloads")) and all(w.startswith("sysbench")
                                                             for w in meta.get("workloads"))
        if only_sysbench:
            lines.append("- **Run:** %s to %s; %s s per run, %s round(s), sysbench on the same machine, "
                         "clients connect over TCP to 127.0.0.1" % (
                             meta.get("started_at"), meta.get("finished_at", "?"), meta.get("duration_s"),
                             meta.get("rounds")))
        else:
            lines.append("- **Run:** %s to %s; pgbench scale %s, %s s per run, %s round(s), `-j %s`, "
                         "pgbench on the same machine, clients connect over TCP to 127.0.0.1" % (
                             meta.get("started_at"), meta.get("finished_at", "?"), meta.get("scale"),
                             meta.get("duration_s"), meta.get("rounds"), meta.get("jobs")))
        per_client = meta.get("warmup_per_client_ms") or 0
        if warm:
            if per_client:
                # The warm-up each run had, as bench.py recorded it per row.
                by_clients = {}
                for r in rows:
                    if r.get("warmup_s"):
                        by_clients.setdefault(int(r["clients"]), float(r["warmup_s"]))
                span = "%g s plus %g ms per client (%s)" % (warm, per_client, ", ".join(
                    "%d clients: %g s" % kv for kv in sorted(by_clients.items())))
                tail = "; each run lasts %g s plus the same per-client time" % (meta.get("duration_s") or 0)
            else:
                span, tail = "%g s" % warm, ""
            if only_sysbench:
                lines.append("- **Measured window:** each run's first %s after sysbench's clock starts (once "
                             "every thread has connected) are warm-up and not counted (every backend starts "
                             "cold); the rest of the run, %g s, is measured (the CSV's `window_s`%s)%s; the same "
                             "for every configuration. Whole-run figures are in the CSV (`tps_whole_run`)" % (
                                 span, (meta.get("duration_s") or 0) - warm, window_range(rows), tail))
            else:
                lines.append("- **Measured window:** each run's first %s after its first completed transaction "
                             "are warm-up and not counted (every backend starts cold: 1000 clients mean 1000 new "
                             "backends loading their caches). tps, average and p99 latency come from pgbench's "
                             "per-transaction logs of the rest of the run, at most %g s, less at many clients, "
                             "where connecting takes part of the run (the CSV's `window_s`%s)%s; "
                             "the same for every configuration. pgbench's whole-run figures are in the CSV "
                             "(`tps_whole_run`)" % (
                                 span, (meta.get("duration_s") or 0) - warm, window_range(rows), tail))
        if meta.get("sysbench"):
            ps = meta.get("sysbench_ps_mode") or {}
            lines.append("- **sysbench:** %s, its bundled `oltp_*` scripts with `--db-driver=pgsql`, %s tables of %s "
                         "rows (`prepare` once per cluster, as `bench`), `--threads` = clients, over TCP to "
                         "127.0.0.1. `--db-ps-mode=%s` for bare and the gate (server-side prepared statements), "
                         "`%s` through PgBouncer (the CSV's `ps_mode`). sysbench's clock starts once every thread "
                         "has connected. tps from its per-second reports (`--report-interval=1`) after the "
                         "warm-up up to the end of `--time`; the average, p95 and p99 from its final report and "
                         "latency histogram (`--histogram`) after `--report-checkpoints` at the warm-up, which "
                         "also count the transactions still running at the end" % (
                             meta["sysbench"], meta.get("sysbench_tables"), meta.get("sysbench_table_size"),
                             ps.get("bare", "auto"), ps.get("pgbouncer", "disable")))
        lines.append("- **CPUs:** " + placement(meta))
        ss = meta.get("server_settings", {})
        shown = {k: v for k, v in ss.items()
                 if k not in ("listen_addresses", "port", "unix_socket_directories", "logging_collector",
                              "log_line_prefix")}
        lines.append("- **Server:** %s; everything else default. One cluster; `bare` and PgBouncer run "
                     "without the library in `shared_preload_libraries`, gatekeeper restarts it with the library" %
                     ", ".join("`%s = %s`" % (k, v.strip("'")) for k, v in shown.items()))
        pools = meta.get("pgbouncer_pools")
        if pools and only_sysbench:
            lines.append("- **PgBouncer:** transaction pooling, pool sizes %s, server connections over the "
                         "Unix socket" % ", ".join(map(str, pools)))
        elif pools:
            lines.append("- **PgBouncer:** transaction pooling, pool sizes %s, server connections over the "
                         "Unix socket. Select-only through PgBouncer uses `-M %s`: PgBouncer before 1.21 "
                         "cannot pool protocol-level prepared statements in transaction mode" % (
                             ", ".join(map(str, pools)), meta.get("pgbouncer_select_protocol")))
        gkv = meta.get("gatekeeper_variants") or {}
        gk_rows = [r for r in rows if r["family"] == "gatekeeper" and r["gk_max_active"]]
        desc = []
        for name, settings in gkv.items():
            lim = sorted({r["gk_max_active"] for r in gk_rows if r["config"] == name})
            ceil = sorted({r["gk_ticket_ceiling"] for r in gk_rows if r["config"] == name})
            s = ", ".join("`%s = %s`" % kv for kv in settings.items()) or "defaults (automatic limit)"
            desc.append("`%s`: %s; max_active resolved to %s, ticket ceiling %s" % (
                name, s, "/".join(lim) or "?", "/".join(ceil) or "?"))
        if desc:
            lines.append("- **pg_gatekeeper:** " + "; ".join(desc))
        if meta.get("sampling_rate", 1.0) < 1.0:
            lines.append("- p99 from pgbench per-transaction logs sampled at %s" % meta["sampling_rate"])
        if meta.get("idle_connections"):
            lines.append("- **Idle sessions:** %d more, connected straight to the server (not through "
                         "PgBouncer) before each run's clients and sending nothing during it, in every "
                         "configuration (`--idle-connections`)" % meta["idle_connections"])
    return lines


def workload_section(w, rows):
    out = []
    wr = [r for r in rows if r["workload"] == w]
    ok = [r for r in wr if r["status"] == "ok"]
    cfgs = config_order(wr)
    clients = sorted({int(r["clients"]) for r in wr})
    failed = [r for r in wr if r["status"] != "ok"]
    out.append("### %s" % TITLES.get(w, w))
    out.append("")

    def grid(field, kind, title):
        out.append("%s, median (min–max) over rounds:" % title)
        out.append("")
        out.append("| clients | " + " | ".join(cfgs) + " |")
        out.append("|---:|" + "---:|" * len(cfgs))
        for c in clients:
            cells = []
            for cfg in cfgs:
                vals = [num(r[field]) for r in ok if int(r["clients"]) == c and r["config"] == cfg]
                nfail = sum(1 for r in failed if int(r["clients"]) == c and r["config"] == cfg)
                cells.append(cell(vals, kind) + (" (%d failed)" % nfail if nfail else ""))
            out.append("| %d | %s |" % (c, " | ".join(cells)))
        out.append("")

    grid("tps", "tps", "**tps**")
    grid("avg_latency_ms", "ms", "**Average latency, ms**")
    if any(r.get("p95_latency_ms") for r in ok):
        grid("p95_latency_ms", "ms", "**p95 latency, ms**")
    grid("p99_latency_ms", "ms", "**p99 latency, ms**")

    # comparisons of medians (what the bar speaks of); no verdicts
    pools = [c for c in cfgs if c.startswith("pgbouncer")]
    gks = [c for c in cfgs if any(r["family"] == "gatekeeper" and r["config"] == c for r in wr)]

    def med(c, cfg, field):
        return median([num(r[field]) for r in ok if int(r["clients"]) == c and r["config"] == cfg])

    bare_best = max([med(c, "bare", "tps") or 0 for c in clients] or [0]) or None
    for g in gks:
        out.append("**%s compared** (ratios of medians; best pool = the PgBouncer pool with the highest "
                   "median tps at that client count):" % g)
        out.append("")
        out.append("| clients | tps / bare | tps / best pool (pool) | tps / bare's best tps | "
                   "p99 / best pool's p99 (lower is better) | worker CPU, % of a core | tickets avg (max) | queued avg |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in clients:
            t = med(c, g, "tps")
            b = med(c, "bare", "tps")
            best = None
            for p in pools:
                v = med(c, p, "tps")
                if v is not None and (best is None or v > best[1]):
                    best = (p, v)
            r_bare = t / b if t and b else None
            r_pool = t / best[1] if t and best and best[1] else None
            r_peak = t / bare_best if t and bare_best else None
            p99 = med(c, g, "p99_latency_ms")
            p99_pool = med(c, best[0], "p99_latency_ms") if best else None
            r_p99 = p99 / p99_pool if p99 and p99_pool else None
            tick = med(c, g, "gk_tickets_avg")
            tick_max = med(c, g, "gk_tickets_max")
            out.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
                c, fmt(r_bare, "ratio"),
                "%s (%s)" % (fmt(r_pool, "ratio"), best[0].replace("pgbouncer-", "")) if best else "–",
                fmt(r_peak, "ratio"), fmt(r_p99, "ratio"),
                fmt(med(c, g, "worker_cpu_pct"), "pct"),
                "%s (%s)" % (fmt(tick, "pct"), fmt(tick_max, "tps")) if tick is not None else "–",
                fmt(med(c, g, "gk_queued_avg"), "pct")))
        out.append("")
    if pools:
        out.append("PgBouncer's own CPU, %% of a core (median): %s" % "; ".join(
            "%d clients: %s" % (c, ", ".join("%s %s" % (p.replace("pgbouncer-", "pool "),
                                                        fmt(med(c, p, "pgbouncer_cpu_pct"), "pct"))
                                             for p in pools)) for c in clients))
        out.append("")
    if any(r.get("ignored_errors") not in (None, "", "0") for r in ok):
        out.append("sysbench's ignored errors (deadlocks and unique violations, retried), median per run: %s" % "; ".join(
            "%d clients: %s" % (c, ", ".join("%s %s" % (cfg.replace("pgbouncer-", "pool "),
                                                        fmt(med(c, cfg, "ignored_errors"), "tps"))
                                             for cfg in cfgs)) for c in clients))
        out.append("")
    client = "sysbench" if any(r.get("tool") == "sysbench" for r in ok) else "pgbench"
    if any(r.get("client_cpu_pct") for r in ok):
        # The client shares the machine: what it burns, the server cannot use.
        out.append(client + "'s own CPU, %% of a core (µs per transaction), median: %s" % "; ".join(
            "%d clients: %s" % (c, ", ".join("%s %s (%s)" % (cfg.replace("pgbouncer-", "pool "),
                                                             fmt(med(c, cfg, "client_cpu_pct"), "pct"),
                                                             fmt(med(c, cfg, "client_cpu_us_per_xact"), "tps"))
                                             for cfg in cfgs)) for c in clients))
        out.append("")
    if failed:
        out.append("**%d failed run(s):** %s" % (len(failed), "; ".join(
            "%s %s c=%s r=%s: %s" % (r["workload"], r["config"], r["clients"], r["round"], r["error"])
            for r in failed)))
        out.append("")
    out.append("![%s](%s.png)" % (TITLES.get(w, w), w))
    out.append("")
    return out


def bar_section(rows, gk="gatekeeper"):
    """The performance bar, judged from this run's medians. Lines whose
    workload or client count the run lacks are left out."""
    ok = [r for r in rows if r["status"] == "ok"]

    def med(w, c, cfg, field="tps"):
        return median([num(r[field]) for r in ok
                       if r["workload"] == w and int(r["clients"]) == c and r["config"] == cfg])

    def clients(w):
        return sorted({int(r["clients"]) for r in ok if r["workload"] == w})

    def best_pool(w, c):
        best = None
        for p in {r["config"] for r in ok if r["family"] == "pgbouncer"}:
            v = med(w, c, p)
            if v is not None and (best is None or v > best[1]):
                best = (p, v)
        return best

    lines = []

    def add(text, ratios, need):
        """ratios: [(label, value or None)]; met when every value is >= need."""
        vals = [v for _, v in ratios]
        if not vals or any(v is None for v in vals):
            return
        shown = ", ".join("%s%s×" % ((l + " ") if l else "", fmt(v, "ratio")) for l, v in ratios)
        lines.append("| %s | %s | %s |" % (text, shown, "yes" if all(v >= need for v in vals) else "**no**"))

    def ratio(a, b):
        return a / b if a and b else None

    tc = clients("tpcb")
    if tc:
        add("TPC-B: ≥ PgBouncer's best pool at every client count",
            [("%d:" % c, ratio(med("tpcb", c, gk), (best_pool("tpcb", c) or (None, None))[1])) for c in tc], 1.0)
        add("TPC-B: ≥ 1.4× PgBouncer's best pool at 8 and 64 clients",
            [("%d:" % c, ratio(med("tpcb", c, gk), (best_pool("tpcb", c) or (None, None))[1]))
             for c in (8, 64) if c in tc], 1.4)
        if 1000 in tc:
            add("TPC-B: ≥ 2.0× bare at 1000 clients", [("", ratio(med("tpcb", 1000, gk), med("tpcb", 1000, "bare")))],
                2.0)
            peak = max([med("tpcb", c, "bare") or 0 for c in tc]) or None
            add("TPC-B: at 1000 clients ≥ 0.5× bare's best tps at any client count",
                [("", ratio(med("tpcb", 1000, gk), peak))], 0.5)
            bp = best_pool("tpcb", 1000)
            if bp:
                p99_pool = med("tpcb", 1000, bp[0], "p99_latency_ms")
                p99 = med("tpcb", 1000, gk, "p99_latency_ms")
                if p99 and p99_pool:
                    lines.append("| TPC-B: p99 latency at 1000 clients no worse than PgBouncer's best pool "
                                 "| %s ms vs %s ms (%s) | %s |" % (fmt(p99, "ms"), fmt(p99_pool, "ms"), bp[0],
                                                                   "yes" if p99 <= p99_pool else "**no**"))
        if 8 in tc:
            add("TPC-B: at 8 clients ≥ 0.97× bare", [("", ratio(med("tpcb", 8, gk), med("tpcb", 8, "bare")))], 0.97)
    sc = clients("slow")
    if sc:
        add("Slow client: ≥ 0.95× bare at every client count",
            [("%d:" % c, ratio(med("slow", c, gk), med("slow", c, "bare"))) for c in sc], 0.95)
        if 1000 in sc:
            add("Slow client at 1000: ≥ 1.3× PgBouncer's best pool",
                [("", ratio(med("slow", 1000, gk), (best_pool("slow", 1000) or (None, None))[1]))], 1.3)
            add("Slow client at 1000: ≥ 1.2× bare", [("", ratio(med("slow", 1000, gk), med("slow", 1000, "bare")))],
                1.2)
    if 8 in clients("select"):
        add("Select-only at 8 clients: ≥ 0.97× bare",
            [("", ratio(med("select", 8, gk), med("select", 8, "bare")))], 0.97)
    if not lines:
        return []
    out = ["### Against the bar, from this run's medians", "",
           "| bar | %s in this run | met |" % gk, "|---|---|---|"]
    return out + lines + [""]


def overhead_section(rows):
    orows = [r for r in rows if r["workload"] == "overhead"]
    if not orows:
        return []
    out = ["### Overhead with nothing queued (1 client, select-only, `-M prepared`)", ""]
    out.append("Backend CPU time per statement from `/proc/<backend pid>/schedstat`, over the middle of "
               "each run; the library not loaded (`bare`) against loaded and gating (`gatekeeper`), "
               "interleaved.")
    out.append("")
    out.append("| round | config | µs CPU per statement | statements in window | tps |")
    out.append("|---:|---|---:|---:|---:|")
    for r in orows:
        out.append("| %s | %s | %s | %s | %s |" % (r["round"], r["config"], r["backend_cpu_us_per_xact"] or "–",
                                                r["cpu_window_xacts"] or "–", fmt(num(r["tps"]), "tps")))
    out.append("")
    meds = {}
    for cfg in ("bare", "gatekeeper"):
        meds[cfg] = median([num(r["backend_cpu_us_per_xact"]) for r in orows
                            if r["config"] == cfg and r["status"] == "ok"])
    if meds["bare"] and meds["gatekeeper"]:
        rat = meds["gatekeeper"] / meds["bare"]
        out.append("Median: bare %.3f µs, gatekeeper %.3f µs per statement; ratio %.4f (%+.2f%%)." % (
            meds["bare"], meds["gatekeeper"], rat, (rat - 1) * 100))
        tb = median([num(r["tps"]) for r in orows if r["config"] == "bare" and r["status"] == "ok"])
        tg = median([num(r["tps"]) for r in orows if r["config"] == "gatekeeper" and r["status"] == "ok"])
        if tb and tg:
            out.append("Median tps: bare %.0f, gatekeeper %.0f (ratio %.4f)." % (tb, tg, tg / tb))
        out.append("")
    return out


def main(out):
    rows, meta = load(out)
    md = ["## Benchmark: bare PostgreSQL, PgBouncer and pg_gatekeeper", ""]
    md += machine_block(meta, rows)
    md.append("")
    md += bar_section(rows)
    workloads = []
    for r in rows:
        if r["workload"] != "overhead" and r["workload"] not in workloads:
            workloads.append(r["workload"])
    for w in workloads:
        md += workload_section(w, rows)
    md += overhead_section(rows)
    text = "\n".join(md).rstrip() + "\n"
    path = os.path.join(out, "summary.md")
    with open(path, "w") as f:
        f.write(text)
    print("wrote %s" % path)
    # The same with image links relative to the repository root, for the README.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rel = os.path.relpath(os.path.abspath(out), repo)
    if not rel.startswith(".."):
        path = os.path.join(out, "summary-readme.md")
        with open(path, "w") as f:
            f.write(re.sub(r"\]\(([\w.-]+\.png)\)", lambda m: "](%s/%s)" % (rel, m.group(1)), text))
        print("wrote %s" % path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report.py RESULTS_DIR")
    main(sys.argv[1])
