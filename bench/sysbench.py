"""The sysbench workloads: sysbench 1.0's bundled OLTP scripts with its
PostgreSQL driver, their tables, and reading sysbench's output.

Each transaction (sysbench's "event") of oltp_read_write is BEGIN, 10 point
selects, 4 range selects, 2 updates, a delete and an insert, COMMIT: 20
statements; oltp_read_only keeps the 14 selects. With --db-ps-mode=auto
sysbench prepares every statement on the server (PQprepare, then
PQexecPrepared: protocol-level named statements, as pgbench -M prepared);
with disable it sends the text of each one.

Figures come from sysbench's own reports. sysbench starts its clock once
every thread has connected and prepared its statements, so connecting is
never measured.
- tps: from its report every second (--report-interval=1), over the seconds
  after the warm-up W up to the run's end T. Its final report would also
  count the drain: the transactions still running at T finish afterwards, at
  a falling rate, for as long as the slowest of them still needs (seconds at
  1000 clients), which would charge a long tail twice.
- latency: --report-checkpoints=W dumps the statistics at W and resets every
  counter, the latency histogram included, so the final report's average and
  its histogram (--histogram), from which p50, p95 and p99 are read, cover
  every transaction that ended after W, those still running at T included:
  they are the slow ones, and leaving them out would hide the tail."""

import math
import re

SYSBENCH_WORKLOADS = {
    # name: (description, sysbench script)
    "sysbench-rw": ("sysbench oltp_read_write (20 statements per transaction)", "oltp_read_write"),
    "sysbench-ro": ("sysbench oltp_read_only (16 statements per transaction)", "oltp_read_only"),
}

# The sbtest tables the benchmark prepares when not told otherwise
# (bench.py --sysbench-tables, --sysbench-table-size; profile_cpu.py).
TABLES = 4
TABLE_SIZE = 100000

# sysbench 1.0's latency histogram (sb_logger.c): 1024 buckets on a log scale
# from 0.001 ms to 100 s, each about 1.8 % wider than the one before.
HIST_RE = re.compile(r"^\s*([\d.]+) \|\**\s+(\d+)\s*$", re.M)


def is_sysbench(workload):
    return workload in SYSBENCH_WORKLOADS


def common_args(host, port, user, db, tables, table_size):
    return ["--db-driver=pgsql", "--pgsql-host=%s" % host, "--pgsql-port=%d" % port,
            "--pgsql-user=%s" % user, "--pgsql-password=", "--pgsql-db=%s" % db,
            "--tables=%d" % tables, "--table-size=%d" % table_size]


def prepare_cmd(host, port, user, db, tables, table_size, threads):
    """Create and fill the sbtest tables (one thread per table, up to `threads`)."""
    return ["sysbench", "oltp_read_write"] + common_args(host, port, user, db, tables, table_size) + [
        "--threads=%d" % max(1, min(threads, tables)), "prepare"]


def cleanup_cmd(host, port, user, db, tables, table_size):
    """Drop the sbtest tables."""
    return ["sysbench", "oltp_read_write"] + common_args(host, port, user, db, tables, table_size) + ["cleanup"]


def run_cmd(workload, host, port, user, db, tables, table_size, threads, duration, warmup, ps_mode):
    """sysbench run: `duration` seconds of `threads` clients, statistics reset
    after `warmup` seconds (none when 0), a report every second for tps."""
    script = SYSBENCH_WORKLOADS[workload][1]
    cmd = ["sysbench", script] + common_args(host, port, user, db, tables, table_size) + [
        "--threads=%d" % threads, "--time=%d" % duration, "--db-ps-mode=%s" % ps_mode,
        "--percentile=95", "--histogram=on", "--report-interval=1",
        # Give up on a run that hangs this long past --time, with a report.
        "--forced-shutdown=120"]
    if warmup > 0:
        cmd.append("--report-checkpoints=%d" % warmup)
    cmd.append("run")
    return cmd


def _all(rx, out, conv=float):
    return [conv(m) for m in re.findall(rx, out, re.M)]


def hist_percentile(hist, q):
    """The q-th percentile (0..1) of sysbench's histogram [(ms, count)], as
    sysbench computes its own: the first bucket at which the running count
    reaches round(n * q)."""
    n = sum(c for _, c in hist)
    if not n:
        return None
    want = math.floor(n * q + 0.5)
    seen = 0
    for v, c in hist:
        seen += c
        if seen >= want:
            return v
    return hist[-1][0]


def per_second(out):
    """[(seconds since the start, tps)] from sysbench's intermediate reports
    ("[ 5s ] thds: 64 tps: 812.31 qps: ..."), in order."""
    return [(int(t), float(v)) for t, v in re.findall(r"^\[ *(\d+)s \] thds: \d+ tps: ([\d.]+)", out, re.M)]


def window_tps(series, start, end):
    """(tps, seconds, transactions) over the window (start, end]. A report
    covers the time since the one before: more than a second when the
    reporting thread was late, and then possibly across the window's start
    or end; only its part inside the window counts, at its rate."""
    prev, secs, xacts = 0, 0, 0.0
    for t, v in series:
        lo, hi = max(prev, start), min(t, end)
        if hi > lo:
            secs += hi - lo
            xacts += v * (hi - lo)
        prev = max(prev, t)
    return (xacts / secs if secs else None), secs, xacts


def parse_sysbench(out, warmup=0, duration=None):
    """Figures of one sysbench run of `duration` seconds measured after
    `warmup`. With a checkpoint, the last report covers the measured window
    and the earlier one the warm-up."""
    res = {}
    xacts = _all(r"^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)", out, lambda m: m)
    if not xacts:
        return res
    total_time = _all(r"^\s*total time:\s+([\d.]+)s", out)
    ignored = _all(r"^\s*ignored errors:\s+(\d+)", out, int)
    reconnects = _all(r"^\s*reconnects:\s+(\d+)", out, int)
    avg = _all(r"^\s*avg:\s+([\d.]+)", out)
    lat_sum = _all(r"^\s*sum:\s+([\d.]+)", out)
    p95 = _all(r"^\s*95th percentile:\s+([\d.]+)", out)
    mx = _all(r"^\s*max:\s+([\d.]+)", out)
    events = [int(n) for n, _ in xacts]
    series = per_second(out)
    tps, secs, in_window = window_tps(series, warmup, duration if duration else float("inf"))
    res["tps_final_report"] = float(xacts[-1][1])
    res["tps"] = round(tps, 3) if tps else res["tps_final_report"]
    res["window_s"] = secs
    res["window_xacts"] = round(in_window)
    res["xacts"] = sum(events)
    if avg:
        res["avg_latency_ms"] = avg[-1]
    if p95:
        res["sysbench_p95_ms"] = p95[-1]
    if mx:
        res["max_latency_ms"] = mx[-1]
    res["ignored_errors"] = sum(ignored)
    res["reconnects"] = sum(reconnects)
    if total_time:
        res["total_time_s"] = total_time[-1]
        res["tps_whole_run"] = round(sum(events) / total_time[-1], 3)
        if len(lat_sum) == len(events):
            res["avg_latency_whole_run_ms"] = round(sum(lat_sum) / sum(events), 3)
    # The histogram printed at the end covers the measured window only.
    hist = [(float(v), int(c)) for v, c in HIST_RE.findall(out.split("Latency histogram", 1)[-1])
            ] if "Latency histogram" in out else []
    res["hist"] = hist
    # The whole run in 5-second bins, warm-up included.
    res["tps_by_5s"] = [round(window_tps(series, b, b + 5)[0] or 0) for b in range(0, int(series[-1][0]) - 4, 5)
                        ] if series else []
    return res


if __name__ == "__main__":
    # For the shell scripts (bench/profile_pair.sh): the default tables, or
    # the prepare or cleanup command against the bench cluster (127.0.0.1,
    # role and database bench), one argument per line.
    #   python3 bench/sysbench.py defaults          -> "TABLES TABLE_SIZE"
    #   python3 bench/sysbench.py prepare PORT TABLES SIZE THREADS
    #   python3 bench/sysbench.py cleanup PORT TABLES SIZE
    import sys
    if sys.argv[1:] == ["defaults"]:
        print(TABLES, TABLE_SIZE)
        sys.exit(0)
    usage = "usage: sysbench.py defaults | prepare PORT TABLES SIZE THREADS | cleanup PORT TABLES SIZE"
    args = sys.argv[1:]
    wanted = {"prepare": 5, "cleanup": 4}
    if not args or wanted.get(args[0]) != len(args) or not all(a.isdigit() for a in args[1:]):
        sys.exit(usage)
    what, port, tables, size = args[0], int(args[1]), int(args[2]), int(args[3])
    if what == "prepare":
        cmd = prepare_cmd("127.0.0.1", port, "bench", "bench", tables, size, int(args[4]))
    else:
        cmd = cleanup_cmd("127.0.0.1", port, "bench", "bench", tables, size)
    print("\n".join(cmd))
