#!/usr/bin/env bash
# The gate's share of the machine's CPU with several clients and nothing
# queued, from a system-wide `perf` profile. Callgrind
# (bench/overhead_callgrind.sh) counts instructions in one backend; this
# looks at concurrent backends, where the gate's shared lock could also cost
# through contention or cache-line transfers between CPUs.
#
#   bash bench/overhead_perf.sh [CLIENTS [SECONDS [WORKLOAD]]]
#   bash bench/overhead_perf.sh 8 10 select     # the defaults
#   bash bench/overhead_perf.sh 8 10 tpcb
#
# A throw-away cluster with the library preloaded and the default (automatic)
# limit, pgbench -i -s 10, CLIENTS pgbench clients (-j 2) on the same
# machine; after 3 s of warm-up, SECONDS of `perf record -a` at 999 Hz.
# It reports:
# - the samples in pg_gatekeeper.so itself (the hooks, the admission core);
# - the samples in PostgreSQL's LWLock functions, called by anyone: the
#   gate's lock is one LWLock among the server's own (buffer mapping,
#   ProcArray, lock manager), so this is an upper bound for the gate's part;
# - the sum, an upper bound for what the gate costs;
# - the gate's counters: that the transactions went through it, and whether
#   any waited.
# Must run as root (runuser); installs perf if missing. Uses the installed
# library, which must be a release build.
set -euo pipefail
clients=${1:-8}
seconds=${2:-10}
workload=${3:-select}
case $workload in
  select) wargs=(-S -M prepared) ;;
  tpcb) wargs=(-M simple) ;;
  *) echo "workload must be select or tpcb" >&2; exit 2 ;;
esac
source "$(dirname "$0")/../scripts/pg_env.sh"
BIN=$PG_BINDIR
source "$(dirname "${BASH_SOURCE[0]}")/require_release.sh"
require_release "$BIN"
command -v perf >/dev/null || { source "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt_install.sh" && apt_install linux-perf; }

source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cluster.sh"
work=$(cluster_dir pg_gatekeeper_perf)
# The first port from 27500 on that nothing listens on (another cluster may).
port=
for p in $(seq 27500 27599); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[[ -n $port ]] || { echo "no free port in 27500-27599" >&2; exit 1; }
trap 'cluster_drop "$work"' EXIT
cluster_init "$work" "$port" "listen_addresses = '127.0.0.1'" "max_connections = $((clients + 50))" \
  "shared_buffers = '256MB'" "synchronous_commit = off" "shared_preload_libraries = 'pg_gatekeeper'"
cluster_start "$work"
psql_() { local db=$1; shift; as_pg "$BIN/psql" -X -h "$work" -p "$port" -d "$db" -qAt "$@"; }
psql_ postgres -c "CREATE ROLE bench LOGIN" -c "CREATE DATABASE bench OWNER bench"
psql_ bench -c "CREATE EXTENSION pg_gatekeeper"
as_pg "$BIN/pgbench" -i -q -s 10 -h "$work" -p "$port" -U bench bench > "$work/init.log" 2>&1 ||
  { cat "$work/init.log"; exit 1; }
psql_ bench -c "VACUUM ANALYZE" -c "CHECKPOINT" -c "SELECT gatekeeper.reset()" >/dev/null

# runuser resets the soft open-file limit to 1024: too few for many clients.
as_pg prlimit --nofile=$((clients + 1024)): "$BIN/pgbench" -n -c "$clients" -j 2 -T $((seconds + 5)) "${wargs[@]}" \
  -h 127.0.0.1 -p "$port" -U bench bench > "$work/pgbench.out" 2>&1 &
pgb=$!
sleep 3
perf record -a -F 999 -o "$work/perf.data" -- sleep "$seconds" 2>/dev/null >/dev/null
wait "$pgb"
perf report -i "$work/perf.data" --no-children --sort dso,sym -g none --stdio 2>/dev/null > "$work/report.txt"

echo "# bash bench/overhead_perf.sh $clients $seconds $workload   ($(date -u +%F), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
echo "pgbench $workload, $clients clients, -j 2: $(grep -o 'tps = [0-9.]*' "$work/pgbench.out" | head -1) (under perf)"
psql_ bench -c "SELECT format('gate: max_active %s, tickets %s; %s admitted, %s waited, %s overflow',
                        max_active, tickets, admitted_total, waited_total, overflow_total) FROM gatekeeper.status"
awk '
  /^#/ || NF < 4 { next }
  { pct = $1; sub(/%/, "", pct); dso = $2; sym = $NF }
  dso == "pg_gatekeeper.so" { gate += pct }
  dso == "postgres" && sym ~ /^LWLock/ { lw += pct }
  END {
    printf "samples in pg_gatekeeper.so:                 %.2f %% of all CPU samples\n", gate
    printf "samples in LWLock* (all callers, upper bound): %.2f %%\n", lw
    printf "gate, upper bound:                           %.2f %%\n", gate + lw
  }' "$work/report.txt"
echo "top symbols in pg_gatekeeper.so and LWLock*:"
awk '$2 == "pg_gatekeeper.so" || ($2 == "postgres" && $NF ~ /^LWLock/)' "$work/report.txt" | head -12
