"""The workloads (pgbench arguments), and reading pgbench's output and
per-transaction logs."""

import glob
import os
import re

from util import HERE

WORKLOADS = {
    # name: (description, pgbench args, protocol; pgbouncer protocol decided later)
    "tpcb": ("TPC-B-like, simple protocol, loopback", [], "simple"),
    "select": ("select-only (-S), prepared protocol, loopback", ["-S"], "prepared"),
    "slow": ("slow client: BEGIN; SELECT; \\sleep 1 ms; SELECT; \\sleep 1 ms; UPDATE; END",
             ["-f", os.path.join(HERE, "slow_client.sql")], "simple"),
    # pg_sleep stands in for I/O: the data fits in memory many times over here.
    "wait": ("wait-bound: BEGIN; SELECT pg_sleep(0.005); UPDATE one account; END",
             ["-f", os.path.join(HERE, "wait_bound.sql")], "simple"),
}


# --------------------------------------------------------------------------
# pgbench

PGBENCH_RE = {
    "tps": re.compile(r"^tps = ([\d.]+)", re.M),
    "avg_latency_ms": re.compile(r"^latency average = ([\d.]+) ms", re.M),
    "xacts": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed_xacts": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "conn_time_ms": re.compile(r"^initial connection time = ([\d.]+) ms", re.M),
}


def parse_pgbench(out):
    res = {}
    for k, rx in PGBENCH_RE.items():
        m = rx.search(out)
        if m:
            res[k] = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    return res


def read_logs(prefix, window=None, warmup=0.0):
    """Read pgbench's per-transaction logs (and delete them).

    Returns (latencies in ms of the transactions that completed after the
    warm-up, sorted; failed count; transactions completed inside the optional
    (t0, t1) CPU window; (measured window start, end) as epoch seconds).

    The warm-up is counted from the first completed transaction: with
    hundreds of clients every backend is new at the start of a run, and its
    first transactions pay for loading the catalog caches, while every
    client's first transaction joins one burst. The window ends when the
    last transaction began: once the -T time is up pgbench starts no new
    transactions and those still queued drain out. Every configuration gets
    the same treatment."""
    rows, failed, in_window = [], 0, 0
    for fn in glob.glob(prefix + ".[0-9]*"):
        with open(fn) as f:
            for line in f:
                p = line.split()
                if len(p) < 6:
                    continue
                if p[2] in ("failed", "skipped"):
                    failed += 1
                    continue
                t = int(p[4]) + int(p[5]) / 1e6
                rows.append((t, int(p[2]) / 1000.0))
                if window is not None and window[0] <= t <= window[1]:
                    in_window += 1
        os.unlink(fn)
    if not rows:
        return [], failed, in_window, None, []
    first = min(t for t, _ in rows)
    last = max(t for t, _ in rows)
    start = first + warmup if warmup > 0 else first
    if warmup > 0:
        # The window ends when the last transaction began: after that pgbench
        # starts no new ones, and the clients still queued drain out.
        last = max(t - l / 1000.0 for t, l in rows)
        lats = sorted(l for t, l in rows if start <= t <= last)
    else:
        lats = sorted(l for _, l in rows)
    # completed transactions per second in 5-second bins (whole bins only), to show the warm-up
    bins = [0] * int((last - first) // 5)
    for t, _ in rows:
        i = int((t - first) // 5)
        if i < len(bins):
            bins[i] += 1
    return lats, failed, in_window, (start, last), [round(b / 5.0) for b in bins]

