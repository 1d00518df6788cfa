#!/usr/bin/env bash
# Where the CPU goes per commit: pg_gatekeeper against a PgBouncer pool (or
# against bare PostgreSQL, with --bare), side by side, with
# bench/profile_cpu.py (per-process CPU, faults and context switches per
# committed transaction, over a steady-state window).
#
#   bash bench/run.sh --smoke --keep     # once: leaves a cluster in the work directory
#   bash bench/profile_pair.sh           # 1000 TPC-B clients, pool 32, 3 rounds each way
#   bash bench/profile_pair.sh -c 256 -p 8 -r 2 -- -f bench/slow_client.sql -s 10
#   bash bench/profile_pair.sh --bare -c 1000 -r 2 -- -f bench/slow_client.sql -s 10
#   bash bench/profile_pair.sh -r 2 --perf DIR   # also perf profiles: DIR/gate-1000-1.txt, DIR/pool-1000-1.txt...
#   bash bench/profile_pair.sh -c 4000 -p 8 --pin 0:1 --warmup 45   # pgbench on CPU 0, the server on 1
#   bash bench/profile_pair.sh --sysbench oltp_read_write -c 256 -r 2 --perf DIR   # sysbench, 256 threads
#
# --sysbench SCRIPT runs sysbench instead of pgbench (prepared statements
# straight at the server, none through PgBouncer, as bench.py does), on 4
# sbtest tables of 100000 rows, made here when the cluster has others.
# --pin CLIENT:SERVER starts the server (and so every backend) and PgBouncer
# under taskset on SERVER and pgbench on CLIENT, as bench.py --pin does.
# max_connections is raised to the clients plus 100 where it is lower.
# Reloads the pgbench tables at --scale (10) when the cluster has another
# scale (the smoke run loads scale 1). Then, ROUNDS times, one window of the
# server with the library (pgbench straight at it) and one of the server
# without it and PgBouncer in front (with --bare: pgbench straight at it),
# the gate first in odd rounds and second in even ones. After each
# gated window it prints the gate's ticket count and queue from
# gatekeeper.history.
# Must run as root (runuser, vm.nr_hugepages); restores vm.nr_hugepages.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$(dirname "$0")/../scripts/pg_env.sh"
PG_BIN=${PG_BIN:-$PG_BINDIR}
source "$here/../scripts/cluster.sh"   # as_pg; the cluster itself is bench/run.sh's
work=/var/tmp/pg_gatekeeper_bench
clients=1000 pool=32 rounds=3 scale=10 warmup=15 window=15 bare=0 perfdir= pin= sysbench=
# bench.py's sysbench tables, named once in bench/sysbench.py
read -r sb_tables sb_size < <(python3 "$here/sysbench.py" defaults)
while [[ $# -gt 0 ]]; do
  case $1 in
    -c) clients=$2; shift 2 ;;
    -p) pool=$2; shift 2 ;;
    --bare) bare=1; shift ;;
    -r) rounds=$2; shift 2 ;;
    -w) work=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --perf) perfdir=$2; shift 2 ;;
    --) shift; break ;;
    --pin) pin=$2; shift 2 ;;
    --sysbench) sysbench=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

# --pin: where the client and the server run (empty: anywhere).
on_client=() on_server=()
if [[ -n $pin ]]; then
  [[ $pin == *:* ]] || { echo "--pin wants CLIENT:SERVER, e.g. 0:1" >&2; exit 2; }
  on_client=(taskset -c "${pin%%:*}") on_server=(taskset -c "${pin#*:}")
fi
data=$work/data ini=$work/pgbouncer-$pool/pgbouncer.ini
if [[ ! -f $data/PG_VERSION ]] || { ((!bare)) && [[ ! -f $ini ]]; }; then
  echo "no cluster or no PgBouncer pool $pool in $work: run 'bash bench/run.sh --smoke --keep' first" >&2
  exit 2
fi
# The ports the bench run chose, from its own configuration files.
port=$(sed -n 's/^port = \([0-9]*\).*/\1/p' "$data/postgresql.conf" | tail -1)
bport=
if [[ -f $ini ]]; then bport=$(sed -n 's/^listen_port = \([0-9]*\)/\1/p' "$ini"); fi

unset RUST_BACKTRACE
ulimit -n "$(ulimit -Hn)"
hp_before=$(cat /proc/sys/vm/nr_hugepages)
# As bench/run.sh does: huge pages for the shared memory (the larger, with the library).
maxconn=$(sed -n 's/^max_connections = \([0-9]*\).*/\1/p' "$data/postgresql.conf" | tail -1)
maxconn=$(( ${maxconn:-100} > clients + 100 ? ${maxconn:-100} : clients + 100 ))
need=$(as_pg "$PG_BIN/postgres" -D "$data" -c shared_preload_libraries=pg_gatekeeper \
         -c max_connections=$maxconn -C shared_memory_size_in_huge_pages)
echo $((hp_before + need)) > /proc/sys/vm/nr_hugepages

pg() { as_pg "${on_server[@]}" "$PG_BIN/pg_ctl" -D "$data" -l "$work/postgres.log" -w "$@" >/dev/null; }
# bench/run.sh leaves the settings of its last configuration in
# bench_config.conf (the library preloaded, when that was a gate): empty it
# for these runs, so that the library is loaded only where asked for on the
# command line, and the pool and bare runs are really without it.
bconf=$data/bench_config.conf
[[ -f $bconf ]] && cp "$bconf" "$work/bench_config.conf.saved"
: > "$bconf"
chown postgres "$bconf"
cleanup() {
  [[ -f $work/bench_config.conf.saved ]] && mv "$work/bench_config.conf.saved" "$bconf"
  [[ -f $work/pgbouncer-$pool/pgbouncer.pid ]] && kill "$(cat "$work/pgbouncer-$pool/pgbouncer.pid")" 2>/dev/null || true
  pg -m fast stop 2>/dev/null || true
  echo "$hp_before" > /proc/sys/vm/nr_hugepages
}
trap cleanup EXIT

psql() { as_pg "$PG_BIN/psql" -h "$work/sock" -p "$port" "$@"; }

pg -o "-c huge_pages=on -c max_connections=$maxconn" start
if [[ -n $sysbench ]]; then
  tables=$(psql -d bench -Atc "SELECT count(*) FROM pg_class WHERE relkind = 'r' AND relname ~ '^sbtest[0-9]+$'")
  rows=$(psql -d bench -Atc "SELECT count(*) FROM sbtest1" 2>/dev/null || echo 0)
  if [[ $tables != "$sb_tables" || $rows != "$sb_size" ]]; then
    echo "preparing sysbench's $sb_tables tables of $sb_size rows ..."
    mapfile -t sb_cleanup < <(python3 "$here/sysbench.py" cleanup "$port" "$sb_tables" "$sb_size")
    mapfile -t sb_prepare < <(python3 "$here/sysbench.py" prepare "$port" "$sb_tables" "$sb_size" "$(nproc)")
    "${sb_cleanup[@]}" >/dev/null
    "${sb_prepare[@]}" >/dev/null
    psql -d bench -qc "VACUUM ANALYZE" -c "CHECKPOINT"
  fi
elif [[ $(psql -d bench -Atc "SELECT count(*) FROM pgbench_branches") != "$scale" ]]; then
  echo "loading pgbench -i -s $scale ..."
  "$PG_BIN/pgbench" -i -q -s "$scale" -h "$work/sock" -p "$port" -U bench bench >/dev/null 2>&1
  psql -d bench -qc "VACUUM ANALYZE" -c "CHECKPOINT"
fi
pg -m fast stop

# PgBouncer's configuration from the bench run, with room for these clients.
bini=$work/pgbouncer-$pool/profile.ini
if ((!bare)); then
  sed "s/^max_client_conn = .*/max_client_conn = $((clients + 100))/" "$ini" > "$bini"
  chown postgres "$bini"
fi

client=()
[[ -n $sysbench ]] && client=(--sysbench "$sysbench" --sysbench-tables "$sb_tables" --sysbench-table-size "$sb_size")
prof() { "${on_client[@]}" python3 "$here/profile_cpu.py" -c "$clients" --warmup "$warmup" --window "$window" --top 6 \
           "${client[@]}" "$@"; }
# --perf NAME: a perf profile of the window into the perf directory, if asked for.
perf_to() { [[ -n $perfdir ]] && echo --perf "$perfdir/$1-$clients-$r.txt"; true; }
[[ -n $perfdir ]] && mkdir -p "$perfdir"

# The order alternates between rounds, as bench.py's does, so that a drift
# over the run does not fall on one side only.
run_gate() {
  echo "=== round $r: pg_gatekeeper (defaults), $clients clients"
  pg -o "-c shared_preload_libraries=pg_gatekeeper -c huge_pages=on -c max_connections=$maxconn" start
  psql -d bench -qc "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_gatekeeper"
  prof --port "$port" $(perf_to gate) "$@"
  psql -d bench -Atc \
    "SELECT format('gate over the last $window s: tickets avg %s (min %s, max %s), running avg %s, queued avg %s',
            round(avg(tickets), 1), min(tickets), max(tickets), round(avg(running), 1), round(avg(queued), 1))
     FROM gatekeeper.history WHERE sample_time > now() - interval '$window s'"
  pg -m fast stop
}
run_other() {
  pg -o "-c huge_pages=on -c max_connections=$maxconn" start
  if ((bare)); then
    echo "=== round $r: bare PostgreSQL, $clients clients"
    prof --port "$port" $(perf_to bare) "$@"
  else
    echo "=== round $r: PgBouncer pool $pool, $clients clients"
    # runuser resets the soft open-file limit to 1024: too few for 1000 clients.
    as_pg "${on_server[@]}" prlimit --nofile=$((clients + pool + 200)): pgbouncer -d "$bini"
    prof --port "$bport" --stats-port "$port" --ps-mode disable $(perf_to pool) "$@"
    kill "$(cat "$work/pgbouncer-$pool/pgbouncer.pid")"
    for _ in $(seq 100); do [[ -f $work/pgbouncer-$pool/pgbouncer.pid ]] || break; sleep 0.1; done
  fi
  pg -m fast stop
}
for r in $(seq "$rounds"); do
  if ((r % 2)); then
    run_gate "$@"
    run_other "$@"
  else
    run_other "$@"
    run_gate "$@"
  fi
done
