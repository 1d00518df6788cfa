#!/usr/bin/env python3
"""pg_gatekeeper benchmark runner: bare PostgreSQL vs PgBouncer vs pg_gatekeeper.

Normally started through bench/run.sh, which installs what is missing, builds
the release extension and raises the open-file limit. See bench/README.md.

One throw-away cluster serves every configuration. "bare" and the PgBouncer
configurations run on the server without the library in
shared_preload_libraries; the gatekeeper configurations restart it with the
library loaded. At each client count of each round every configuration runs
once on the same data (the server phase order alternates between groups, so
each group costs one restart).
"""

import argparse
import atexit
import csv
import datetime as dt
import glob
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")

WORKLOADS = {
    # name: (description, pgbench args, protocol; pgbouncer protocol decided later)
    "tpcb": ("TPC-B-like, simple protocol, loopback", [], "simple"),
    "select": ("select-only (-S), prepared protocol, loopback", ["-S"], "prepared"),
    "slow": ("slow client: BEGIN; SELECT; \\sleep 1 ms; SELECT; \\sleep 1 ms; UPDATE; END",
             ["-f", os.path.join(HERE, "slow_client.sql")], "simple"),
}

CSV_FIELDS = [
    "started_at", "workload", "config", "family", "pool_size", "clients", "round",
    "duration_s", "protocol", "status", "error",
    "tps", "avg_latency_ms", "p50_latency_ms", "p99_latency_ms", "max_latency_ms",
    "warmup_s", "window_s", "window_xacts", "tps_whole_run", "avg_latency_whole_run_ms", "tps_by_5s",
    "xacts", "failed_xacts", "logged_xacts", "conn_time_ms", "wall_s",
    "worker_cpu_ms", "worker_cpu_pct", "pgbouncer_cpu_ms", "pgbouncer_cpu_pct",
    "client_cpu_ms", "client_cpu_pct", "client_cpu_us_per_xact",
    "gk_max_active", "gk_ticket_ceiling", "gk_tickets_end", "gk_tickets_avg", "gk_tickets_max",
    "gk_running_avg", "gk_queued_avg", "gk_queued_max", "gk_admitted", "gk_waited",
    "gk_overflow", "gk_timeouts", "gk_wait_p99_ms", "gk_settings",
    "backend_cpu_us_per_xact", "cpu_window_xacts",
]


def log(msg=""):
    print(msg, flush=True)


def fmt_hms(sec):
    sec = max(0, int(sec))
    return "%d:%02d:%02d" % (sec // 3600, sec // 60 % 60, sec % 60)


def parse_list(s, conv=str):
    return [conv(x.strip()) for x in s.split(",") if x.strip()]


# --------------------------------------------------------------------------
# process helpers

def as_postgres(cmd):
    """Servers refuse root and must not see RUST_BACKTRACE."""
    return ["runuser", "-u", "postgres", "--", "env", "-u", "RUST_BACKTRACE"] + cmd


def clean_env():
    env = dict(os.environ)
    env.pop("RUST_BACKTRACE", None)
    for k in list(env):
        if k.startswith("PG") and k not in ("PGTZ",):
            env.pop(k)  # no stray PGHOST/PGPORT/PGOPTIONS from the caller
    return env


def run(cmd, check=True, capture=True, timeout=None, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None,
                       text=True, timeout=timeout, env=clean_env(), **kw)
    if check and r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout or ""))
    return r


def proc_cpu_ns(pid):
    """CPU time of a process (all its threads), ns; None if it is gone."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def open_files_limit(pid):
    """The soft RLIMIT_NOFILE of a running process, or None."""
    try:
        with open("/proc/%d/limits" % pid) as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As PostgreSQL and PgBouncer bind: connections that they accepted in
        # an earlier run and that linger in TIME_WAIT do not keep the port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def ephemeral_ports():
    """The kernel's range for the local ports of outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def pick_port(start, avoid=()):
    """A free listening port at or above `start`, outside the ephemeral range.
    pgbench's 1000 connections take 1000 ephemeral ports on 127.0.0.1, and
    each stays taken for a minute in TIME_WAIT after pgbench exits: a
    listening port inside that range is, now and then, one of them, and
    PgBouncer (or PostgreSQL) then fails to start with "Address already in
    use". One full run lost six PgBouncer runs that way."""
    lo, hi = ephemeral_ports()
    p = start
    while lo <= p <= hi or not port_free(p) or p in avoid:
        p = hi + 1 if lo <= p <= hi else p + 1
        if p > 65535:
            raise RuntimeError("no free port at or above %d outside the ephemeral range %d-%d" % (start, lo, hi))
    if p != start:
        log("port %d is taken or in the ephemeral range %d-%d: using %d" % (start, lo, hi, p))
    return p


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


# --------------------------------------------------------------------------
# the cluster

class HugePages:
    """Reserves huge pages for the benchmark's server and gives them back.

    With 1000 connections, every backend maps the shared memory with its own
    page tables. With 4 kB pages each backend faults in every shared page it
    touches, and the kernel's page reclaim and monitoring walk 1000 mappings
    per page. PostgreSQL's documentation recommends huge pages for this; the
    benchmark reserves them (vm.nr_hugepages) for its run, for every
    configuration alike, and restores the previous value at exit."""

    PATH = "/proc/sys/vm/nr_hugepages"

    def __init__(self):
        self.restore_to = None

    @staticmethod
    def meminfo(key):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0

    def reserve(self, cluster):
        """Returns the huge_pages setting to use: 'on' when reserved, else 'try'."""
        need = cluster.huge_pages_needed()
        if not need:
            log("huge pages: could not size the shared memory; huge_pages = try")
            return "try"
        need = need + need // 10 + 8  # margin: the segment grows a little with settings
        try:
            with open(self.PATH) as f:
                old = int(f.read())
            free = self.meminfo("HugePages_Free")
            if free < need:
                with open(self.PATH, "w") as f:
                    f.write(str(old + need - free))
                self.restore_to = old
            if self.meminfo("HugePages_Free") < need:
                log("huge pages: only %d of %d could be reserved; huge_pages = try"
                    % (self.meminfo("HugePages_Free"), need))
                self.release()
                return "try"
        except OSError as e:
            log("huge pages: cannot reserve (%s); huge_pages = try" % e)
            return "try"
        log("huge pages: %d reserved (vm.nr_hugepages %s)" % (
            need, "unchanged" if self.restore_to is None else "%d -> %d, restored at exit" % (
                self.restore_to, self.restore_to + need)))
        return "on"

    def release(self):
        if self.restore_to is not None:
            try:
                with open(self.PATH, "w") as f:
                    f.write(str(self.restore_to))
            except OSError as e:
                log("huge pages: could not restore vm.nr_hugepages to %d: %s" % (self.restore_to, e))
            self.restore_to = None


class Cluster:
    def __init__(self, args):
        self.a = args
        self.bin = args.pg_bin
        self.work = args.workdir
        self.data = os.path.join(self.work, "data")
        self.sock = os.path.join(self.work, "sock")
        self.logfile = os.path.join(self.work, "postgres.log")
        self.port = args.port
        self.running = False
        self.loaded = None  # gk settings dict when the library is loaded, None when bare
        self.ext_created = False
        self.have_data = False
        self.huge_pages = HugePages()

    def init(self, max_clients):
        if os.path.exists(self.work):
            self.stop_stale()
            shutil.rmtree(self.work)
        os.makedirs(self.sock)
        os.makedirs(os.path.join(self.work, "runs"))
        shutil.chown(self.work, "postgres", "postgres")
        shutil.chown(self.sock, "postgres", "postgres")
        os.chmod(self.work, 0o755)
        os.chmod(os.path.join(self.work, "runs"), 0o777)
        run(as_postgres([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                         "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]))
        self.settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "'%s'" % self.sock,
            "max_connections": str(max(1100, max_clients + 100)),
            "shared_buffers": "'%s'" % self.a.shared_buffers,
            "max_wal_size": "'4GB'",
            "checkpoint_timeout": "'30min'",
            # The gate exists for CPU contention. With synchronous_commit on,
            # each commit waits for this VM's disk flush, the CPUs idle at low
            # client counts, and the comparison measures the disk instead.
            "synchronous_commit": "off",
            "logging_collector": "off",
            "log_line_prefix": "'%m [%p] '",
        }
        for kv in self.a.set:
            k, v = kv.split("=", 1)
            self.settings[k.strip()] = v.strip()
        self.write_settings()
        if self.a.huge_pages and "huge_pages" not in self.settings:
            self.settings["huge_pages"] = self.huge_pages.reserve(self)
            self.write_settings()

    def write_settings(self):
        conf = os.path.join(self.data, "postgresql.conf")
        with open(conf) as f:
            base = f.read().split("\n# pg_gatekeeper bench\n")[0]
        with open(conf, "w") as f:
            f.write(base + "\n# pg_gatekeeper bench\n")
            for k, v in self.settings.items():
                f.write("%s = %s\n" % (k, v))
            f.write("include_if_exists = 'bench_config.conf'\n")

    def huge_pages_needed(self):
        """Huge pages the server's shared memory needs (PostgreSQL 15's
        shared_memory_size_in_huge_pages), with the library loaded: its
        segment makes the larger of the two configurations."""
        r = run(as_postgres([os.path.join(self.bin, "postgres"), "-D", self.data,
                             "-c", "shared_preload_libraries=pg_gatekeeper",
                             "-C", "shared_memory_size_in_huge_pages"]), check=False)
        try:
            return int(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None

    def log_size(self):
        try:
            return os.path.getsize(self.logfile)
        except OSError:
            return 0

    def log_since(self, off):
        try:
            with open(self.logfile, errors="replace") as f:
                f.seek(off)
                return f.read()
        except OSError:
            return ""

    def crash_lines(self, off):
        pat = re.compile(r"terminated by signal|was terminated by exception|exited with exit code [^01]|PANIC:")
        return [ln.strip() for ln in self.log_since(off).splitlines() if pat.search(ln)]

    def recover(self):
        """After a crash or a harness error: stop hard, so that the next run starts clean."""
        log("    restarting the server after a failure")
        run(as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate",
                         "-w", "-t", "60", "stop"]), check=False)
        self.running = False

    def stop_stale(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            run(as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate",
                             "-w", "stop"]), check=False)

    def start(self, gk=None):
        """Start bare (gk is None) or with the library and the given settings."""
        if self.running and self.loaded == gk:
            return False
        if self.running:
            self.stop()
        path = os.path.join(self.data, "bench_config.conf")
        with open(path, "w") as f:
            if gk is not None:
                f.write("shared_preload_libraries = 'pg_gatekeeper'\n")
                for k, v in gk.items():
                    f.write("%s = '%s'\n" % (k, v))
        shutil.chown(path, "postgres", "postgres")
        run(as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l", self.logfile,
                         "-w", "-t", "120", "start"]))
        self.running = True
        self.loaded = gk
        if gk is not None:
            if not self.ext_created:
                self.sql("CREATE EXTENSION IF NOT EXISTS pg_gatekeeper")
                self.ext_created = True
            for _ in range(100):
                if self.worker_pid():
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("the pg_gatekeeper worker did not start; see %s" % self.logfile)
        if self.have_data:
            self.prewarm()
        return True

    def stop(self):
        if self.running:
            r = run(as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast",
                                 "-w", "-t", "30", "stop"]), check=False)
            if r.returncode != 0:
                log("    fast shutdown did not finish in 30 s; immediate shutdown")
                run(as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate",
                                 "-w", "-t", "60", "stop"]), check=False)
            self.running = False

    def sql(self, query, db="bench", user="postgres", check=True):
        r = run([os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t", "-F", "\t",
                 "-v", "ON_ERROR_STOP=1", "-h", self.sock, "-p", str(self.port),
                 "-U", user, "-d", db, "-c", query], check=check, timeout=600)
        return r.stdout.strip()

    def sql_row(self, query):
        out = self.sql(query)
        return out.split("\n")[0].split("\t") if out else []

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def worker_pid(self):
        """The worker has no database connection, so it is not in
        pg_stat_activity: find the postmaster's child by its process title."""
        pm = self.postmaster_pid()
        if pm is None:
            return None
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid != pm:
                    continue
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if b"pg_gatekeeper worker" in f.read():
                        return int(d)
            except (OSError, ValueError, IndexError):
                continue
        return None

    def load_data(self, scale):
        self.sql("CREATE ROLE bench LOGIN", db="postgres")
        self.sql("CREATE DATABASE bench OWNER bench", db="postgres")
        self.sql("CREATE EXTENSION pg_prewarm")
        run([os.path.join(self.bin, "pgbench"), "-i", "-q", "-s", str(scale),
             "-h", self.sock, "-p", str(self.port), "-U", "bench", "bench"], timeout=3600)
        self.sql("VACUUM ANALYZE")
        self.sql("CHECKPOINT")
        self.have_data = True

    def prewarm(self):
        self.sql("SELECT sum(pg_prewarm(c)) FROM unnest(ARRAY['pgbench_accounts', 'pgbench_accounts_pkey', "
                 "'pgbench_branches', 'pgbench_branches_pkey', 'pgbench_tellers', 'pgbench_tellers_pkey', "
                 "'pgbench_history']::regclass[]) c")

    def before_run(self):
        # What pgbench itself does before a run (we pass -n), plus a checkpoint
        # so that no configuration pays for another one's dirty buffers.
        self.sql("TRUNCATE pgbench_history")
        self.sql("VACUUM pgbench_branches, pgbench_tellers, pgbench_accounts")
        self.sql("CHECKPOINT")


# --------------------------------------------------------------------------
# PgBouncer

class Bouncer:
    def __init__(self, args, cluster, pool, max_clients):
        self.a = args
        self.pool = pool
        self.port = args.pgbouncer_port
        d = os.path.join(args.workdir, "pgbouncer-%d" % pool)
        os.makedirs(d, exist_ok=True)
        shutil.chown(d, "postgres", "postgres")
        self.dir = d
        self.ini = os.path.join(d, "pgbouncer.ini")
        self.pidfile = os.path.join(d, "pgbouncer.pid")
        self.logfile = os.path.join(d, "pgbouncer.log")
        with open(os.path.join(d, "userlist.txt"), "w") as f:
            f.write('"bench" ""\n"postgres" ""\n')
        extra = ""
        if args.pgbouncer_prepared:
            extra = "max_prepared_statements = 200\n"
        with open(self.ini, "w") as f:
            f.write(f"""[databases]
bench = host={cluster.sock} port={cluster.port} dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {d}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = {max_clients + 100}
max_db_connections = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
logfile = {self.logfile}
pidfile = {self.pidfile}
{extra}""")
        for fn in os.listdir(d):
            shutil.chown(os.path.join(d, fn), "postgres", "postgres")
        # One descriptor per client and per server connection, and some to
        # spare (what PgBouncer logs as "max expected fd use").
        self.nofile = max_clients + 100 + pool + 100
        self.proc = None
        self.pid = None

    def start(self):
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        # runuser's PAM session sets the soft open-file limit back to 1024,
        # and PgBouncer does not raise it: with 1000 clients a pool of 32
        # then ran out of descriptors for its server connections ("sbuf_connect
        # failed: Too many open files") and worked with about 20 of them.
        self.proc = subprocess.Popen(as_postgres(["prlimit", "--nofile=%d:" % self.nofile,
                                                  "pgbouncer", self.ini]), env=clean_env(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while not self._listening():
            if self.proc.poll() is not None:
                raise RuntimeError("pgbouncer exited at start (rc %s); see %s" % (self.proc.returncode, self.logfile))
            if time.time() > deadline:
                raise RuntimeError("pgbouncer did not start listening; see %s" % self.logfile)
            time.sleep(0.05)
        soft = open_files_limit(self.pid)
        if soft is not None and soft < self.nofile:
            raise RuntimeError("pgbouncer's open-file limit is %d, below the %d it needs for "
                               "these clients" % (soft, self.nofile))

    def _listening(self):
        """Whether PgBouncer has written its pid file and accepts connections."""
        if self.pid is None and os.path.exists(self.pidfile):
            try:
                with open(self.pidfile) as f:
                    self.pid = int(f.read().strip())
            except ValueError:
                pass
        if self.pid is None:
            return False
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", self.port))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def stop(self):
        if self.proc is None:
            return
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            if self.pid:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
        self.proc = None
        self.pid = None


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


class Runner:
    def __init__(self, args):
        self.a = args
        self.cluster = Cluster(args)
        self.bouncer = None
        self.pgbench = None
        self.rows = []
        self.failures = []
        self.csv_path = os.path.join(args.out, "results.csv")
        self.ncpu = len(os.sched_getaffinity(0))
        self.run_seq = 0
        self.sample_note = ""

    # -- cleanup ------------------------------------------------------------
    def cleanup(self):
        if self.pgbench is not None and self.pgbench.poll() is None:
            self.pgbench.kill()
            self.pgbench.wait()
        if self.bouncer is not None:
            self.bouncer.stop()
            self.bouncer = None
        try:
            self.cluster.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log("cleanup: %s" % e)
        self.cluster.stop_stale()
        self.cluster.huge_pages.release()

    # -- configurations -------------------------------------------------------
    def configs(self):
        fams = set(self.a.configs)
        out = []
        if "bare" in fams:
            out.append({"name": "bare", "family": "bare", "pool": None, "gk": None})
        if "pgbouncer" in fams:
            for p in self.pools():
                out.append({"name": "pgbouncer-%d" % p, "family": "pgbouncer", "pool": p, "gk": None})
        if "gatekeeper" in fams:
            for name, gk in self.a.gk_variants:
                out.append({"name": name, "family": "gatekeeper", "pool": None, "gk": gk})
        return out

    def pools(self):
        seen = []
        for p in self.a.pools:
            v = 2 * self.ncpu if p == "2xcpu" else int(p)
            if v not in seen:
                seen.append(v)
        return seen

    # -- one pgbench run ----------------------------------------------------------
    def extra_warmup(self, clients):
        """Seconds of warm-up added for `clients` (--warmup-per-client), and
        added to the run's duration, so that the measured window keeps its
        length: every client is a new backend that must load its caches."""
        if self.a.warmup <= 0:
            return 0
        return int(round(self.a.warmup_per_client * clients / 1000.0))

    def pgbench_cmd(self, workload, cfg, clients, duration, prefix, sampling=None):
        _desc, wargs, proto = WORKLOADS[workload]
        if cfg["family"] == "pgbouncer":
            port = self.a.pgbouncer_port
            if proto == "prepared" and not self.a.pgbouncer_prepared:
                proto = self.a.pgbouncer_select_mode
        else:
            port = self.cluster.port
        cmd = [os.path.join(self.a.pg_bin, "pgbench"), "-h", "127.0.0.1", "-p", str(port),
               "-U", "bench", "-n", "-c", str(clients), "-j", str(min(self.a.jobs, clients)),
               "-T", str(duration), "-M", proto, "-l", "--log-prefix", prefix]
        if sampling is not None and sampling < 1.0:
            cmd += ["--sampling-rate", str(sampling)]
        cmd += wargs
        if workload == "slow":
            cmd += ["-s", str(self.a.scale)]
        cmd.append("bench")
        return cmd, proto

    def one_run(self, workload, cfg, clients, rnd, duration=None, cpu_window_backend=False, label=None):
        """One pgbench run; returns its CSV row. A failure of any kind (pgbench
        error, server crash, harness error) fails the run, not the benchmark:
        the server is restarted cleanly for the next run."""
        a = self.a
        if duration is None:
            duration = a.duration + self.extra_warmup(clients)
        self.run_seq += 1
        rid = "%04d-%s-%s-c%d-r%d" % (self.run_seq, workload, cfg["name"], clients, rnd)
        prefix = os.path.join(a.workdir, "runs", rid)
        row = {k: "" for k in CSV_FIELDS}
        row.update(started_at=dt.datetime.now().isoformat(timespec="seconds"), workload=label or workload,
                   config=cfg["name"], family=cfg["family"], pool_size=cfg["pool"] or "",
                   clients=clients, round=rnd, duration_s=duration, status="ok",
                   gk_settings=";".join("%s=%s" % kv for kv in (cfg["gk"] or {}).items()))
        log_off = self.cluster.log_size()
        errs, out, cmd = [], "", []
        try:
            errs, out, cmd = self._one_run(row, workload, cfg, clients, duration, prefix, cpu_window_backend)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - becomes a failed run
            errs.append("harness: %s" % str(e).strip().replace("\n", " ")[:300])
        if self.pgbench is not None:
            if self.pgbench.poll() is None:
                self.pgbench.kill()
            self.pgbench.wait()
            self.pgbench = None
        if self.bouncer is not None:
            self.bouncer.stop()
            self.bouncer = None
        crashes = self.cluster.crash_lines(log_off)
        if crashes:
            errs.insert(0, "SERVER CRASH: " + " | ".join(crashes)[:400])
        if errs:
            row["status"] = "failed"
            row["error"] = "; ".join(dict.fromkeys(errs))
            with open(os.path.join(a.out, "failed-%s.txt" % rid), "w") as f:
                f.write(" ".join(cmd) + "\n\n" + row["error"] + "\n\n" + out + "\n\nserver log:\n"
                        + self.cluster.log_since(log_off)[-20000:])
            self.failures.append(rid + ": " + row["error"])
            if crashes or any(e.startswith("harness") for e in errs):
                self.cluster.recover()
        for fn in glob.glob(prefix + "*"):
            os.unlink(fn)
        self.write_row(row)
        return row

    def _one_run(self, row, workload, cfg, clients, duration, prefix, cpu_window_backend):
        a = self.a
        c = self.cluster
        c.start(cfg["gk"])
        c.before_run()
        gk = cfg["family"] == "gatekeeper"
        wpid = None
        if gk:
            c.sql("SELECT gatekeeper.reset()")
            wpid = c.worker_pid()
        if cfg["family"] == "pgbouncer":
            self.bouncer = Bouncer(a, c, cfg["pool"], clients)
            self.bouncer.start()
        cmd, proto = self.pgbench_cmd(workload, cfg, clients, duration, prefix,
                                      None if cpu_window_backend else a.sampling_rate)
        row["protocol"] = proto
        w0 = proc_cpu_ns(wpid) if wpid else None
        b0 = proc_cpu_ns(self.bouncer.pid) if self.bouncer else None
        t0 = time.time()
        # pgbench runs on the same machine: its CPU time (user + system, from
        # the children's rusage once it has been waited for) is CPU the server
        # cannot have, whichever configuration serves it.
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        outf = open(prefix + ".out", "w")
        self.pgbench = subprocess.Popen(cmd, stdout=outf, stderr=subprocess.STDOUT, env=clean_env())
        window = None
        backend_cpu = None
        try:
            if cpu_window_backend:
                window, backend_cpu = self.sample_backend(duration, t0)
            self.pgbench.wait(timeout=duration + a.run_timeout)
        except subprocess.TimeoutExpired:
            self.pgbench.send_signal(signal.SIGINT)
            try:
                self.pgbench.wait(10)
            except subprocess.TimeoutExpired:
                self.pgbench.kill()
                self.pgbench.wait()
            row["error"] = "pgbench timed out"
        t1 = time.time()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        outf.close()
        rc = self.pgbench.returncode
        self.pgbench = None
        w1 = proc_cpu_ns(wpid) if wpid else None
        b1 = proc_cpu_ns(self.bouncer.pid) if self.bouncer else None
        wall = t1 - t0
        row["wall_s"] = round(wall, 2)
        if w0 is not None and w1 is not None:
            row["worker_cpu_ms"] = round((w1 - w0) / 1e6, 1)
            row["worker_cpu_pct"] = round((w1 - w0) / 1e9 / wall * 100, 2)
        elif gk:
            row["error"] = (row["error"] + "; " if row["error"] else "") + "worker pid vanished"
        if b0 is not None and b1 is not None:
            row["pgbouncer_cpu_ms"] = round((b1 - b0) / 1e6, 1)
            row["pgbouncer_cpu_pct"] = round((b1 - b0) / 1e9 / wall * 100, 2)
        if not cpu_window_backend:
            # (The backend sampling runs psql, whose CPU would be counted too.)
            client = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
            row["client_cpu_ms"] = round(client * 1000, 1)
            row["client_cpu_pct"] = round(client / wall * 100, 2)
        if self.bouncer:
            self.bouncer.stop()
            self.bouncer = None

        out = open(prefix + ".out").read()
        res = parse_pgbench(out)
        row.update({k: v for k, v in res.items()})
        if row.get("client_cpu_ms") and row.get("xacts"):
            row["client_cpu_us_per_xact"] = round(float(row["client_cpu_ms"]) * 1000 / int(row["xacts"]), 1)
        warm = 0.0 if cpu_window_backend else float(a.warmup) + self.extra_warmup(clients)
        lats, _failed, in_window, span, series = read_logs(prefix, window, warm)
        row["warmup_s"] = warm
        rate = a.sampling_rate if a.sampling_rate < 1.0 and not cpu_window_backend else 1.0
        row["tps_by_5s"] = ";".join(str(round(b / rate)) for b in series)
        if warm > 0:
            # tps and the average over the measured window; pgbench's whole-run
            # figures stay in the CSV for reference.
            row["tps_whole_run"] = row.get("tps", "")
            row["avg_latency_whole_run_ms"] = row.get("avg_latency_ms", "")
            row["tps"] = ""
            row["avg_latency_ms"] = ""
            if lats and span and span[1] - span[0] >= 1.0:
                w = span[1] - span[0]
                row["window_s"] = round(w, 2)
                row["window_xacts"] = len(lats)
                row["tps"] = round(len(lats) / rate / w, 3)
                row["avg_latency_ms"] = round(sum(lats) / len(lats), 3)
        if lats:
            row["p50_latency_ms"] = round(percentile(lats, 0.50), 3)
            row["p99_latency_ms"] = round(percentile(lats, 0.99), 3)
            row["max_latency_ms"] = round(lats[-1], 3)
        row["logged_xacts"] = len(lats)
        if cpu_window_backend and backend_cpu is not None and in_window > 0:
            row["backend_cpu_us_per_xact"] = round(backend_cpu / 1000.0 / in_window, 3)
            row["cpu_window_xacts"] = in_window
        if gk:
            try:
                self.gk_stats(row, t0, t1)
            except RuntimeError as e:
                row["error"] = (row["error"] + "; " if row["error"] else "") + \
                    "gatekeeper views: " + str(e).strip().splitlines()[-1][:200]

        # judge the run (correctness only, never performance)
        errs = [row.pop("error")] if row["error"] else []
        row["error"] = ""
        if rc != 0:
            errs.append("pgbench exit code %d" % rc)
        if not res.get("tps") or not row.get("tps"):
            errs.append("zero or missing tps" + (" in the measured window (is --warmup shorter than "
                                                  "--duration?)" if res.get("tps") else ""))
        if res.get("failed_xacts"):
            errs.append("%d failed transactions" % res["failed_xacts"])
        for line in out.splitlines():
            if line.startswith("pgbench: error") or "aborted" in line:
                errs.append(line.strip()[:200])
                break
        # A variant that switches the gate off on purpose (--gk NAME:enabled=off,
        # the library's cost with nothing gated) admits nothing by design.
        gate_on = (cfg["gk"] or {}).get("pg_gatekeeper.enabled", "on").lower() not in ("off", "false", "0", "no")
        if gk and gate_on and row.get("gk_admitted") in ("", 0, "0"):
            errs.append("the gate admitted nothing (is the bench role exempt?)")
        if cpu_window_backend and not row["backend_cpu_us_per_xact"]:
            errs.append("no backend CPU sample (%s, %d statements in window)" % (self.sample_note, in_window))
        return errs, out, cmd

    def sample_backend(self, duration, t0):
        """For --overhead: CPU time of the single pgbench backend over a window
        that excludes connection and shutdown."""
        # pgbench's first connection only reads the scale and goes away; the
        # benchmark's own connection is the one still there a second later.
        time.sleep(max(0, t0 + 1.0 - time.time()))
        pid = None
        while time.time() < t0 + 5 and pid is None:
            out = self.cluster.sql("SELECT pid FROM pg_stat_activity WHERE usename = 'bench' "
                                   "AND application_name = 'pgbench' AND backend_type = 'client backend' "
                                   "ORDER BY backend_start DESC LIMIT 1")
            pid = int(out.split()[0]) if out else None
            if pid is None:
                time.sleep(0.05)
        if pid is None:
            self.sample_note = "backend pid not found"
            return None, None
        start = t0 + 1.5
        end = t0 + duration - 1.0
        time.sleep(max(0, start - time.time()))
        c0, s0 = proc_cpu_ns(pid), time.time()
        time.sleep(max(0.5, end - time.time()))
        c1, s1 = proc_cpu_ns(pid), time.time()
        if c0 is None or c1 is None:
            self.sample_note = "backend %d gone during the window" % pid
            return None, None
        self.sample_note = "window %.3f..%.3f, backend %d" % (s0, s1, pid)
        return (s0, s1), c1 - c0

    def gk_stats(self, row, t0, t1):
        c = self.cluster
        st = c.sql_row("SELECT max_active, ticket_ceiling, tickets, admitted_total, waited_total, "
                       "overflow_total, queue_timeouts_total, round(wait_p99_ms::numeric, 3) "
                       "FROM gatekeeper.status")
        if st:
            for k, v in zip(["gk_max_active", "gk_ticket_ceiling", "gk_tickets_end", "gk_admitted",
                             "gk_waited", "gk_overflow", "gk_timeouts", "gk_wait_p99_ms"], st):
                row[k] = v
        h = c.sql_row("SELECT round(avg(tickets), 1), max(tickets), round(avg(running), 1), "
                      "round(avg(queued), 1), max(queued) FROM gatekeeper.history "
                      "WHERE sample_time BETWEEN to_timestamp(%f) AND to_timestamp(%f)" % (t0, t1))
        if h:
            for k, v in zip(["gk_tickets_avg", "gk_tickets_max", "gk_running_avg", "gk_queued_avg",
                             "gk_queued_max"], h):
                row[k] = v

    def write_row(self, row):
        self.rows.append(row)
        new = not os.path.exists(self.csv_path)
        with open(self.csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            if new:
                w.writeheader()
            w.writerow(row)

    # -- plans --------------------------------------------------------------
    def plan(self):
        """[(round, clients, workload, cfg)] in execution order."""
        cfgs = self.configs()
        bare_side = [c for c in cfgs if c["gk"] is None]
        gk_side = [c for c in cfgs if c["gk"] is not None]
        steps = []
        flip = False
        for rnd in range(1, self.a.rounds + 1):
            for clients in self.a.clients:
                phases = [bare_side, gk_side]
                if flip:
                    phases.reverse()
                flip = not flip
                for side in phases:
                    for w in self.a.workloads:
                        for cfg in side:
                            steps.append((rnd, clients, w, cfg))
        return steps

    def main(self):
        a = self.a
        max_clients = max(a.clients) if a.clients else 1
        cfgs = self.configs()
        steps = [] if a.overhead else self.plan()
        log("pg_gatekeeper bench: %d CPUs, output %s" % (self.ncpu, a.out))
        if a.overhead:
            n = 2 * a.overhead_rounds
            log("overhead mode: %d runs of %d s (1 client, select-only, -M prepared)" % (n, a.overhead_duration))
        else:
            log("workloads %s; clients %s; rounds %d; %d s per run; configurations %s" % (
                ",".join(a.workloads), ",".join(map(str, a.clients)), a.rounds, a.duration,
                ", ".join(c["name"] for c in cfgs)))
            if a.warmup > 0 and a.warmup_per_client > 0:
                log("measured from %g s after each run's first transaction, plus %g ms per client (%s)" % (
                    a.warmup, a.warmup_per_client, ", ".join(
                        "%d clients: %g s" % (c, a.warmup + self.extra_warmup(c)) for c in a.clients)))
            log("%d runs; first estimate %s" % (len(steps), fmt_hms(
                sum(a.duration + self.extra_warmup(c) + 4 for _, c, _, _ in steps))))
        t_init = time.time()
        self.cluster.init(max_clients)
        self.cluster.start(None)
        log("loading pgbench -i -s %d ..." % a.scale)
        self.cluster.load_data(a.scale)
        log("cluster ready in %.0f s" % (time.time() - t_init))
        self.meta = self.collect_meta()

        if a.overhead:
            self.overhead()
        else:
            t_start = time.time()
            took = {}  # clients -> [seconds per run], for the ETA
            for i, (rnd, clients, w, cfg) in enumerate(steps):
                every = [t for ts in took.values() for t in ts]
                guess = sum(every) / len(every) if every else a.duration + self.extra_warmup(clients) + 4
                eta = sum(sum(took[c]) / len(took[c]) if c in took else guess
                          for _, c, _, _ in steps[i:])
                t_step = time.time()
                label = "[%d/%d] round %d/%d, %d clients, %s, %s" % (
                    i + 1, len(steps), rnd, a.rounds, clients, w, cfg["name"])
                log("%s (ETA %s)" % (label, fmt_hms(eta)))
                row = self.one_run(w, cfg, clients, rnd)
                took.setdefault(clients, []).append(time.time() - t_step)
                extra = ""
                if cfg["family"] == "gatekeeper":
                    extra = ", worker %s%% CPU, tickets avg %s max %s" % (
                        row["worker_cpu_pct"], row["gk_tickets_avg"], row["gk_tickets_max"])
                elif cfg["family"] == "pgbouncer":
                    extra = ", pgbouncer %s%% CPU" % row["pgbouncer_cpu_pct"]
                log("    %s: tps %s, avg %s ms, p99 %s ms%s%s" % (
                    row["status"], row["tps"], row["avg_latency_ms"], row["p99_latency_ms"], extra,
                    "" if row["status"] == "ok" else " -- " + row["error"]))
            log("runs done in %s" % fmt_hms(time.time() - t_start))
        self.cluster.stop()
        self.meta["finished_at"] = dt.datetime.now().isoformat(timespec="seconds")
        self.meta["failures"] = self.failures
        with open(os.path.join(a.out, "meta.json"), "w") as f:
            json.dump(self.meta, f, indent=2)

    def overhead(self):
        a = self.a
        bare = {"name": "bare", "family": "bare", "pool": None, "gk": None}
        gkc = {"name": "gatekeeper", "family": "gatekeeper", "pool": None, "gk": a.gk_variants[0][1]}
        n = 2 * a.overhead_rounds
        i = 0
        t_start = time.time()
        for rnd in range(1, a.overhead_rounds + 1):
            order = [bare, gkc] if rnd % 2 else [gkc, bare]
            for cfg in order:
                eta = (time.time() - t_start) / i * (n - i) if i else n * (a.overhead_duration + 6)
                i += 1
                log("[%d/%d] overhead round %d, %s (ETA %s)" % (i, n, rnd, cfg["name"], fmt_hms(eta)))
                row = self.one_run("select", cfg, 1, rnd, duration=a.overhead_duration,
                                   cpu_window_backend=True, label="overhead")
                log("    %s: tps %s, backend CPU %s us per statement over %s statements%s" % (
                    row["status"], row["tps"], row["backend_cpu_us_per_xact"], row["cpu_window_xacts"],
                    "" if row["status"] == "ok" else " -- " + row["error"]))
        med = {}
        for name in ("bare", "gatekeeper"):
            vals = sorted(float(r["backend_cpu_us_per_xact"]) for r in self.rows
                          if r["config"] == name and r["backend_cpu_us_per_xact"] != "")
            med[name] = percentile(vals, 0.5)
        if med.get("bare") and med.get("gatekeeper"):
            log("backend CPU per statement, median: bare %.3f us, gatekeeper %.3f us, ratio %.4f (%+.2f%%)" % (
                med["bare"], med["gatekeeper"], med["gatekeeper"] / med["bare"],
                (med["gatekeeper"] / med["bare"] - 1) * 100))

    def collect_meta(self):
        a = self.a

        def sh(cmd):
            try:
                return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, timeout=30).stdout.strip()
            except Exception:  # noqa: BLE001
                return ""

        model = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
        mem = sh("free -g | awk '/^Mem:/ {print $2}'")
        meta = {
            "started_at": dt.datetime.now().isoformat(timespec="seconds"),
            "command": a.command_line,
            "mode": a.mode,
            "host": platform.node(),
            "nproc": sh("nproc"),
            "cpu_model": model,
            "memory_gb": mem,
            "kernel": platform.release(),
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
            "postgres": self.cluster.sql("SELECT version()").split(" on ")[0],
            "pgbench": sh(os.path.join(a.pg_bin, "pgbench") + " --version"),
            "pgbouncer": sh("pgbouncer --version | head -1"),
            "git": sh("git -C %s rev-parse --short HEAD" % REPO)
                   + (" (dirty)" if sh("git -C %s status --porcelain -- src core Cargo.toml" % REPO) else ""),
            "extension_so": sh("ls -l --time-style=+%%FT%%T %s/pg_gatekeeper.so | awk '{print $6}'"
                               % sh(os.path.join(a.pg_bin, "pg_config") + " --pkglibdir")),
            "built_release": a.built_release,
            "extension_build": ("release, built by this run" if a.built_release == "yes" else
                                "installed build, %s" % ("has debug info: probably a DEBUG build"
                                                         if sh("readelf -S %s/pg_gatekeeper.so 2>/dev/null | grep -c debug_info"
                                                               % sh(os.path.join(a.pg_bin, "pg_config") + " --pkglibdir")) not in ("", "0")
                                                         else "no debug info: release")),
            "scale": a.scale,
            "duration_s": a.overhead_duration if a.overhead else a.duration,
            "warmup_s": 0 if a.overhead else a.warmup,
            "warmup_per_client_ms": 0 if a.overhead or a.warmup <= 0 else a.warmup_per_client,
            "rounds": a.overhead_rounds if a.overhead else a.rounds,
            "clients": a.clients,
            "workloads": a.workloads,
            "jobs": 1 if a.overhead else a.jobs,
            "sampling_rate": a.sampling_rate,
            "server_settings": self.cluster.settings,
            "pgbouncer_pools": [] if a.overhead or "pgbouncer" not in a.configs else self.pools(),
            "pgbouncer_select_protocol": "prepared" if a.pgbouncer_prepared else a.pgbouncer_select_mode,
            "gatekeeper_variants": {n: g for n, g in a.gk_variants},
            "overhead_rounds": a.overhead_rounds if a.overhead else None,
            "overhead_duration_s": a.overhead_duration if a.overhead else None,
        }
        return meta


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="tpcb,select,slow", help="comma list of tpcb, select, slow")
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
    p.add_argument("--configs", default="bare,pgbouncer,gatekeeper",
                   help="comma list of configuration families: bare, pgbouncer, gatekeeper")
    p.add_argument("--pools", default="2xcpu,8,32", help="PgBouncer pool sizes ('2xcpu' = 2 x CPUs)")
    p.add_argument("--gk", action="append", default=[], metavar="NAME[:guc=val,...]",
                   help="gatekeeper configuration (repeatable), e.g. --gk gk-apc2:active_per_cpu=2; "
                        "GUC names without the pg_gatekeeper. prefix; default: one 'gatekeeper' with "
                        "the built-in defaults (automatic limit)")
    p.add_argument("--set", action="append", default=[], metavar="GUC=VALUE",
                   help="extra server setting for every configuration (repeatable)")
    p.add_argument("--jobs", type=int, default=2, help="pgbench -j")
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
                   help="CI smoke: 16 clients, 3 s, 1 round, scale 1, every configuration and workload; "
                        "exits non-zero if any run failed")
    p.add_argument("--overhead", action="store_true",
                   help="measure backend CPU per statement, library loaded vs not, 1 client, nothing queued")
    p.add_argument("--overhead-rounds", type=int, default=5)
    p.add_argument("--overhead-duration", type=int, default=20)
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
        a.workloads = "tpcb,select,slow"
        a.configs = "bare,pgbouncer,gatekeeper"
    if a.warmup_per_client < 0:
        p.error("--warmup-per-client must be 0 or more")
    if a.warmup < 0 or (a.warmup > 0 and a.warmup > a.duration - 3):
        p.error("--warmup must be 0 or leave at least 3 s of --duration to measure")
    a.workloads = parse_list(a.workloads)
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error("unknown workload %r (tpcb, select, slow)" % w)
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
    return a


def main(argv):
    a = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench.py must run as root (it starts servers with runuser -u postgres)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(a.clients) * 2 + 1000
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, 65536), hard), hard))
        except (ValueError, OSError):
            pass
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < want:
            sys.exit("open-file limit %d is too low for %d clients" % (
                resource.getrlimit(resource.RLIMIT_NOFILE)[0], max(a.clients)))
    a.port = pick_port(a.port)
    a.pgbouncer_port = pick_port(a.pgbouncer_port, avoid=(a.port,))
    ver = subprocess.run(["pgbouncer", "--version"], stdout=subprocess.PIPE, text=True).stdout
    m = re.search(r"PgBouncer (\d+)\.(\d+)", ver)
    if m and (int(m.group(1)), int(m.group(2))) >= (1, 21):
        a.pgbouncer_prepared = True  # protocol-level prepared statements in transaction mode
    # A second run into the same folder would append its rows to the first
    # run's CSV (possibly under another header) and report both as one.
    if os.path.exists(os.path.join(a.out, "results.csv")):
        sys.exit("%s already holds results (results.csv): choose another --out, or remove it" % a.out)
    os.makedirs(a.out, exist_ok=True)

    r = Runner(a)
    atexit.register(r.cleanup)

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
