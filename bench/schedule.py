"""The whole benchmark: which runs, in which order, progress and ETA, the
overhead measurement, and the run's metadata."""

import datetime as dt
import json
import os
import platform
import subprocess
import time

from runner import Runner
from sysbench import is_sysbench
from util import REPO, cpu_list, fmt_hms, log, percentile


class Schedule(Runner):
    def plan(self):
        """[(round, clients, workload, cfg)] in execution order."""
        cfgs = self.configs()
        bare_side = [c for c in cfgs if c["gk"] is None]
        gk_side = [c for c in cfgs if c["gk"] is not None]
        steps = []
        for rnd in range(1, self.a.rounds + 1):
            for ci, clients in enumerate(self.a.clients):
                # The order flips from one client count to the next (one
                # restart fewer between them) and, for each client count,
                # from one round to the next, whatever the number of client
                # counts: neither side always runs first.
                phases = [bare_side, gk_side]
                if (rnd + ci) % 2 == 0:
                    phases.reverse()
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
        if a.server_cpus:
            log("pinned: server and PgBouncer on CPUs %s, pgbench on CPUs %s (taskset)" % (
                a.server_cpus, a.client_cpus))
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
            if a.idle_connections:
                log("%d idle sessions connected straight to the server beside the clients in every run"
                    % a.idle_connections)
            log("%d runs; first estimate %s" % (len(steps), fmt_hms(
                sum(a.duration + self.extra_warmup(c) + 4 for _, c, _, _ in steps))))
        t_init = time.time()
        self.cluster.init(max_clients + a.idle_connections)
        self.cluster.start(None)
        kinds = ["pgbench"] if a.overhead or any(not is_sysbench(w) for w in a.workloads) else []
        if not a.overhead and any(is_sysbench(w) for w in a.workloads):
            kinds.append("sysbench")
        log("loading %s ..." % " and ".join(
            {"pgbench": "pgbench -i -s %d" % a.scale,
             "sysbench": "sysbench prepare (%d tables of %d rows)" % (a.sysbench_tables, a.sysbench_table_size)}[k]
            for k in kinds))
        self.cluster.load_data(a.scale, kinds, a.sysbench_tables, a.sysbench_table_size)
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
            "damon": a.damon,
            "damon_stopped": a.damon_stopped,
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
            "postgres": self.cluster.sql("SELECT version()").split(" on ")[0],
            "pgbench": sh(os.path.join(a.pg_bin, "pgbench") + " --version"),
            "sysbench": sh("sysbench --version") if "sysbench" in self.cluster.data_kinds else None,
            "sysbench_tables": a.sysbench_tables if "sysbench" in self.cluster.data_kinds else None,
            "sysbench_table_size": a.sysbench_table_size if "sysbench" in self.cluster.data_kinds else None,
            "sysbench_ps_mode": ({"bare": "auto", "gatekeeper": "auto",
                                  "pgbouncer": "auto" if a.pgbouncer_prepared else "disable"}
                                 if "sysbench" in self.cluster.data_kinds else None),
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
            "idle_connections": a.idle_connections,
            "sampling_rate": a.sampling_rate,
            "server_settings": self.cluster.settings,
            "pgbouncer_pools": [] if a.overhead or "pgbouncer" not in a.configs else self.pools(),
            "pgbouncer_select_protocol": "prepared" if a.pgbouncer_prepared else a.pgbouncer_select_mode,
            "gatekeeper_variants": {n: g for n, g in a.gk_variants},
            "overhead_rounds": a.overhead_rounds if a.overhead else None,
            "overhead_duration_s": a.overhead_duration if a.overhead else None,
            "pin_mode": a.pin_mode,
            "server_cpus": a.server_cpus or self.cluster.check_affinity(self.cluster.postmaster_pid(),
                                                                        "the postmaster"),
            "client_cpus": a.client_cpus or cpu_list(os.sched_getaffinity(0)),
        }
        return meta
