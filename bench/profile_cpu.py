#!/usr/bin/env python3
"""Where the CPU goes per committed transaction, during a steady-state window.

Runs pgbench (TPC-B by default) against a server that is already running,
waits until every client is connected and then for the warm-up, reads
/proc for every process twice, WINDOW seconds apart, and stops the client:
CPU time (utime + stime), minor page faults and context switches, summed
per command name (postgres, the client, pgbouncer, kernel threads).
Divided by the transactions committed in the window
(pg_stat_database.xact_commit), that gives the cost of one transaction in
each process family, plus the machine's CPU split from /proc/stat.

It answers "why is configuration A slower than B at N clients": run it once
against each, one after the other, and compare the per-commit figures.

Usage (as root, the server and PgBouncer already running):
  python3 bench/profile_cpu.py --port 25432 --stats-port 25432 -c 1000
  python3 bench/profile_cpu.py --port 26432 --stats-port 25432 -c 1000   # through PgBouncer

pgbench options after `--` replace the default workload (TPC-B), e.g.
  python3 bench/profile_cpu.py --port 25432 -- -f bench/slow_client.sql -s 10

With --sysbench oltp_read_write the client is sysbench with -c threads, on
the tables bench.py prepares (4 of 100000 rows by default); --ps-mode
disable through PgBouncer, which cannot carry prepared statements.

With --perf FILE it also records a system-wide call-graph profile over the
same window (`perf record -a -g`) and writes its summary to FILE: the share
of all samples per command and library, and the top symbols of the
postgres processes and of pg_gatekeeper.so; and FILE.syms.tsv, the CPU µs
per commit by command, library and symbol, which bench/perf_diff.py
compares between two profiles.
"""

import argparse
import glob
import os
import subprocess
import sys
import threading
import time

from sysbench import TABLE_SIZE as SYSBENCH_TABLE_SIZE, TABLES as SYSBENCH_TABLES, common_args as sysbench_args

STAT_NAMES = "user nice system idle iowait irq softirq steal".split()
# perf record sampling frequency (per CPU).
PERF_HZ = 499


def snapshot():
    """pid -> (command, cpu ticks, minor faults, voluntary cs, involuntary cs)."""
    out = {}
    for p in glob.glob("/proc/[0-9]*"):
        try:
            st = open(p + "/stat").read()
            comm = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            cs = {}
            for line in open(p + "/status"):
                if "ctxt_switches" in line:
                    k, v = line.split(":")
                    cs[k] = int(v)
            out[int(p[6:])] = (comm, int(f[11]) + int(f[12]), int(f[7]),
                               cs.get("voluntary_ctxt_switches", 0), cs.get("nonvoluntary_ctxt_switches", 0))
        except (OSError, ValueError, IndexError):
            pass  # the process went away meanwhile
    return out


def machine_cpu():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(v), v


def commits(args):
    r = subprocess.run([os.path.join(args.pg_bin, "psql"), "-X", "-h", args.host, "-p", str(args.stats_port),
                        "-U", args.user, "-Atc", "SELECT sum(xact_commit) FROM pg_stat_database", args.db],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.strip())


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=25432, help="where the client connects (server or PgBouncer)")
    p.add_argument("--stats-port", type=int, help="the server itself, for xact_commit (default --port)")
    p.add_argument("--user", default="bench")
    p.add_argument("--db", default="bench")
    p.add_argument("-c", "--clients", type=int, default=1000)
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.add_argument("--warmup", type=float, default=8, help="seconds from the moment every client is connected to the window")
    p.add_argument("--window", type=float, default=15, help="seconds measured")
    p.add_argument("--top", type=int, default=6, help="command names shown")
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    p.add_argument("--perf", metavar="FILE", help="also profile the window with perf; summary to FILE")
    p.add_argument("--sysbench", metavar="SCRIPT",
                   help="run sysbench SCRIPT (oltp_read_write, oltp_read_only) instead of pgbench, "
                        "-c threads, on the tables bench.py prepares")
    p.add_argument("--ps-mode", default="auto", choices=["auto", "disable"],
                   help="sysbench --db-ps-mode: auto prepares on the server, disable (through PgBouncer) does not")
    p.add_argument("--sysbench-tables", type=int, default=SYSBENCH_TABLES)
    p.add_argument("--sysbench-table-size", type=int, default=SYSBENCH_TABLE_SIZE)
    a, extra = p.parse_known_args(argv)
    extra = [x for x in extra if x != "--"]
    a.stats_port = a.stats_port or a.port

    # The client runs until the window is over and is then stopped: pgbench
    # counts -T from its start, connections included, and opening thousands
    # of them can take longer than the warm-up (the window would then run
    # past pgbench's end and count its backends' exits). pgbench's first
    # progress line (-P 1) and sysbench's "Threads started!" come once every
    # client is connected.
    if a.sysbench:
        cmd = (["sysbench", a.sysbench]
               + sysbench_args(a.host, a.port, a.user, a.db, a.sysbench_tables, a.sysbench_table_size)
               + ["--threads=%d" % a.clients, "--time=36000", "--db-ps-mode=%s" % a.ps_mode,
                  "--report-interval=1"] + extra + ["run"])
        ready = "Threads started!"
    else:
        cmd = [os.path.join(a.pg_bin, "pgbench"), "-h", a.host, "-p", str(a.port), "-U", a.user, "-n",
               "-c", str(a.clients), "-j", str(a.jobs), "-P", "1", "-T", "36000"] + extra + [a.db]
        ready = "progress:"
    client = os.path.basename(cmd[0])
    started = time.time()
    bench = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in bench.stdout:
        lines.append(line)
        if line.startswith(ready):
            break
    else:
        sys.exit("%s ended before it started:\n%s" % (client, "".join(lines)))
    connected = time.time() - started
    drain = threading.Thread(target=lambda: lines.extend(bench.stdout), daemon=True)
    drain.start()
    time.sleep(a.warmup)
    # Reading /proc for thousands of processes takes seconds: each process's
    # CPU is counted from about the middle of the first reading to about the
    # middle of the second, and the commits (read before the first and after
    # the second) are scaled to that span.
    ta, n0, m0 = time.time(), commits(a), machine_cpu()
    s0 = snapshot()
    tb = time.time()
    if a.perf:
        # perf's own CPU time lands in the window too; it shows as "perf".
        subprocess.run(["perf", "record", "-a", "-g", "-F", str(PERF_HZ), "-o", a.perf + ".data", "--",
                        "sleep", str(a.window)], capture_output=True, check=True)
    else:
        time.sleep(a.window)
    tc = time.time()
    s1 = snapshot()
    n1, m1, td = commits(a), machine_cpu(), time.time()
    if bench.poll() is not None:
        sys.exit("%s ended during the window:\n%s" % (client, "".join(lines)))
    bench.terminate()
    bench.wait()

    hz = os.sysconf("SC_CLK_TCK")

    def commits_in(span):
        """The commits of `span` seconds at the rate from ta to td."""
        return max(round((n1 - n0) * span / (td - ta)), 1)

    wall = (tc + td) / 2 - (ta + tb) / 2
    n = commits_in(wall)
    total = m1[0] - m0[0]
    print("%s: %s (stopped after the window)" % (client, " ".join(cmd[1:])))
    print("clients connected after %.1f s; window %.1f s (reading /proc took %.1f s and %.1f s), "
          "%d commits (%.0f/s)" % (connected, wall, tb - ta, td - tc, n, n / wall))
    print("machine (from the first reading's start to the second's end): "
          + ", ".join("%s %.1f%%" % (name, 100.0 * (m1[1][i] - m0[1][i]) / total)
                      for i, name in enumerate(STAT_NAMES)))
    agg = {}
    for pid, (comm, cpu, flt, vcs, ivcs) in s1.items():
        if pid in s0 and s0[pid][0] == comm:
            o = s0[pid]
            x = agg.setdefault(comm, [0, 0, 0, 0, 0])
            x[0] += cpu - o[1]
            x[1] += flt - o[2]
            x[2] += vcs - o[3]
            x[3] += ivcs - o[4]
            x[4] += 1
    print("%-22s %6s %7s   per commit: %8s %7s %6s %6s" % ("process", "count", "cores", "CPU µs", "minflt",
                                                           "vcsw", "ivcsw"))
    for comm, x in sorted(agg.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print("%-22s %6d %7.2f   %22.0f %7.1f %6.2f %6.2f" % (
            comm[:22], x[4], x[0] / hz / wall, x[0] / hz / n * 1e6, x[1] / n, x[2] / n, x[3] / n))
    if a.perf:
        # perf saw only the sleep between the readings.
        perf_summary(a.perf, " ".join(cmd), n / wall, commits_in(tc - tb))


def per_commit_table(path, commits):
    """CPU µs per commit by command, library and symbol (self time): each sample
    stands for 1/PERF_HZ s of one CPU. Written as path.syms.tsv, which
    bench/perf_diff.py compares between two profiles."""
    r = subprocess.run(["perf", "report", "-i", path + ".data", "--no-children", "--stdio", "-g", "none",
                        "-n", "--sort", "comm,dso,symbol", "--field-separator", "\t"],
                       capture_output=True, text=True, check=True)
    rows = []
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if line.startswith("#") or len(f) < 5:
            continue
        rows.append((f[2].strip(), f[3].strip(), f[4].strip(), int(f[1]) * 1e6 / PERF_HZ / commits))
    with open(path + ".syms.tsv", "w") as out:
        out.write("comm\tdso\tsymbol\tus_per_commit\n")
        for comm, dso, sym, us in sorted(rows, key=lambda x: -x[3]):
            out.write("%s\t%s\t%s\t%.2f\n" % (comm, dso, sym, us))


def perf_summary(path, command, tps, commits):
    """Write the profile's summary next to its data file, and print its head."""
    def report(*args, limit="0.3"):
        r = subprocess.run(["perf", "report", "-i", path + ".data", "--no-children", "--stdio", "-g", "none",
                            "--percent-limit", limit] + list(args), capture_output=True, text=True, check=True)
        return "\n".join(line for line in r.stdout.splitlines() if line.strip() and not line.startswith("#"))
    parts = [
        "# perf record -a -g over the window of: %s (%.0f commits/s)" % (command, tps),
        "# share of all samples, by command and library (perf report --sort comm,dso)",
        report("--sort", "comm,dso"),
        "",
        "# postgres processes, by library and symbol (--comm postgres --sort dso,symbol)",
        report("--comm", "postgres", "--sort", "dso,symbol"),
        "",
        "# pg_gatekeeper.so alone (--dsos pg_gatekeeper.so --sort symbol)",
        report("--dsos", "pg_gatekeeper.so", "--sort", "symbol", limit="0.02"),
    ]
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
    per_commit_table(path, commits)
    os.unlink(path + ".data")
    print("\n".join(parts[1:3]))


if __name__ == "__main__":
    main(sys.argv[1:])
