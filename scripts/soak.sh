#!/usr/bin/env bash
# Soak test of pg_gatekeeper; not part of CI.
#
# Starts a throw-away cluster with pg_gatekeeper preloaded, runs pgbench
# (TPC-B, scale 10) with 1000 connections of a non-superuser role through the
# gate for 10 minutes, and records:
#   - the size of the pg_gatekeeper shared-memory segment (pg_shmem_allocations);
#   - RSS of the postmaster, of every gated backend (count, total, mean, max),
#     and of a fixed sample of backends followed from start to end
#     (VmRSS and RssAnon from /proc/<pid>/status, Pss from smaps_rollup);
#   - RSS and CPU time of the pg_gatekeeper worker;
#   - periodic samples during the run, gatekeeper.status at the end, the
#     pgbench result, and checks: the gate is quiet afterwards, no crash in the
#     server log, the worker never restarted, pgbench had no failed transaction.
# "start" is taken once every client is connected, "end" shortly before
# pgbench stops (the clients are still connected then).
# The summary is printed and written to bench/results/soak-<UTC time>.txt.
#
# Usage (as root, from anywhere):
#   bash scripts/soak.sh                      # 1000 clients, 600 s
#   bash scripts/soak.sh --duration 30 --clients 200     # a short check
# Options:
#   --duration S       seconds of pgbench (-T), default 600
#   --clients N        pgbench clients (-c), default 1000
#   --jobs N           pgbench threads (-j), default 2
#   --scale N          pgbench scale (-i -s), default 10
#   --max-active N     pg_gatekeeper.max_active (default: not set, i.e. auto)
#   --sample-every S   seconds between samples during the run, default 60
#   --backend-sample N backends followed from start to end, default 20
#   --install          build and install the release extension first
#                      (cargo pgrx install --release); default: use the installed one
#   --out FILE         summary file (default bench/results/soak-<UTC time>.txt)
#   --keep             keep the cluster directory (data and server log)
# Exit status: 0 when every check passed, 1 when one failed, 2 on a setup error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
source "$(dirname "$0")/pg_env.sh"
PG_BIN=${PG_BIN:-$PG_BINDIR}
PG_BINDIR=$PG_BIN
source "$here/cluster.sh"
PG_CONFIG=$PG_BIN/pg_config

duration=600 clients=1000 jobs=2 scale=10 max_active= sample_every=60 nsample=20
install=0 keep=0 out=
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --duration) duration=$2; shift ;;
    --clients) clients=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --scale) scale=$2; shift ;;
    --max-active) max_active=$2; shift ;;
    --sample-every) sample_every=$2; shift ;;
    --backend-sample) nsample=$2; shift ;;
    --install) install=1 ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in duration clients jobs scale sample_every nsample; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "--${v//_/-} must be a positive integer" >&2; exit 2; }
done
[[ -z $max_active || $max_active =~ ^[0-9]+$ ]] || { echo "--max-active must be an integer" >&2; exit 2; }
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/soak.sh must run as root (servers run as the postgres user)" >&2
  exit 2
fi
for tool in "$PG_BIN/pgbench" "$PG_BIN/psql" "$PG_BIN/initdb" "$PG_BIN/pg_ctl"; do
  [[ -x $tool ]] || { echo "missing $tool (bash scripts/deps.sh)" >&2; exit 2; }
done

if ((install)); then
  echo "== building and installing the release extension"
  (cd "$repo" && env -u RUST_BACKTRACE cargo pgrx install --release --pg-config "$PG_CONFIG")
fi
so="$("$PG_CONFIG" --pkglibdir)/pg_gatekeeper.so"
[[ -f $so ]] || { echo "pg_gatekeeper is not installed ($so); run with --install" >&2; exit 2; }

# 1000 clients need more than 1024 descriptors in pgbench.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

dir=$(cluster_dir pg_gatekeeper_soak /var/tmp)
data=$dir/data log=$dir/server.log port=5488
pgbench_pid= started=0

sql() { cluster_psql "$dir" postgres -d postgres -c "$1"; }

cleanup() {
  local rc=$?
  if [[ -n $pgbench_pid ]] && kill -0 "$pgbench_pid" 2>/dev/null; then
    kill "$pgbench_pid" 2>/dev/null || true
    wait "$pgbench_pid" 2>/dev/null || true
  fi
  if ((started)); then cluster_stop "$dir"; fi
  if ((keep)); then
    echo "cluster kept in $dir (server log: $log)"
  else
    rm -rf "$dir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# -- measuring --------------------------------------------------------------
hz=$(getconf CLK_TCK)
# Memory of the processes "$@" (after the first argument, 1 to include Pss):
# "count VmRSS_sum RssAnon_sum Pss_sum RssAnon_max", in kB. One cat and one
# awk, whatever the number of processes; processes that are gone are skipped.
mem_sum() {
  local with_pss=$1 pid files=()
  shift
  for pid in "$@"; do
    files+=("/proc/$pid/status")
    ((with_pss)) && files+=("/proc/$pid/smaps_rollup")
  done
  ((${#files[@]})) || { echo "0 0 0 0 0"; return; }
  cat "${files[@]}" 2>/dev/null | awk '
    /^Pid:/ { n++ }
    /^VmRSS:/ { r += $2 }
    /^RssAnon:/ { a += $2; if ($2 > m) m = $2 }
    /^Pss:/ { p += $2 }
    END { printf "%d %d %d %d %d\n", n, r, a, p, m }'
}
# "VmRSS RssAnon Pss" of one process in kB; "- - -" if it is gone.
mem_of() {
  local m
  read -r -a m <<<"$(mem_sum 1 "$1")"
  if ((m[0] == 0)); then echo "- - -"; else echo "${m[1]} ${m[2]} ${m[3]}"; fi
}
# User + system CPU seconds of a process.
cpu_of() {
  [[ -r /proc/$1/stat ]] || { echo "-"; return; }
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$hz" '{ printf "%.2f", ($12 + $13) / hz }'
}
gated_pids() { sql "SELECT pid FROM pg_stat_activity WHERE usename = 'soak'"; }
# RssAnon over every gated backend: "count total_kB mean_kB max_kB".
backends_anon() {
  local m
  # shellcheck disable=SC2046 # one pid per word
  read -r -a m <<<"$(mem_sum 0 $(gated_pids))"
  echo "${m[0]} ${m[2]} $((m[0] ? m[2] / m[0] : 0)) ${m[4]}"
}
# Sums over the followed backends still alive: "alive VmRSS RssAnon Pss".
sample_mem() {
  local m
  read -r -a m <<<"$(mem_sum 1 "${followed[@]}")"
  echo "${m[0]} ${m[1]} ${m[2]} ${m[3]}"
}
kb() { awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.1f MB", k / 1024 }'; }

# -- cluster ----------------------------------------------------------------
echo "== cluster in $dir"
settings=("shared_preload_libraries = 'pg_gatekeeper'" "max_connections = $((clients + 50))"
  "shared_buffers = '256MB'" "fsync = off" "synchronous_commit = off" "log_line_prefix = '%m [%p] %a '")
[[ -n $max_active ]] && settings+=("pg_gatekeeper.max_active = $max_active")
cluster_init --initdb --encoding=UTF8 --initdb --no-locale "$dir" "$port" "${settings[@]}"
# Set first: a start that times out may leave the server starting, and the
# cleanup must stop it before it removes its directory.
started=1
cluster_start "$dir" -t 120
pm_pid=$(head -1 "$data/postmaster.pid")
sql "CREATE EXTENSION pg_gatekeeper; CREATE ROLE soak LOGIN;"
echo "== pgbench -i -s $scale"
"$PG_BIN/pgbench" -h "$dir" -p "$port" -U postgres -i -q -s "$scale" postgres >"$dir/init.log" 2>&1 ||
  { cat "$dir/init.log" >&2; exit 2; }
sql "GRANT ALL ON pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history TO soak;"
sql "SELECT gatekeeper.reset()" >/dev/null

shmem=$(sql "SELECT size FROM pg_shmem_allocations WHERE name = 'pg_gatekeeper'")
shmem_total=$(sql "SELECT sum(allocated_size) FROM pg_shmem_allocations")
worker_pid=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
[[ -n $worker_pid ]] || { echo "the pg_gatekeeper worker is not running" >&2; exit 2; }
read -r -a pm_base <<<"$(mem_of "$pm_pid")"
read -r -a wk_base <<<"$(mem_of "$worker_pid")"
wk_cpu_base=$(cpu_of "$worker_pid")
limit_row=$(sql "SELECT max_active || ' (' || limit_source || ', ' || effective_cpus || ' CPUs)' FROM gatekeeper.status")

# -- run --------------------------------------------------------------------
echo "== pgbench: $clients clients as role soak, $duration s"
"$PG_BIN/pgbench" -h "$dir" -p "$port" -U soak -c "$clients" -j "$jobs" -T "$duration" -n -P 30 \
  postgres >"$dir/pgbench.log" 2>&1 &
pgbench_pid=$!

t_launch=$SECONDS
while :; do
  n=$(sql "SELECT total_sessions FROM gatekeeper.status")
  ((n >= clients)) && break
  kill -0 "$pgbench_pid" 2>/dev/null || { cat "$dir/pgbench.log" >&2; echo "pgbench exited early" >&2; exit 2; }
  ((SECONDS - t_launch > 300)) && { echo "only $n of $clients clients connected after 300 s" >&2; exit 2; }
  sleep 1
done
t_start=$SECONDS
connect_s=$((t_start - t_launch))
mapfile -t followed < <(sql "SELECT pid FROM pg_stat_activity WHERE usename = 'soak' ORDER BY random() LIMIT $nsample")
read -r -a pm_start <<<"$(mem_of "$pm_pid")"
read -r -a wk_start <<<"$(mem_of "$worker_pid")"
read -r -a be_start <<<"$(backends_anon)"
read -r -a fo_start <<<"$(sample_mem)"
wk_cpu_start=$(cpu_of "$worker_pid")
echo "== all $clients clients connected after ${connect_s} s; sampling every $sample_every s"

samples="   t_s  admitted_total   queued  tickets  postmaster_rss  worker_rss  worker_cpu_s  backends_anon_mean  followed_anon_sum"
take_sample() {
  local st pm wk be fo
  st=$(sql "SELECT admitted_total || ' ' || queued || ' ' || tickets FROM gatekeeper.status")
  read -r -a pm <<<"$(mem_of "$pm_pid")"
  read -r -a wk <<<"$(mem_of "$worker_pid")"
  read -r -a be <<<"$(backends_anon)"
  read -r -a fo <<<"$(sample_mem)"
  read -r -a s <<<"$st"
  samples+=$(printf '\n%6d %15s %8s %8s %15s %11s %13s %19s %18s' "$((SECONDS - t_start))" "${s[0]}" "${s[1]}" "${s[2]}" \
    "$(kb "${pm[0]}")" "$(kb "${wk[0]}")" "$(cpu_of "$worker_pid")" "$(kb "${be[2]}")" "$(kb "${fo[2]}")")
}
take_sample
# The end sample is taken while the clients are still connected: pgbench's
# -T clock starts once its clients are connected, at most a second or two
# before t_start.
margin=$((duration / 5)); ((margin < 5)) && margin=5; ((margin > 30)) && margin=30
end_at=$((t_start + duration - margin))
next=$((t_start + sample_every))
while ((SECONDS < end_at)) && kill -0 "$pgbench_pid" 2>/dev/null; do
  sleep 1
  if ((SECONDS >= next && SECONDS < end_at)); then
    take_sample
    next=$((next + sample_every))
  fi
done
read -r -a pm_end <<<"$(mem_of "$pm_pid")"
read -r -a wk_end <<<"$(mem_of "$worker_pid")"
read -r -a be_end <<<"$(backends_anon)"
read -r -a fo_end <<<"$(sample_mem)"
wk_cpu_end=$(cpu_of "$worker_pid")
t_end=$((SECONDS - t_start))
end_during_run=no
kill -0 "$pgbench_pid" 2>/dev/null && end_during_run=yes
take_sample

pgbench_rc=0
wait "$pgbench_pid" || pgbench_rc=$?
pgbench_pid=

# -- after ------------------------------------------------------------------
quiet=no
for _ in $(seq 1 50); do
  [[ $(sql "SELECT admitted = 0 AND queued = 0 FROM gatekeeper.status") == t ]] && { quiet=yes; break; }
  sleep 0.2
done
status_x=$("$PG_BIN/psql" -X -h "$dir" -p "$port" -U postgres -d postgres -c '\x on' -c 'SELECT * FROM gatekeeper.status' | sed '/^Expanded display/d')
worker_now=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
read -r -a pm_after <<<"$(mem_of "$pm_pid")"
crashes=$(grep -cE 'PANIC:|terminated by signal|was terminated by exception|TRAP:|reinitializing' "$log" || true)
worker_starts=$(grep -c 'pg_gatekeeper worker started' "$log" || true)
fatals=$(grep -c 'FATAL:' "$log" || true)
# pgbench may have died before its summary (the check on its status says
# so): a line it did not print is empty here, not the end of the script.
pgbench_line() { sed -n "/$1/{s/$2/\\1/p;q}" "$dir/pgbench.log"; }
tps=$(pgbench_line '^tps = ' '^tps = \([0-9.]*\).*')
processed=$(pgbench_line 'number of transactions actually processed' '.*: \(.*\)')
failed=$(pgbench_line 'number of failed transactions' '.*: \([0-9]*\).*')
latency=$(pgbench_line '^latency average' '.*= \(.*\)')
worker_cpu_run=$(awk -v a="$wk_cpu_start" -v b="$wk_cpu_end" 'BEGIN { printf "%.2f", b - a }')
worker_cpu_pct=$(awk -v c="$worker_cpu_run" -v t="$t_end" 'BEGIN { if (t > 0) printf "%.2f", 100 * c / t; else print "0" }')

checks=()
fail=0
check() { # ok? description
  if [[ $1 == yes ]]; then checks+=("ok    $2"); else checks+=("FAIL  $2"); fail=1; fi
}
check "$([[ $pgbench_rc == 0 ]] && echo yes || echo no)" "pgbench exited with status $pgbench_rc"
check "$([[ ${failed:-0} == 0 ]] && echo yes || echo no)" "pgbench failed transactions: ${failed:-0}"
check "$quiet" "the gate is quiet after the run (admitted = 0, queued = 0)"
check "$([[ $end_during_run == yes && ${be_end[0]} -ge $clients ]] && echo yes || echo no)" \
  "the end sample saw every client connected (${be_end[0]} of $clients backends)"
check "$([[ $crashes == 0 ]] && echo yes || echo no)" "server log crash lines (PANIC, terminated by signal, ...): $crashes"
check "$([[ $worker_now == "$worker_pid" && $worker_starts == 1 ]] && echo yes || echo no)" \
  "the worker ran throughout (pid $worker_pid, now ${worker_now:-none}; started $worker_starts time(s))"

growth() { # start end -> "+x.x MB (+y%)"
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == 0) { print "n/a"; exit }
    printf "%+.1f MB (%+.1f%%)", (b - a) / 1024, 100 * (b - a) / a }'
}

mkdir -p "$repo/bench/results"
out=${out:-$repo/bench/results/soak-$(date -u +%Y%m%dT%H%M%SZ).txt}
{
  echo "pg_gatekeeper soak, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: scripts/soak.sh --duration $duration --clients $clients --jobs $jobs --scale $scale${max_active:+ --max-active $max_active}"
  echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GB", $2 / 1048576}' /proc/meminfo); $("$PG_BIN/postgres" --version)"
  echo "extension: $so ($(stat -c %y "$so" | cut -d. -f1))"
  echo "limit: max_active $limit_row; pgbench TPC-B scale $scale, role soak (not a superuser), -j $jobs"
  echo
  echo "pgbench: $clients clients connected in ${connect_s} s; ran ${duration} s"
  echo "  tps ${tps:-?}, latency average ${latency:-?}, transactions ${processed:-?}, failed ${failed:-0}"
  echo
  echo "shared memory: pg_gatekeeper segment $shmem bytes ($(kb $((shmem / 1024)))); all allocations $(kb $((shmem_total / 1024)))"
  echo
  echo "memory (VmRSS / RssAnon / Pss):"
  printf '  %-40s %-34s %-44s %s\n' "" "start (all connected)" "end (t = ${t_end} s)" "growth of RssAnon"
  printf '  %-40s %-34s %-44s %s\n' "postmaster (before pgbench: $(kb "${pm_base[0]}"))" \
    "$(kb "${pm_start[0]}") / $(kb "${pm_start[1]}") / $(kb "${pm_start[2]}")" \
    "$(kb "${pm_end[0]}") / $(kb "${pm_end[1]}") / $(kb "${pm_end[2]}")" "$(growth "${pm_start[1]}" "${pm_end[1]}")"
  printf '  %-40s %-34s %-44s %s\n' "pg_gatekeeper worker (before: $(kb "${wk_base[0]}"))" \
    "$(kb "${wk_start[0]}") / $(kb "${wk_start[1]}") / $(kb "${wk_start[2]}")" \
    "$(kb "${wk_end[0]}") / $(kb "${wk_end[1]}") / $(kb "${wk_end[2]}")" "$(growth "${wk_start[1]}" "${wk_end[1]}")"
  printf '  %-40s %-34s %-44s %s\n' "${#followed[@]} followed backends, sum" \
    "$(kb "${fo_start[1]}") / $(kb "${fo_start[2]}") / $(kb "${fo_start[3]}")" \
    "$(kb "${fo_end[1]}") / $(kb "${fo_end[2]}") / $(kb "${fo_end[3]}") (${fo_end[0]} alive)" \
    "$(growth "${fo_start[2]}" "${fo_end[2]}")"
  printf '  %-40s %-34s %-44s %s\n' "all gated backends, RssAnon" \
    "${be_start[0]} x mean $(kb "${be_start[2]}"), max $(kb "${be_start[3]}")" \
    "${be_end[0]} x mean $(kb "${be_end[2]}"), max $(kb "${be_end[3]}")" "$(growth "${be_start[2]}" "${be_end[2]}") (mean)"
  echo "  postmaster after the clients left: $(kb "${pm_after[0]}") / $(kb "${pm_after[1]}") / $(kb "${pm_after[2]}")"
  echo
  echo "worker CPU: ${worker_cpu_run} s during the ${t_end} s run (${worker_cpu_pct}% of one CPU); $(cpu_of "$worker_pid") s since start"
  echo
  echo "samples during the run (RSS in VmRSS; anon = RssAnon):"
  echo "$samples"
  echo
  echo "gatekeeper.status at the end:"
  echo "$status_x" | sed 's/^/  /'
  echo
  echo "server log: $fatals FATAL lines, $crashes crash lines"
  echo
  echo "checks:"
  printf '  %s\n' "${checks[@]}"
  echo
  echo "pgbench output (tail):"
  tail -25 "$dir/pgbench.log" | sed 's/^/  /'
} | tee "$out"
echo
echo "summary written to $out"
((fail == 0)) || exit 1
