"""Helpers shared by the benchmark's modules: logging, running commands (as
the postgres user for servers), the CPU time of a process, ports, and
percentiles."""

import math
import os
import socket
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def machine_cpu():
    """(busy, idle) ticks of the whole machine from /proc/stat (idle includes
    iowait), the CPU pressure stall total ("some", microseconds) from
    /proc/pressure/cpu, or None where the kernel has no PSI, and the iowait
    ticks (part of idle)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy, idle = v[0] + v[1] + v[2] + sum(v[5:8]), v[3] + v[4]
    some = None
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some "):
                    some = int(line.split("total=")[1])
    except (OSError, ValueError, IndexError):
        pass
    return busy, idle, some, v[4]


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
# CPU sets (--pin)

def parse_cpu_list(s):
    """'0-2,5' -> {0, 1, 2, 5} (the format of taskset -c and Cpus_allowed_list)."""
    cpus = set()
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_list(cpus):
    """{0, 1, 2, 5} -> '0-2,5'."""
    out, run_ = [], []
    for c in sorted(cpus):
        if run_ and c == run_[-1] + 1:
            run_.append(c)
            continue
        if run_:
            out.append(str(run_[0]) if len(run_) == 1 else "%d-%d" % (run_[0], run_[-1]))
        run_ = [c]
    if run_:
        out.append(str(run_[0]) if len(run_) == 1 else "%d-%d" % (run_[0], run_[-1]))
    return ",".join(out)


def proc_cpus(pid):
    """A process's Cpus_allowed_list (what it may run on), or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def pin_split(spec, available):
    """(client CPUs, server CPUs) for --pin: SPEC 'auto' puts pgbench on the
    first quarter of the available CPUs (at least one) and the server and
    PgBouncer on the rest; 'CLIENT:SERVER' names both sets (taskset -c lists)."""
    available = sorted(available)
    if spec == "auto":
        if len(available) < 2:
            raise ValueError("--pin needs at least 2 CPUs (this process may use %s)" % cpu_list(available))
        n = max(1, len(available) // 4)
        return set(available[:n]), set(available[n:])
    client, sep, server = spec.partition(":")
    if not sep:
        raise ValueError("--pin takes CLIENT:SERVER CPU lists, e.g. 0:1-3")
    client, server = parse_cpu_list(client), parse_cpu_list(server)
    if not client or not server or client & server:
        raise ValueError("--pin %s: both sets must be non-empty and disjoint" % spec)
    if not (client | server) <= set(available):
        raise ValueError("--pin %s: this process may only use CPUs %s" % (spec, cpu_list(available)))
    return client, server


def pinned(cpus, cmd):
    """cmd run on the CPUs `cpus` (a taskset -c list), or as is when None."""
    return ["taskset", "-c", cpus] + cmd if cpus else cmd
