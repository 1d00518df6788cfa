"""The benchmark's throw-away PostgreSQL cluster, and the huge pages it runs on."""

import os
import re
import shutil
import time

from sysbench import prepare_cmd as sysbench_prepare_cmd
from util import as_postgres, log, parse_cpu_list, pinned, proc_cpus, run

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
        self.data_kinds = []  # "pgbench", "sysbench": what load_data put in the bench database
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
            # PostgreSQL's default, durable commits: what a DBA runs. --async
            # (synchronous_commit = off) is the labelled CPU-bound variant.
            "synchronous_commit": "off" if self.a.async_commit else "on",
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
        # With --pin the postmaster starts on the server's CPUs: its backends
        # and the worker inherit them, and the gate counts them as its CPUs.
        run(as_postgres(pinned(self.a.server_cpus, [os.path.join(self.bin, "pg_ctl"), "-D", self.data,
                                                    "-l", self.logfile, "-w", "-t", "120", "start"])))
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

    def check_affinity(self, pid, what):
        """The Cpus_allowed_list of a server process; with --pin, an error
        unless it is the server's set."""
        got = proc_cpus(pid) if pid else None
        if self.a.server_cpus and (got is None or parse_cpu_list(got) != parse_cpu_list(self.a.server_cpus)):
            raise RuntimeError("%s (pid %s) may run on CPUs %s, not on the server's %s" % (
                what, pid, got, self.a.server_cpus))
        return got or ""

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

    def load_data(self, scale, kinds=("pgbench",), sysbench_tables=4, sysbench_table_size=100000):
        """The role `bench`, its database, and the tables of each kind of
        workload, loaded as that role: pgbench -i -s SCALE, sysbench's
        prepare (sbtest1..N)."""
        self.sql("CREATE ROLE bench LOGIN", db="postgres")
        self.sql("CREATE DATABASE bench OWNER bench", db="postgres")
        self.sql("CREATE EXTENSION pg_prewarm")
        if "pgbench" in kinds:
            run([os.path.join(self.bin, "pgbench"), "-i", "-q", "-s", str(scale),
                 "-h", self.sock, "-p", str(self.port), "-U", "bench", "bench"], timeout=3600)
        if "sysbench" in kinds:
            run(sysbench_prepare_cmd("127.0.0.1", self.port, "bench", "bench", sysbench_tables,
                                     sysbench_table_size, len(os.sched_getaffinity(0))), timeout=3600)
        self.data_kinds = list(kinds)
        self.sql("VACUUM ANALYZE")
        self.sql("CHECKPOINT")
        self.have_data = True

    def prewarm(self):
        """Every table and index of the loaded workloads into shared buffers."""
        self.sql("SELECT sum(pg_prewarm(c.oid)) FROM pg_class c "
                 "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i') "
                 "AND (c.relname LIKE 'pgbench\\_%' OR c.relname LIKE 'sbtest%')")

    def before_run(self, kind="pgbench"):
        # What pgbench itself does before a run (we pass -n), plus a checkpoint
        # so that no configuration pays for another one's dirty buffers. The
        # sysbench tables get the same VACUUM (their deletes and inserts leave
        # dead rows behind).
        if kind == "sysbench":
            tables = self.sql("SELECT string_agg(relname, ', ') FROM pg_class WHERE relkind = 'r' "
                              "AND relnamespace = 'public'::regnamespace AND relname LIKE 'sbtest%'")
            if tables:
                self.sql("VACUUM " + tables)
        else:
            self.sql("TRUNCATE pgbench_history")
            self.sql("VACUUM pgbench_branches, pgbench_tellers, pgbench_accounts")
        self.sql("CHECKPOINT")

