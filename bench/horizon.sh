#!/usr/bin/env bash
# How far back the sessions hold the cleanup horizon under TPC-B, and what
# that leaves in the hot tables: the oldest backend_xmin in
# pg_stat_activity, sampled each second, and the pages of pgbench_branches
# and pgbench_tellers after each run (each starts from VACUUM FULL), beside
# the steady tps. Builds of the library can be compared side by side: each
# --lib is installed in turn (the installed one is restored at exit), the
# server restarted, round by round.
#
#   bash bench/horizon.sh                          # the installed library, 1000 clients, 3 rounds
#   bash bench/horizon.sh -c 64 -s 20 -r 3 --lib old=/tmp/old.so --lib new=/tmp/new.so --out DIR
#   bash bench/horizon.sh --bare                   # and bare PostgreSQL in each round
#   bash bench/horizon.sh -M prepared -c 64        # pgbench's protocol (simple)
#
# -c clients (1000), -s seconds a run (30; tps counts from the third 5 s
# progress report on), -r rounds (3), --scale (10), -M pgbench's query
# protocol (simple, extended or prepared), --pg (15), --out DIR
# (results.tsv and the command; default: print only). Durable commits, the
# server's defaults otherwise, max_connections above the clients; a
# throw-away cluster on port 5499. Must run as root (runuser, the library
# directory).
set -euo pipefail
failures=0
cd "$(dirname "$0")/.."
clients=1000 secs=30 rounds=3 scale=10 pg=15 out= bare=0 libs=() protocol=simple
cmdline="bash bench/horizon.sh $*"
while [[ $# -gt 0 ]]; do
  case $1 in
    -c) clients=$2; shift 2 ;;
    -s) secs=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    -M) protocol=$2; shift 2 ;;
    --pg) pg=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --bare) bare=1; shift ;;
    --lib) libs+=("$2"); shift 2 ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
case $protocol in simple | extended | prepared) ;; *) echo "-M: simple, extended or prepared" >&2; exit 2 ;; esac
PG_MAJOR=$pg source scripts/pg_env.sh
source scripts/cluster.sh
source bench/libswap.sh
libswap_check "${libs[@]}"
libswap_save
[ ${#libs[@]} -gt 0 ] || libs=("installed=$INSTALLED_LIB")
dir=$(cluster_dir horizon)
port=5499
cleanup() {
  local rc=$?
  # A failed run shows why before its cluster goes.
  [ "$rc" = 0 ] || tail -n 20 "$dir/server.log" >&2 2>/dev/null || true
  cluster_drop "$dir" >/dev/null 2>&1 || true
  libswap_restore
}
trap cleanup EXIT

cluster_init "$dir" $port "max_connections = $((clients + 50))" "shared_buffers = 256MB" \
  "max_wal_size = 4GB" "checkpoint_timeout = 30min" "listen_addresses = '127.0.0.1'" >/dev/null
conf=$dir/data/postgresql.conf
psql_pg() { as_pg "$PG_BINDIR/psql" -X -q -At -h 127.0.0.1 -p $port -U postgres postgres "$@"; }
start_with() { # preload (a library file to install first, or nothing)
  cluster_stop "$dir" >/dev/null 2>&1 || true
  sed -i '/^shared_preload_libraries/d' "$conf"
  if [ -n "$1" ]; then
    libswap_use "$1"
    echo "shared_preload_libraries = 'pg_gatekeeper'" >> "$conf"
  fi
  cluster_start "$dir" >/dev/null
}
start_with "$INSTALLED_LIB"
psql_pg -c "CREATE EXTENSION IF NOT EXISTS pg_gatekeeper" \
  -c "DO \$\$ BEGIN CREATE ROLE bench LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$" \
  -c "GRANT ALL ON SCHEMA public TO bench"
as_pg "$PG_BINDIR/pgbench" -i -q -s "$scale" -h 127.0.0.1 -p $port -U bench postgres >/dev/null 2>&1

configs=("${libs[@]}")
[ "$bare" = 0 ] || configs+=("bare=")
header="round	config	clients	protocol	steady_tps	run_tps	latency_ms	xmin_age_median	xmin_age_max	branches_pages	tellers_pages"
rows=()
echo "$header"
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    name=${c%%=*} lib=${c#*=}
    start_with "$lib"
    psql_pg -c "VACUUM FULL pgbench_branches, pgbench_tellers" -c "CHECKPOINT"
    samples=$(mktemp)
    ( while sleep 1; do
        psql_pg -c "SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity
                     WHERE backend_type = 'client backend'" 2>/dev/null || true
      done > "$samples" ) &
    sampler=$!
    rc=0
    output=$(as_pg "$PG_BINDIR/pgbench" -n -M "$protocol" -c "$clients" -j 2 -T "$secs" -P 5 \
      -h 127.0.0.1 -p $port -U bench postgres 2>&1) || rc=$?
    progress=$(grep '^progress' <<<"$output" || true)
    # The whole run's tps and average latency, from pgbench's summary: a
    # client thread that stalls prints no progress report meanwhile.
    run_tps=$(awk '/^tps = / {printf "%.0f", $3}' <<<"$output")
    latency=$(awk '/^latency average/ {print $4}' <<<"$output")
    kill $sampler 2>/dev/null; wait $sampler 2>/dev/null || true
    tps=$(awk '{t[++n]=$4} END{s=0;c=0;for(i=3;i<=n;i++){s+=t[i];c++} if(c) printf "%.0f", s/c; else print "NA"}' <<<"$progress")
    ages=$(sort -n "$samples" | awk '{a[++n]=$1} END{if(n) printf "%d\t%d", a[int((n+1)/2)], a[n]; else printf "NA\tNA"}')
    rm -f "$samples"
    pages=$(psql_pg -c "SELECT pg_relation_size('pgbench_branches')/8192 || E'\t' || pg_relation_size('pgbench_tellers')/8192")
    # A run that failed (pgbench's status, or a transaction it counted as
    # failed) has no figures: its row says so, and the script ends with 1.
    if ((rc != 0)) || grep -Eq '^number of failed transactions: [1-9]' <<<"$output"; then
      echo "pgbench failed (status $rc):" >&2
      tail -n 5 <<<"$output" >&2
      tps=failed run_tps=failed latency=failed failures=1
    fi
    row="$r	$name	$clients	$protocol	$tps	${run_tps:-NA}	${latency:-NA}	$ages	$pages"
    rows+=("$row")
    echo "$row"
  done
done
if [ -n "$out" ]; then
  mkdir -p "$out"
  { echo "$header"; printf '%s\n' "${rows[@]}"; } > "$out/results.tsv"
  { echo "command: $cmdline"; echo "PostgreSQL: $("$PG_BINDIR/postgres" --version)"; echo "CPUs: $(nproc)";
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; date -u +"finished: %FT%TZ"; } > "$out/run.txt"
fi
exit $((failures > 0))
