#!/usr/bin/env bash
# The worker's own CPU time against the number of connection slots. While
# sessions queue, the worker samples the holders every sample_interval
# under the gate's lock (docs/DESIGN.md §6); this measures what a sample
# costs as max_connections grows. TPC-B at CLIENTS clients (more than the
# limit, so that sessions queue the whole run) on a throw-away cluster,
# durable commits, one run per library and max_connections value in each
# round, the order alternating between rounds.
#
#   bash bench/worker_scan.sh                       # the installed library, 1000 and 4000 slots, 3 rounds
#   bash bench/worker_scan.sh --lib old=A.so --lib new=B.so --slots "1000 4000 10000" --out DIR
#
# --lib NAME=FILE installs FILE as the server's pg_gatekeeper library for
# NAME's runs (an A/B of two builds of the same version) and puts the
# library that was installed back at the end. Without --lib the installed
# library runs, named "installed".
# Writes DIR/results.csv (one row per run) and DIR/summary.md (medians),
# DIR defaulting to a new directory under /tmp. Must run as root.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command="bash bench/worker_scan.sh $*"
PG_MAJOR=15 slots="1000 4000" clients=64 duration=20 rounds=3 out= libs=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --pg) PG_MAJOR=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --lib) libs+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
((duration >= 12)) || { echo "--duration must be at least 12 s (5 s each side of the window)" >&2; exit 2; }
source "$here/../scripts/pg_env.sh"
source "$here/../scripts/cluster.sh"
source "$here/libswap.sh"
libswap_check "${libs[@]}"
libswap_save
((${#libs[@]})) || libs=("installed=$INSTALLED_LIB")
names=() files=()
for l in "${libs[@]}"; do
  names+=("${l%%=*}") files+=("${l#*=}")
done
out=${out:-$(mktemp -d /tmp/worker_scan.XXXXXX)}
mkdir -p "$out"

dir=$(cluster_dir pg_gatekeeper_worker_scan)
cleanup() {
  cluster_drop "$dir" || true
  libswap_restore
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
cluster_init "$dir" "$port" "shared_preload_libraries = 'pg_gatekeeper'" "shared_buffers = 256MB" \
  "max_wal_size = 4GB" "checkpoint_timeout = 30min" "synchronous_commit = on"
cluster_start "$dir"
cluster_psql "$dir" postgres -d postgres -c "CREATE ROLE bench LOGIN" -c "CREATE DATABASE bench OWNER bench"
as_pg "$PG_BINDIR/pgbench" -h "$dir" -p "$port" -U bench -i -q -s 10 bench >/dev/null 2>&1
cluster_stop "$dir"

# The worker's CPU time in nanoseconds (schedstat's first field).
worker_ns() {
  local pid
  pid=$(cluster_psql "$dir" postgres -d postgres \
    -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
  [[ -n $pid ]] || { echo "no pg_gatekeeper worker running" >&2; exit 1; }
  echo "$pid $(cut -d' ' -f1 "/proc/$pid/schedstat")"
}

echo "round,library,max_connections,tps,worker_ms_per_s" > "$out/results.csv"
window=$((duration - 10))
for ((r = 1; r <= rounds; r++)); do
  order=("${!names[@]}")
  if ((r % 2 == 0)); then mapfile -t order < <(printf '%s\n' "${order[@]}" | tac); fi
  for n in $slots; do
    for k in "${order[@]}"; do
      libswap_use "${files[k]}"
      cluster_start "$dir" -o "-c max_connections=$n"
      as_pg "$PG_BINDIR/pgbench" -h "$dir" -p "$port" -U bench -c "$clients" -j 2 -T "$duration" -n bench \
        > "$out/pgbench-$r-${names[k]}-$n.log" 2>&1 &
      bench_pid=$!
      sleep 5
      read -r wpid a < <(worker_ns)
      t0=$(date +%s%N)
      sleep "$window"
      b=$(cut -d' ' -f1 "/proc/$wpid/schedstat")
      t1=$(date +%s%N)
      wait "$bench_pid"
      cluster_stop "$dir"
      tps=$(grep -oP 'tps = \K[0-9.]+' "$out/pgbench-$r-${names[k]}-$n.log" | head -1)
      ms=$(python3 -c "print(round(($b - $a) / 1e6 / (($t1 - $t0) / 1e9), 3))")
      echo "$r,${names[k]},$n,$tps,$ms" | tee -a "$out/results.csv"
    done
  done
done

machine="$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
software="$("$PG_BINDIR/postgres" --version), pg_gatekeeper $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 - "$out" "$clients" "$duration" "$rounds" "$command" "$machine" "$software" <<'EOF' | tee "$out/summary.md"
import csv, statistics, sys, collections
out, clients, duration, rounds, command, machine, software = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
cells = collections.defaultdict(list)
for r in rows:
    cells[(r["library"], int(r["max_connections"]))].append(r)
print(f"## The worker's CPU against max_connections\n")
print(f"- **Command:** `{command}`")
print(f"- **Machine:** {machine}; {software} (the checkout; `--lib` names the libraries)")
print(f"- **Run:** TPC-B, scale 10, {clients} clients over the Unix socket, {duration} s per run (the worker "
      f"measured over its middle, 5 s off each end), {rounds} round(s), the libraries' order alternating "
      f"between rounds, durable commits, the gate at its defaults\n")
print("| library | max_connections | worker ms CPU per s (median, range) | tps (median) |")
print("|---|---:|---|---:|")
for (lib, n), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    ms = [float(r["worker_ms_per_s"]) for r in rs]
    tps = [float(r["tps"]) for r in rs]
    print(f"| {lib} | {n} | {statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f}) | {statistics.median(tps):.0f} |")
EOF
