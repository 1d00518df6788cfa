#!/usr/bin/env python3
"""pg_gatekeeper benchmark runner: bare PostgreSQL vs PgBouncer vs pg_gatekeeper.

Normally started through bench/run.sh, which installs what is missing, builds
the release extension and raises the open-file limit. See bench/README.md.

One throw-away cluster serves every configuration. "bare" and the PgBouncer
configurations run on the server without the library in
shared_preload_libraries; the gatekeeper configurations restart it with the
library loaded. At each client count of each round every configuration runs
once on the same data (the server phase order alternates between groups, so
each group costs one restart, and for each client count between rounds).
"""

import argparse
import atexit
import datetime as dt
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys

import damon
from pgbench import WORKLOADS
from runner import IDLE_SLEEP_S
from schedule import Schedule
from sysbench import SYSBENCH_WORKLOADS, TABLE_SIZE as SYSBENCH_TABLE_SIZE, TABLES as SYSBENCH_TABLES
from util import HERE, cpu_list, log, parse_list, pick_port, pin_split


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="tpcb,select,slow",
                   help="comma list of %s (pgbench), %s (sysbench)" % (
                       ", ".join(WORKLOADS), ", ".join(SYSBENCH_WORKLOADS)))
    p.add_argument("--clients", default="8,64,256,512,1000", help="comma list of client counts")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=16, help="seconds per pgbench run")
    p.add_argument("--warmup", type=float, default=6,
                   help="seconds from each run's first completed transaction that are not measured: "
                        "tps, latency average and percentiles come from the per-transaction logs of "
                        "the rest of the run, up to its last transaction start (0: pgbench's own figures "
                        "for the whole run; --smoke uses 0)")
    p.add_argument("--warmup-per-client", type=float, default=8, metavar="MS",
                   help="milliseconds of warm-up added per client, to both the warm-up and the run's "
                        "duration, so that the measured window stays --duration minus --warmup long: "
                        "1000 clients are 1000 new backends, each loading its caches on its first "
                        "transactions (default 8: 8 s more at 1000 clients; 0 = none)")
    p.add_argument("--scale", type=int, default=10, help="pgbench -i scale")
    p.add_argument("--sysbench-tables", type=int, default=SYSBENCH_TABLES, help="sysbench --tables (prepared once per cluster)")
    p.add_argument("--sysbench-table-size", type=int, default=SYSBENCH_TABLE_SIZE, help="sysbench --table-size, rows per table")
    p.add_argument("--configs", default="bare,pgbouncer,gatekeeper",
                   help="comma list of configuration families: bare, pgbouncer, gatekeeper")
    p.add_argument("--pools", default="2xcpu,8,32", help="PgBouncer pool sizes ('2xcpu' = 2 x CPUs)")
    p.add_argument("--gk", action="append", default=[], metavar="NAME[:guc=val,...]",
                   help="gatekeeper configuration (repeatable), e.g. --gk gk-apc2:active_per_cpu=2; "
                        "GUC names without the pg_gatekeeper. prefix; default: one 'gatekeeper' with "
                        "the built-in defaults (automatic limit)")
    p.add_argument("--set", action="append", default=[], metavar="GUC=VALUE",
                   help="extra server setting for every configuration (repeatable)")
    p.add_argument("--damon", dest="damon_mode", choices=["leave", "stop"], default="leave",
                   help="DAMON, the kernel's data access monitor (bench/damon.py): leave it as it is "
                        "(default; the summary says what runs), or stop its kdamonds for the run and "
                        "start them again at exit")
    p.add_argument("--async", dest="async_commit", action="store_true",
                   help="synchronous_commit = off (the CPU-bound variant; the summary's Server line says so). "
                        "Default: PostgreSQL's durable commits")
    p.add_argument("--jobs", type=int, default=2, help="pgbench -j")
    p.add_argument("--idle-connections", type=int, default=0, metavar="N",
                   help="N more sessions connected straight to the server for every run, beside the "
                        "measured clients, that send nothing (what N live but idle backends cost, "
                        "whatever the configuration); on the client's CPUs")
    p.add_argument("--sampling-rate", type=float, default=1.0, help="pgbench --sampling-rate for the latency logs")
    p.add_argument("--pgbouncer-select-mode", default="simple", choices=["simple", "extended"],
                   help="protocol for select-only through PgBouncer (1.18 cannot pool -M prepared)")
    p.add_argument("--shared-buffers", default="256MB")
    p.add_argument("--no-huge-pages", dest="huge_pages", action="store_false",
                   help="do not reserve huge pages for the run (they are reserved by default and given back "
                        "at exit; --set huge_pages=... also leaves them alone)")
    p.add_argument("--port", type=int, default=25432)
    p.add_argument("--pgbouncer-port", type=int, default=26432)
    p.add_argument("--workdir", default="/var/tmp/pg_gatekeeper_bench", help="throw-away cluster lives here")
    p.add_argument("--out", help="results directory (default bench/results/<mode>-<timestamp>)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (cluster, logs)")
    p.add_argument("--run-timeout", type=int, default=180, help="seconds a pgbench run may exceed --duration")
    p.add_argument("--smoke", action="store_true",
                   help="CI smoke: 16 clients, 3 s, 1 round, scale 1 (sysbench: 10000 rows per table), "
                        "every configuration and workload; exits non-zero if any run failed")
    p.add_argument("--overhead", action="store_true",
                   help="measure backend CPU per statement, library loaded vs not, 1 client, nothing queued")
    p.add_argument("--overhead-rounds", type=int, default=5)
    p.add_argument("--overhead-duration", type=int, default=20)
    p.add_argument("--pin", nargs="?", const="auto", metavar="CLIENT:SERVER",
                   help="client on its own CPUs: the server (postmaster, so every backend and the worker) and "
                        "PgBouncer run on one set of CPUs, pgbench on the others (taskset). Alone: pgbench on "
                        "the first quarter of the CPUs (at least one), the server on the rest (on 2 CPUs: "
                        "pgbench on 0, the server on 1); or name both sets, e.g. --pin 0:1-3")
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    p.add_argument("--built-release", default="unknown", help=argparse.SUPPRESS)
    p.add_argument("--command-line", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.smoke:
        a.clients = "16"
        a.duration = 3
        a.warmup = 0
        a.warmup_per_client = 0
        a.rounds = 1
        a.scale = 1
        a.sysbench_table_size = 10000
        a.workloads = "tpcb,select,slow,sysbench-rw,sysbench-ro"
        a.configs = "bare,pgbouncer,gatekeeper"
    if a.warmup_per_client < 0:
        p.error("--warmup-per-client must be 0 or more")
    if a.warmup < 0 or (a.warmup > 0 and a.warmup > a.duration - 3):
        p.error("--warmup must be 0 or leave at least 3 s of --duration to measure")
    a.workloads = parse_list(a.workloads)
    for w in a.workloads:
        if w not in WORKLOADS and w not in SYSBENCH_WORKLOADS:
            p.error("unknown workload %r (%s)" % (w, ", ".join(list(WORKLOADS) + list(SYSBENCH_WORKLOADS))))
    if a.sysbench_tables < 1 or a.sysbench_table_size < 1:
        p.error("--sysbench-tables and --sysbench-table-size must be 1 or more")
    a.clients = parse_list(a.clients, int)
    a.configs = parse_list(a.configs)
    for c in a.configs:
        if c not in ("bare", "pgbouncer", "gatekeeper"):
            p.error("unknown configuration family %r" % c)
    a.pools = parse_list(a.pools)
    variants = []
    for spec in a.gk or ["gatekeeper"]:
        name, _, rest = spec.partition(":")
        gk = {}
        for kv in parse_list(rest):
            k, _, v = kv.partition("=")
            k = k.strip()
            gk[k if k.startswith("pg_gatekeeper.") else "pg_gatekeeper." + k] = v.strip()
        if not name.startswith("gatekeeper") and not name.startswith("gk"):
            name = "gk-" + name
        variants.append((name, gk))
    a.gk_variants = variants
    a.pin_mode = "pinned" if a.pin else "shared"
    a.client_cpus = a.server_cpus = None
    if a.pin:
        try:
            client, server = pin_split(a.pin, os.sched_getaffinity(0))
        except ValueError as e:
            p.error(str(e))
        a.client_cpus, a.server_cpus = cpu_list(client), cpu_list(server)
    a.mode = "smoke" if a.smoke else "overhead" if a.overhead else "run"
    if a.overhead:
        a.clients = [1]
    a.pgbouncer_prepared = False
    if not a.out:
        a.out = os.path.join(HERE, "results", "%s-%s" % (a.mode, dt.datetime.now().strftime("%Y%m%d-%H%M%S")))
    a.out = os.path.abspath(a.out)
    a.workdir = os.path.abspath(a.workdir)
    if a.command_line is None:
        a.command_line = " ".join([sys.argv[0]] + argv)
    # Results are committed: name the repository's own paths relative to it,
    # not as this machine's absolute paths.
    repo = os.path.dirname(HERE) + os.sep
    a.command_line = a.command_line.replace(repo, "")
    return a


def main(argv):
    a = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench.py must run as root (it starts servers with runuser -u postgres)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(a.clients) * 2 + a.idle_connections * 2 + 1000
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, 65536), hard), hard))
        except (ValueError, OSError):
            pass
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < want:
            sys.exit("open-file limit %d is too low for %d clients" % (
                resource.getrlimit(resource.RLIMIT_NOFILE)[0], max(a.clients)))
    if a.idle_connections < 0:
        sys.exit("--idle-connections must be 0 or more")
    if a.idle_connections and a.duration + a.warmup_per_client * max(a.clients) / 1000.0 > 1800:
        sys.exit("--idle-connections: runs of at most 1800 s (its sessions sleep %d s)" % IDLE_SLEEP_S)
    if a.pin and not shutil.which("taskset"):
        sys.exit("--pin needs taskset (util-linux)")
    if any(w in SYSBENCH_WORKLOADS for w in a.workloads) and not a.overhead and not shutil.which("sysbench"):
        sys.exit("the sysbench workloads need sysbench (bench/run.sh installs it: apt-get install sysbench)")
    a.port = pick_port(a.port)
    a.pgbouncer_port = pick_port(a.pgbouncer_port, avoid=(a.port,))
    # Only the PgBouncer configurations need it (bench/run.sh installs it).
    ver = subprocess.run(["pgbouncer", "--version"], stdout=subprocess.PIPE, text=True).stdout \
        if shutil.which("pgbouncer") else ""
    m = re.search(r"PgBouncer (\d+)\.(\d+)", ver)
    if m and (int(m.group(1)), int(m.group(2))) >= (1, 21):
        a.pgbouncer_prepared = True  # protocol-level prepared statements in transaction mode
    # A second run into the same folder would append its rows to the first
    # run's CSV (possibly under another header) and report both as one.
    if os.path.exists(os.path.join(a.out, "results.csv")):
        sys.exit("%s already holds results (results.csv): choose another --out, or remove it" % a.out)
    os.makedirs(a.out, exist_ok=True)

    r = Schedule(a)
    atexit.register(r.cleanup)
    # What runs before the run touches it, for the summary.
    a.damon = damon.describe()
    pause = damon.Pause()
    atexit.register(pause.restore)
    a.damon_stopped = a.damon_mode == "stop" and pause.stop()

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    # SIGINT too: a shell starts background jobs with SIGINT ignored, and
    # Python then never raises KeyboardInterrupt.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    rc = 0
    try:
        r.main()
    except KeyboardInterrupt as e:
        log("interrupted (%s); stopping servers" % (e or "SIGINT"))
        rc = 130
    except Exception as e:  # noqa: BLE001
        log("ERROR: %s" % e)
        r.failures.append("harness: %s" % e)
        rc = 2
    finally:
        r.cleanup()
        pause.restore()
        if r.failures and os.path.exists(r.cluster.logfile):
            shutil.copy(r.cluster.logfile, os.path.join(a.out, "postgres.log"))
        cores = glob.glob(os.path.join(a.workdir, "data", "core*"))
        if cores:
            log("core files: %s" % " ".join(cores))
        if r.failures and os.path.exists(a.workdir):
            log("kept the work directory for inspection: %s" % a.workdir)
        elif not a.keep and os.path.exists(a.workdir):
            shutil.rmtree(a.workdir, ignore_errors=True)

    if r.rows:
        for script in ("report.py", "plot.py"):
            res = subprocess.run([sys.executable, os.path.join(HERE, script), a.out])
            if res.returncode != 0:
                r.failures.append("%s failed" % script)
                rc = rc or 3
    log("results: %s" % a.out)
    if r.failures:
        log("FAILED runs (%d):" % len(r.failures))
        for f in r.failures:
            log("  " + f)
        rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))