#!/usr/bin/env bash
# Run PostgreSQL's own isolation test suite (src/test/isolation of a
# PostgreSQL source tree) through pg_gatekeeper and compare with a run
# without it; not part of CI.
#
# For each configuration -- "bare" (pg_gatekeeper not preloaded), then the
# gate preloaded with pg_gatekeeper.max_active = N for each --max-active,
# exempt_superusers = off (isolationtester connects as a superuser, so every
# session, its control connection included, is gated) -- it starts a
# throw-away server and runs each spec on its own with pg_isolation_regress,
# in a database of its own, under `timeout`. isolationtester cancels a step
# after 2 x --step-timeout s and gives up after 4 x (PG_TEST_TIMEOUT_DEFAULT;
# PGISOLATIONTIMEOUT, a step's whole limit, for an isolationtester of 15 or
# older; a client parked on a synchronous query, the control connection's
# lock-wait check included, is only ended by `timeout`). Ten seconds before
# `timeout` ends a spec, the gate's views (CREATE EXTENSION in the database
# postgres only) and pg_stat_activity are saved; after a spec that timed out,
# the server is restarted so a stuck session cannot hold the gate for the
# next spec. On 16 and later, force_parallel_mode in older specs and expected
# files becomes debug_parallel_query (renamed in 16). Then, per spec and
# gated configuration:
#   same      the output is identical to the bare run's
#   DIFFERENT the output differs from the bare run's (pass/fail vs expected shown)
#   TIMEOUT   a step was canceled or timed out, or `timeout` killed the spec
#             (and the bare run did not); the report says in which of the
#             spec's permutations, and the saved views say whether it moved
# The shipped expected files need not match the server's major version (15's
# specs on a 16 server): the comparison that counts is gated vs bare on the
# same server; "bare: FAILED" only says the bare run did not match expected.
#
# Usage (as root, from anywhere; the extension must be installed):
#   bash scripts/pg_isolation.sh --pg 16 --source ~/postgresql-15.18
#   bash scripts/pg_isolation.sh --pg 16 --source DIR --max-active 1 deadlock-hard lock-update-delete
# Options:
#   --pg NN            PostgreSQL major version (scripts/pg_env.sh), default 15
#   --source DIR       PostgreSQL source tree, or its src/test/isolation
#                      (specs/, expected/, isolation_schedule); required
#   --max-active N     a gated configuration; repeatable; default 1 and 2
#   --step-timeout S   PG_TEST_TIMEOUT_DEFAULT for isolationtester, default 15
#   --spec-timeout S   `timeout` for one spec (all its permutations), default 300
#   --set 'GUC = V'    an extra line for every configuration's postgresql.conf
#   --gate-set 'GUC = V'  an extra line for the gated configurations only
#   --no-bare-rerun    do not rerun, bare, a spec whose gated output differs
#   --out DIR          also write report.txt, timings.tsv (spec, config,
#                      ok/FAILED/timeout/killed, seconds), per gated config
#                      -status.txt (gatekeeper.status at the end) and
#                      -overflow.tsv (the progress guarantee's admissions per
#                      spec), and for each difference the diff, the server
#                      log lines of the spec's time and the saved views
#   --keep             keep the work directory (clusters, results, logs)
# Specs: names from specs/ (without .spec); default every spec of
# isolation_schedule, plus prepared-transactions* (the schedule leaves them
# out: they need max_prepared_transactions, set here).
# A spec whose gated output differs is run bare once more (unless
# --no-bare-rerun): if that bare output differs from the first too, the spec
# is marked "(bare flaky)".
# Exit status: 0 when every gated result is the same as bare, 1 otherwise,
# 2 on a setup error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

source_dir= max_actives=() step_timeout=15 spec_timeout= out= keep=0
extra_conf=() gate_conf=() bare_rerun=1 specs=()
while (($#)); do
  case $1 in
    --pg) PG_MAJOR=$2; shift ;;
    --source) source_dir=$2; shift ;;
    --max-active) max_actives+=("$2"); shift ;;
    --step-timeout) step_timeout=$2; shift ;;
    --spec-timeout) spec_timeout=$2; shift ;;
    --set) extra_conf+=("$2"); shift ;;
    --gate-set) gate_conf+=("$2"); shift ;;
    --no-bare-rerun) bare_rerun=0 ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) specs+=("$1") ;;
  esac
  shift
done
source "$here/pg_env.sh"
BIN=$PG_BINDIR
ISO=$(dirname "$("$PG_CONFIG" --pgxs)")/../test/isolation
[ ${#max_actives[@]} -gt 0 ] || max_actives=(1 2)
spec_timeout=${spec_timeout:-300}
[ "$spec_timeout" -ge 20 ] || { echo "--spec-timeout must be at least 20" >&2; exit 2; }

[ -n "$source_dir" ] || { echo "--source DIR is required (see --help)" >&2; exit 2; }
[ -d "$source_dir/src/test/isolation" ] && source_dir=$source_dir/src/test/isolation
for f in specs expected isolation_schedule; do
  [ -e "$source_dir/$f" ] || { echo "$source_dir has no $f" >&2; exit 2; }
done
[ -x "$ISO/pg_isolation_regress" ] || { echo "no $ISO/pg_isolation_regress" >&2; exit 2; }
if [ ${#specs[@]} -eq 0 ]; then
  mapfile -t specs < <(sed -n 's/^test: *//p' "$source_dir/isolation_schedule" | tr ' ' '\n' | sed '/^$/d')
  for s in prepared-transactions prepared-transactions-cic; do
    [ -e "$source_dir/specs/$s.spec" ] && specs+=("$s")
  done
fi
for s in "${specs[@]}"; do
  [ -e "$source_dir/specs/$s.spec" ] || { echo "no spec $s in $source_dir/specs" >&2; exit 2; }
done

work=$(mktemp -d /tmp/pg_gatekeeper_isolation.XXXXXX)
watcher=
cleanup() {
  local d
  [ -z "$watcher" ] || kill "$watcher" 2>/dev/null || true
  for d in "$work"/*/data; do
    [ -f "$d/postmaster.pid" ] &&
      runuser -u postgres -- "$BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true
  done
  if [ $keep = 1 ]; then echo "(kept $work)"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# pg_isolation_regress runs as postgres: a copy it can read, a place to write.
mkdir -p "$work/input"
cp -r "$source_dir/specs" "$source_dir/expected" "$work/input/"
# force_parallel_mode is debug_parallel_query from 16 on: older specs that
# set it would fail their setup on a newer server, bare and gated alike
# (the expected files echo the steps' SQL).
if [ "$("$PG_CONFIG" --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')" -ge 16 ]; then
  sed -i 's/force_parallel_mode/debug_parallel_query/g' "$work/input/specs/"*.spec \
    "$work/input/expected/"*.out
fi
chown -R postgres: "$work"
as_pg() { runuser -u postgres -- env -u RUST_BACKTRACE -u PGHOST -u PGPORT -u PGUSER \
  -u PGDATABASE -u PGOPTIONS "$@"; }

port=58500
# conf NAME [max_active]: the cluster's settings, as pg_regress's temporary
# instance would have them, plus the gate's.
write_conf() {
  local name=$1 ma=${2:-}
  {
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$work/$name'"
    echo "port = $port"
    echo "fsync = off"
    echo "max_connections = 100"
    echo "max_prepared_transactions = 10"
    echo "log_line_prefix = '%m %p %d '"
    echo "log_lock_waits = on"
    echo "log_autovacuum_min_duration = 0"
    if [ -n "$ma" ]; then
      echo "shared_preload_libraries = 'pg_gatekeeper'"
      echo "pg_gatekeeper.max_active = $ma"
      echo "pg_gatekeeper.exempt_superusers = off"
      local l; for l in "${gate_conf[@]}"; do echo "$l"; done
    fi
    local l; for l in "${extra_conf[@]}"; do echo "$l"; done
  } >> "$work/$name/data/postgresql.conf"
}
start() { as_pg "$BIN/pg_ctl" -D "$work/$1/data" -l "$work/$1/server.log" -w -t 60 start >/dev/null; }
stop() { as_pg "$BIN/pg_ctl" -D "$work/$1/data" -m "${2:-fast}" -w -t 60 stop >/dev/null 2>&1 || true; }

# evidence NAME MAX_ACTIVE: the gate's views (plain reads of them need no
# admission) and pg_stat_activity (which may wait for one).
evidence() {
  local q=(timeout 10 runuser -u postgres -- "$BIN/psql" -h "$work/$1" -p $port -d postgres -X)
  date -u +%FT%T.%3NZ
  if [ -n "$2" ]; then
    "${q[@]}" -c "SELECT * FROM gatekeeper.status" 2>&1 || true
    "${q[@]}" -c "SELECT * FROM gatekeeper.sessions ORDER BY pid" 2>&1 || true
  fi
  "${q[@]}" -c "SELECT pid, application_name, state, wait_event_type, wait_event, xact_start,
    left(query, 60) AS query FROM pg_stat_activity WHERE backend_type = 'client backend' ORDER BY pid" 2>&1 || true
}

as_pg "$BIN/initdb" -D "$work/template" -A trust --no-sync --no-locale -E UTF8 >/dev/null

# run_config NAME [max_active] [specs...]: results in $work/NAME/{results,status}.
run_config() {
  local name=$1 ma=$2; shift 2
  mkdir -p "$work/$name"
  cp -a "$work/template" "$work/$name/data"
  chown -R postgres: "$work/$name"
  write_conf "$name" "$ma"
  start "$name"
  if [ -n "$ma" ]; then # the views, in the database postgres only, for the evidence
    as_pg "$BIN/psql" -h "$work/$name" -p $port -d postgres -qAtX \
      -c "CREATE EXTENSION pg_gatekeeper" >/dev/null 2>&1 || true
  fi
  local s db t0 rc secs verdict
  for s in "$@"; do
    # A database per spec, so one that fails cannot leave prepared
    # transactions or objects to the next; a spec that names
    # pg_isolation_regress's default database gets that one.
    db=iso_${s//-/_}
    grep -q isolation_regression "$work/input/specs/$s.spec" && db=isolation_regression
    t0=$(date +%s%N)
    rc=0
    echo "=== $s $(date -u +%FT%T.%3NZ)" >> "$work/$name/server.log"
    # Shortly before `timeout` ends the spec, what the server sees.
    (for ((i = 0; i < spec_timeout - 10; i++)); do sleep 1; done
     evidence "$name" "$ma" > "$work/$name/$s.gate") &
    watcher=$!
    as_pg env PG_TEST_TIMEOUT_DEFAULT="$step_timeout" PGISOLATIONTIMEOUT="$((2 * step_timeout))" \
      timeout -k 10 "$spec_timeout" "$ISO/pg_isolation_regress" \
      --inputdir="$work/input" --outputdir="$work/$name" --bindir="$BIN" \
      --host="$work/$name" --port=$port --dbname="$db" "$s" \
      > "$work/$name/$s.log" 2>&1 || rc=$?
    kill $watcher 2>/dev/null || true
    wait $watcher 2>/dev/null || true
    secs=$((($(date +%s%N) - t0) / 1000000))
    secs=$((secs / 1000)).$(((secs % 1000) / 100))
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      verdict=killed
    elif grep -q -E '^isolationtester: canceling step|timed out after [0-9]+ seconds' \
        "$work/$name/results/$s.out" 2>/dev/null; then
      verdict=timeout
    elif [ $rc = 0 ]; then
      verdict=ok
    else
      verdict=FAILED
    fi
    printf '%s\t%s\t%s\n' "$s" "$verdict" "$secs" >> "$work/$name/status"
    if [ $verdict = killed ] || [ $verdict = timeout ]; then
      # A clean slate: a stuck session must not hold the gate for the next.
      stop "$name" immediate
      start "$name"
    fi
  done
  if [ -n "$ma" ]; then # the gate's counters after the whole run
    timeout 20 runuser -u postgres -- "$BIN/psql" -h "$work/$name" -p $port -d postgres -X \
      -c "SELECT * FROM gatekeeper.status" > "$work/$name/gate_status" 2>&1 || true
  fi
  stop "$name"
}

t_start=$(date +%s)
header="PostgreSQL $("$BIN/postgres" --version | sed 's/.* //'), ${#specs[@]} specs from $(basename "$(cd "$source_dir/../../.." && pwd)")
configurations: bare, max_active = ${max_actives[*]}${gate_conf:+ (gated: ${gate_conf[*]})}${extra_conf:+ (all: ${extra_conf[*]})}; step timeout ${step_timeout} s, spec timeout ${spec_timeout} s"
echo "$header"
declare -A secs_of
timed() { # name max_active specs...
  local t=$(date +%s)
  run_config "$@"
  secs_of[$1]=$(($(date +%s) - t))
  echo "$1: ${secs_of[$1]} s"
}
timed bare "" "${specs[@]}"
for ma in "${max_actives[@]}"; do
  timed "gate$ma" "$ma" "${specs[@]}"
done

# Compare.
declare -A bare_status
while IFS=$'\t' read -r s v t; do bare_status[$s]=$v; done < "$work/bare/status"
rerun=()
for ma in "${max_actives[@]}"; do
  while IFS=$'\t' read -r s v t; do
    if ! cmp -s "$work/bare/results/$s.out" "$work/gate$ma/results/$s.out"; then
      [[ " ${rerun[*]} " == *" $s "* ]] || rerun+=("$s")
    fi
  done < "$work/gate$ma/status"
done
if [ $bare_rerun = 1 ] && [ ${#rerun[@]} -gt 0 ]; then
  timed bare2 "" "${rerun[@]}"
fi

report=$work/report.txt
status=0
{
  echo "$header"
  echo
  ndiff=0
  printf '%-40s %-8s %s\n' spec config result
  for ma in "${max_actives[@]}"; do
    while IFS=$'\t' read -r s v t; do
      b=${bare_status[$s]}
      bt=$(awk -F'\t' -v s="$s" '$1 == s { print $3 }' "$work/bare/status")
      if cmp -s "$work/bare/results/$s.out" "$work/gate$ma/results/$s.out"; then
        continue
      fi
      status=1
      ndiff=$((ndiff + 1))
      flaky=
      if [ -e "$work/bare2/results/$s.out" ] &&
          ! cmp -s "$work/bare/results/$s.out" "$work/bare2/results/$s.out"; then
        flaky=" (bare flaky)"
      fi
      # How far it got: a slow spec is not a stuck one.
      np=$(grep -c '^starting permutation' "$work/gate$ma/results/$s.out" 2>/dev/null || true)
      nb=$(grep -c '^starting permutation' "$work/bare/results/$s.out" 2>/dev/null || true)
      case $v in
        killed|timeout) r="TIMEOUT ($v, ${t} s, in permutation ${np:-0} of ${nb:-0}; bare: $b, ${bt} s)" ;;
        *) r="DIFFERENT (gated: $v, ${t} s; bare: $b, ${bt} s)" ;;
      esac
      printf '%-40s %-8s %s%s\n' "$s" "gate$ma" "$r" "$flaky"
    done < "$work/gate$ma/status"
  done
  [ $ndiff -gt 0 ] || echo "(none: every gated output is the same as bare)"
  echo
  for ma in "${max_actives[@]}"; do
    n=$(wc -l < "$work/gate$ma/status")
    same=0
    while IFS=$'\t' read -r s v t; do
      cmp -s "$work/bare/results/$s.out" "$work/gate$ma/results/$s.out" && same=$((same + 1))
    done < "$work/gate$ma/status"
    echo "max_active = $ma: $same of $n specs the same as bare, ${secs_of[gate$ma]} s (bare ${secs_of[bare]} s)"
  done
  echo "bare vs the shipped expected files: $(grep -c -P '\tok\t' "$work/bare/status" || true) ok," \
    "$(grep -c -v -P '\tok\t' "$work/bare/status" || true) not ok"
  echo "total $(($(date +%s) - t_start)) s"
} > "$report"
tail -n +3 "$report"

if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$report" "$out/report.txt"
  {
    printf 'spec\tconfig\tresult\tseconds\n'
    for c in bare "${max_actives[@]/#/gate}" bare2; do
      [ -e "$work/$c/status" ] && awk -F'\t' -v c="$c" -v OFS='\t' '{ print $1, c, $2, $3 }' "$work/$c/status"
    done
  } > "$out/timings.tsv"
  for ma in "${max_actives[@]}"; do
    while IFS=$'\t' read -r s v t; do
      cmp -s "$work/bare/results/$s.out" "$work/gate$ma/results/$s.out" && continue
      # At most 2000 lines: a spec stopped early differs by all the rest.
      diff -u --label "bare/$s.out" --label "gate$ma/$s.out" \
        "$work/bare/results/$s.out" "$work/gate$ma/results/$s.out" > "$work/diff" || true
      { head -n 2000 "$work/diff"
        [ "$(wc -l < "$work/diff")" -le 2000 ] || echo "[... cut at 2000 of $(wc -l < "$work/diff") lines]"
      } > "$out/gate$ma-$s.diff"
      # The server log from this spec's marker to the next one.
      awk -v s="=== $s " 'index($0, s) == 1 { on = 1; print; next } /^=== / { on = 0 } on' \
        "$work/gate$ma/server.log" > "$out/gate$ma-$s.log"
      if [ -s "$work/gate$ma/$s.gate" ]; then cp "$work/gate$ma/$s.gate" "$out/gate$ma-$s.gate"; fi
    done < "$work/gate$ma/status"
  done
  for ma in "${max_actives[@]}"; do
    cp "$work/gate$ma/gate_status" "$out/gate$ma-status.txt" 2>/dev/null || true
    # The progress guarantee's admissions over the limit, per spec.
    awk '/^=== /{ s = $2 } /admitted process .* over the limit/ { n[s]++ }
      END { for (k in n) print n[k] "\t" k }' "$work/gate$ma/server.log" |
      sort -rn > "$out/gate$ma-overflow.tsv"
  done
  echo "written to $out"
fi
exit $status
