"""One client run (pgbench or sysbench) against one configuration (bare, a
PgBouncer pool or a gatekeeper variant): start what it needs, run the
client, measure, judge, and write its CSV row."""

import csv
import datetime as dt
import glob
import os
import resource
import signal
import subprocess
import time

from bouncer import Bouncer
from cluster import Cluster
from pgbench import WORKLOADS, parse_pgbench, read_logs
from report import sysbench_count_error
from sysbench import hist_percentile, is_sysbench, parse_sysbench
from sysbench import run_cmd as sysbench_run_cmd
from util import clean_env, cpu_list, log, machine_cpu, parse_cpu_list, percentile, pinned, proc_cpu_ns

# How long --idle-connections' sessions sleep: below pgbench's limit of
# 2^31 microseconds, and longer than any run bench.py allows with them.
IDLE_SLEEP_S = 2000

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
    "gk_limit_avg", "gk_limit_min", "gk_limit_max", "gk_limit_reason",
    "backend_cpu_us_per_xact", "cpu_window_xacts",
    "pin_mode", "server_cpus", "client_cpus",
    "cpu_idle_pct", "cpu_pressure_some_pct",
    # added with the sysbench workloads (older CSVs lack them)
    "tool", "ps_mode", "p95_latency_ms", "ignored_errors", "reconnects",
    # holders relieved by the stall check during the run (older CSVs lack it)
    "gk_stalls",
    # the part of cpu_idle_pct that was iowait (older CSVs lack it)
    "cpu_iowait_pct",
    # --idle-connections: sessions connected beside the clients, sending nothing
    "idle_connections",
]



class Runner:
    def __init__(self, args):
        self.a = args
        self.cluster = Cluster(args)
        self.bouncer = None
        self.pgbench = None
        self.idle = None  # --idle-connections' pgbench, during a run
        self.rows = []
        self.failures = []
        self.csv_path = os.path.join(args.out, "results.csv")
        self.ncpu = len(os.sched_getaffinity(0))
        # The database host's CPUs: PgBouncer's "2xcpu" pool is sized by them.
        self.server_ncpu = len(parse_cpu_list(args.server_cpus)) if args.server_cpus else self.ncpu
        self.run_seq = 0
        self.sample_note = ""

    # -- cleanup ------------------------------------------------------------
    def kill_clients(self):
        """Stop the run's pgbench and its idle sessions, if still running,
        and reap them."""
        for p in (self.pgbench, self.idle):
            if p is not None:
                if p.poll() is None:
                    p.kill()
                p.wait()

    def cleanup(self):
        self.kill_clients()
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
            v = 2 * self.server_ncpu if p == "2xcpu" else int(p)
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
        if "-f" in wargs:
            # A script of our own: :scale is pgbench's -s, 1 unless given.
            cmd += ["-s", str(self.a.scale)]
        cmd.append("bench")
        return cmd, proto

    def sysbench_cmd(self, workload, cfg, clients, duration):
        """sysbench's command, its protocol and its --db-ps-mode: server-side
        prepared statements (auto) for bare and the gate; through PgBouncer
        only where it can pool them (1.21 and later, max_prepared_statements),
        else disable (the statements' text, the simple protocol)."""
        a = self.a
        ps_mode = "auto"
        port = self.cluster.port
        if cfg["family"] == "pgbouncer":
            port = a.pgbouncer_port
            if not a.pgbouncer_prepared:
                ps_mode = "disable"
        warm = int(round(a.warmup)) + self.extra_warmup(clients) if a.warmup > 0 else 0
        cmd = sysbench_run_cmd(workload, "127.0.0.1", port, "bench", "bench", a.sysbench_tables,
                               a.sysbench_table_size, clients, duration, warm, ps_mode)
        return cmd, "prepared" if ps_mode == "auto" else "simple", ps_mode, warm

    def start_idle(self, prefix):
        """--idle-connections: a pgbench whose clients connect straight to the
        server (as the measured ones do to PostgreSQL, not through PgBouncer),
        then sleep in their first command and send nothing. Returns once
        every one of them has a backend (pg_stat_activity)."""
        a = self.a
        n = a.idle_connections
        script = prefix + "-idle.sql"
        with open(script, "w") as f:
            # Longer than any run (bench.py caps the runs' length for
            # this); pgbench keeps a sleep's microseconds in an int, so an
            # hour would overflow and not sleep at all.
            f.write("\\sleep %d s\n" % IDLE_SLEEP_S)
        cmd = [os.path.join(a.pg_bin, "pgbench"), "-h", "127.0.0.1", "-p", str(self.cluster.port),
               "-U", "bench", "-n", "-c", str(n), "-j", str(min(a.jobs, n)), "-t", "1", "-f", script, "bench"]
        env = clean_env()
        env["PGAPPNAME"] = "bench_idle"
        with open(prefix + "-idle.out", "w") as out:
            self.idle = subprocess.Popen(pinned(a.client_cpus, cmd), stdout=out, stderr=subprocess.STDOUT,
                                         env=env)
        deadline = time.time() + 60 + n / 20.0
        while True:
            got = self.idle_count()
            if got >= n:
                return
            if self.idle.poll() is not None or time.time() > deadline:
                with open(prefix + "-idle.out") as f:
                    said = " ".join(f.read().split())[-300:]
                raise RuntimeError("%d of %d idle sessions connected: %s" % (got, n, said))
            time.sleep(0.5)

    def idle_count(self):
        return int(self.cluster.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_idle'"))

    def idle_gone(self):
        """Wait for the idle sessions' backends to exit, so that the next run
        starts with none (best effort: the server may be down after a crash)."""
        deadline = time.time() + 120
        try:
            while self.idle_count() > 0 and time.time() < deadline:
                time.sleep(0.5)
        except Exception as e:  # noqa: BLE001 - the next run's start reports a broken server
            log("idle sessions: %s" % str(e).strip()[:200])

    def one_run(self, workload, cfg, clients, rnd, duration=None, cpu_window_backend=False, label=None):
        """One pgbench or sysbench run; returns its CSV row. A failure of any kind
        (client error, server crash, harness error) fails the run, not the benchmark:
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
                   gk_settings=";".join("%s=%s" % kv for kv in (cfg["gk"] or {}).items()),
                   pin_mode=a.pin_mode, client_cpus=a.client_cpus or cpu_list(os.sched_getaffinity(0)))
        log_off = self.cluster.log_size()
        errs, out, cmd = [], "", []
        try:
            errs, out, cmd = self._one_run(row, workload, cfg, clients, duration, prefix, cpu_window_backend)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - becomes a failed run
            errs.append("harness: %s" % str(e).strip().replace("\n", " ")[:300])
        had_idle = self.idle is not None
        self.kill_clients()
        self.pgbench = self.idle = None
        if had_idle:
            self.idle_gone()
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
        sb = is_sysbench(workload)
        c.before_run("sysbench" if sb else "pgbench")
        gk = cfg["family"] == "gatekeeper"
        wpid = None
        if gk:
            c.sql("SELECT gatekeeper.reset()")
            wpid = c.worker_pid()
        # Where the server may run, as its postmaster (and so every backend
        # and the worker) sees it; with --pin, checked against the set asked for.
        row["server_cpus"] = c.check_affinity(c.postmaster_pid(), "the postmaster")
        if wpid:
            c.check_affinity(wpid, "the pg_gatekeeper worker")
        if cfg["family"] == "pgbouncer":
            self.bouncer = Bouncer(a, c, cfg["pool"], clients)
            self.bouncer.start()
            c.check_affinity(self.bouncer.pid, "PgBouncer")
        row["tool"] = "sysbench" if sb else "pgbench"
        row["idle_connections"] = a.idle_connections
        if a.idle_connections:
            self.start_idle(prefix)
        if sb:
            cmd, proto, row["ps_mode"], sb_warm = self.sysbench_cmd(workload, cfg, clients, duration)
        else:
            cmd, proto = self.pgbench_cmd(workload, cfg, clients, duration, prefix,
                                          None if cpu_window_backend else a.sampling_rate)
        row["protocol"] = proto
        w0 = proc_cpu_ns(wpid) if wpid else None
        b0 = proc_cpu_ns(self.bouncer.pid) if self.bouncer else None
        m0 = machine_cpu()
        t0 = time.time()
        # pgbench runs on the same machine: its CPU time (user + system, from
        # the children's rusage once it has been waited for) is CPU the server
        # cannot have, whichever configuration serves it.
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        outf = open(prefix + ".out", "w")
        self.pgbench = subprocess.Popen(pinned(a.client_cpus, cmd), stdout=outf, stderr=subprocess.STDOUT,
                                        env=clean_env())
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
        m1 = machine_cpu()
        wall = t1 - t0
        row["wall_s"] = round(wall, 2)
        # The whole machine over the run: how idle its CPUs were, and the share
        # of time some runnable task waited for one (PSI).
        ticks = (m1[0] - m0[0]) + (m1[1] - m0[1])
        if ticks > 0:
            row["cpu_idle_pct"] = round((m1[1] - m0[1]) / ticks * 100, 1)
            row["cpu_iowait_pct"] = round((m1[3] - m0[3]) / ticks * 100, 1)
        if m0[2] is not None and m1[2] is not None:
            row["cpu_pressure_some_pct"] = round((m1[2] - m0[2]) / 1e6 / wall * 100, 1)
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
        if sb:
            res = self.sysbench_figures(row, out, sb_warm, duration)
            return self.judge(row, res, out, cmd, rc, cfg, t0, t1, sb=True)
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
            row["p95_latency_ms"] = round(percentile(lats, 0.95), 3)
            row["p99_latency_ms"] = round(percentile(lats, 0.99), 3)
            row["max_latency_ms"] = round(lats[-1], 3)
        row["logged_xacts"] = len(lats)
        if cpu_window_backend and backend_cpu is not None and in_window > 0:
            row["backend_cpu_us_per_xact"] = round(backend_cpu / 1000.0 / in_window, 3)
            row["cpu_window_xacts"] = in_window
        errs, out, cmd = self.judge(row, res, out, cmd, rc, cfg, t0, t1)
        if cpu_window_backend and not row["backend_cpu_us_per_xact"]:
            errs.append("no backend CPU sample (%s, %d statements in window)" % (self.sample_note, in_window))
        return errs, out, cmd

    def sysbench_figures(self, row, out, warm, duration):
        """Fill the row from sysbench's report (see sysbench.py); returns the parsed figures."""
        res = parse_sysbench(out, warm, duration)
        for k in ("tps", "avg_latency_ms", "max_latency_ms", "xacts", "window_xacts", "window_s",
                  "tps_whole_run", "avg_latency_whole_run_ms", "ignored_errors", "reconnects"):
            if k in res:
                row[k] = res[k]
        row["warmup_s"] = warm
        row["tps_by_5s"] = ";".join(str(t) for t in res.get("tps_by_5s", []))
        hist = res.get("hist") or []
        row["logged_xacts"] = sum(n for _, n in hist)
        if hist:
            row["p50_latency_ms"] = hist_percentile(hist, 0.50)
            row["p95_latency_ms"] = hist_percentile(hist, 0.95)
            row["p99_latency_ms"] = hist_percentile(hist, 0.99)
        if row.get("client_cpu_ms") and row.get("xacts"):
            row["client_cpu_us_per_xact"] = round(float(row["client_cpu_ms"]) * 1000 / int(row["xacts"]), 1)
        return res

    def judge(self, row, res, out, cmd, rc, cfg, t0, t1, sb=False):
        """The gate's figures, then the run judged (correctness only, never
        performance); returns (errors, client output, command)."""
        gk = cfg["family"] == "gatekeeper"
        if gk:
            try:
                self.gk_stats(row, t0, t1)
            except RuntimeError as e:
                row["error"] = (row["error"] + "; " if row["error"] else "") + \
                    "gatekeeper views: " + str(e).strip().splitlines()[-1][:200]
        tool = "sysbench" if sb else "pgbench"
        errs = [row.pop("error")] if row["error"] else []
        row["error"] = ""
        if rc != 0:
            errs.append("%s exit code %d" % (tool, rc))
        if not res.get("tps") or not row.get("tps"):
            errs.append("zero or missing tps" + (" in the measured window (is --warmup shorter than "
                                                  "--duration?)" if res.get("tps") else ""))
        if res.get("failed_xacts"):
            errs.append("%d failed transactions" % res["failed_xacts"])
        for line in out.splitlines():
            if ("FATAL" in line) if sb else (line.startswith("pgbench: error") or "aborted" in line):
                errs.append(line.strip()[:200])
                break
        if sb:
            # The tps is measured over the window after the warm-up: sysbench's
            # reports must cover it (without them, the tps would be the final
            # report's, warm-up and drain included).
            want = float(row["duration_s"]) - float(row.get("warmup_s") or 0)
            got = float(row.get("window_s") or 0)
            if abs(got - want) > 1.5:
                errs.append("sysbench's reports cover %g s of the %g s window" % (got, want))
            # Nor may they count more transactions than it ran (report.py).
            why = sysbench_count_error(row)
            if why and why not in errs:
                errs.append(why)
            # sysbench's own p95 and the one read from its histogram are the
            # same computation: a difference means the histogram was misread.
            p95, mine = res.get("sysbench_p95_ms"), row.get("p95_latency_ms")
            if p95 is not None and mine not in ("", None) and abs(float(mine) - p95) > 0.01 + 0.005 * p95:
                errs.append("histogram p95 %s ms differs from sysbench's %s ms" % (mine, p95))
            if not res.get("hist"):
                errs.append("no latency histogram in sysbench's output")
        # A variant that switches the gate off on purpose (--gk NAME:enabled=off,
        # the library's cost with nothing gated) admits nothing by design.
        gate_on = (cfg["gk"] or {}).get("pg_gatekeeper.enabled", "on").lower() not in ("off", "false", "0", "no")
        if gk and gate_on and row.get("gk_admitted") in ("", 0, "0"):
            errs.append("the gate admitted nothing (is the bench role exempt?)")
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
                       "overflow_total, queue_timeouts_total, round(wait_p99_ms::numeric, 3), stalls_total "
                       "FROM gatekeeper.status")
        if st:
            for k, v in zip(["gk_max_active", "gk_ticket_ceiling", "gk_tickets_end", "gk_admitted",
                             "gk_waited", "gk_overflow", "gk_timeouts", "gk_wait_p99_ms", "gk_stalls"], st):
                row[k] = v
        h = c.sql_row("SELECT round(avg(tickets), 1), max(tickets), round(avg(running), 1), "
                      "round(avg(queued), 1), max(queued), round(avg(max_active), 1), min(max_active), "
                      "max(max_active) FROM gatekeeper.history "
                      "WHERE sample_time BETWEEN to_timestamp(%f) AND to_timestamp(%f)" % (t0, t1))
        if h:
            for k, v in zip(["gk_tickets_avg", "gk_tickets_max", "gk_running_avg", "gk_queued_avg",
                             "gk_queued_max", "gk_limit_avg", "gk_limit_min", "gk_limit_max"], h):
                row[k] = v
        r = c.sql_row("SELECT limit_reason FROM gatekeeper.status")
        if r:
            row["gk_limit_reason"] = r[0]

    def write_row(self, row):
        self.rows.append(row)
        new = not os.path.exists(self.csv_path)
        with open(self.csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            if new:
                w.writeheader()
            w.writerow(row)
