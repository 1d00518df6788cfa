#!/usr/bin/env bash
# Mixed workload: OLTP (pgbench TPC-B) beside long reports, side by side.
#
#   bench/mixed.sh [--clients 64] [--reports 8] [--duration 40] [--rounds 3] [--async]
#                  [--forms single,block] [--out DIR]
#
# Commits are durable by default (PostgreSQL's fsync = on, synchronous_commit
# = on); --async runs with fsync = off and synchronous_commit = off, as the
# results dated before 2026-11-25 did, and says so in the summary.
#
# Report forms (--forms, both by default): `single`, the report as one
# statement; `block`, the report inside BEGIN ... COMMIT (a gate that admits
# at BEGIN sees nothing of what the block will run). Each configuration runs
# in each form.
#
# Configurations, interleaved in each round on one throw-away cluster. No
# class is configured anywhere but in gate-class (the reports' role is put
# in class `reports` for that run only, by ALTER ROLE):
#   bare        PostgreSQL without the library
#   pgbouncer   PgBouncer 1.18, transaction pools of 8, in front of bare PostgreSQL: one per
#               user, so OLTP (oltp) and the reports (report) have 8 server connections each
#   gate        pg_gatekeeper with its defaults (stall relief on)
#   gate-nostall  pg_gatekeeper with stall relief off (pg_gatekeeper.stall_timeout = 0): before stall relief
#   gate-class  pg_gatekeeper with the reports' role in a class capped at 2
#   gate-stall-T  pg_gatekeeper with pg_gatekeeper.stall_timeout = T (e.g. gate-stall-100ms), for choosing the default
#   gate-progress-T  pg_gatekeeper with pg_gatekeeper.progress_timeout = T (gate-progress-1h: the progress
#               guarantee effectively off, to measure what it costs)
#   gate-lane-M  pg_gatekeeper with pg_gatekeeper.long_lane = M (gate-lane-off: no long lane, every
#               stalled holder relieved, as before the lane)
#   gate-longcap-N  pg_gatekeeper with the long lane capped at N (class long redefined)
#   gate-max-N  pg_gatekeeper with the limit set by hand to N (pg_gatekeeper.max_active = N), to see
#               whether a larger limit than the adaptive one would pay
#   gate-fixed  pg_gatekeeper with the automatic limit fixed at its floor (active_per_cpu_max = 0):
#               the gate before the adaptive limit
#   bare-alone, gate-alone  the reports alone (no OLTP clients), without and with the gate
# MIXED_CONFIGS="..." picks and orders the configurations.
# Figures per run: OLTP tps and p99 latency (ms) from pgbench's per-transaction
# log, and the number of reports completed. Writes DIR/results.csv and
# DIR/summary.md (medians and min-max over the rounds).
# Needs root (servers run as postgres) and a release build installed
# (cargo pgrx install --release). PostgreSQL's bin directory: $PG_BIN, by
# default that of PG_MAJOR (scripts/pg_env.sh; 15 by default).
set -euo pipefail

source "$(dirname "$0")/../scripts/pg_env.sh"
PG_BIN=${PG_BIN:-$PG_BINDIR}
PG_BINDIR=$PG_BIN
source "$(dirname "$0")/../scripts/cluster.sh"
clients=64 reports=8 duration=40 rounds=3 scale=10 durability=durable forms=single,block
out=bench/results/mixed-$(date +%Y%m%d-%H%M)
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients=$2; shift ;;
    --reports) reports=$2; shift ;;
    --duration) duration=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --async) durability=async ;;
    --forms) forms=$2; shift ;;
    --out) out=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
configs=${MIXED_CONFIGS:-bare pgbouncer gate gate-nostall gate-class bare-alone gate-alone}

command -v pgbouncer >/dev/null || { source "$(dirname "$0")/../scripts/apt_install.sh" && apt_install pgbouncer; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(cluster_dir pg_gatekeeper_mixed)
port=27700 bport=27701
psql_su() { cluster_psql "$work" postgres -d bench "$@"; }
cleanup() {
  [ -f "$work/pgbouncer.pid" ] && kill "$(cat "$work/pgbouncer.pid")" 2>/dev/null || true
  cluster_drop "$work"
}
trap cleanup EXIT

settings=("max_connections = $((clients + reports + 40))" "shared_buffers = 512MB")
if [ "$durability" = async ]; then
  settings+=("fsync = off" "synchronous_commit = off")
fi
cluster_init "$work" "$port" "${settings[@]}"
cp "$work/data/postgresql.conf" "$work/base.conf"

start() { # preload extra-conf-lines
  cp "$work/base.conf" "$work/data/postgresql.conf"
  printf "shared_preload_libraries = '%s'\n%s\n" "$1" "$2" >> "$work/data/postgresql.conf"
  cluster_start "$work"
}
stop() { cluster_stop "$work"; }

start "" ""
as_pg "$PG_BIN/createdb" -h "$work" -p "$port" -U postgres bench
as_pg "$PG_BIN/pgbench" -q -i -s "$scale" -h "$work" -p "$port" -U postgres bench >/dev/null 2>&1
psql_su -c "CREATE ROLE oltp LOGIN; CREATE ROLE report LOGIN;
  GRANT ALL ON ALL TABLES IN SCHEMA public TO oltp, report;" 2>/dev/null || true
stop

cat > "$work/pgbouncer.ini" <<INI
[databases]
bench = host=$work port=$port dbname=bench
[pgbouncer]
listen_addr =
listen_port = $bport
unix_socket_dir = $work
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = 8
max_client_conn = $((clients + reports + 20))
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
INI
printf '"oltp" ""\n"report" ""\n' > "$work/users.txt"
chown postgres: "$work"/pgbouncer.ini "$work"/users.txt

# The report: a self-join of pgbench_accounts (a few seconds at scale 10).
REPORT="SELECT count(*) FROM pgbench_accounts a JOIN pgbench_accounts b ON a.aid = b.aid WHERE a.abalance <= b.abalance"

one_run() { # config form round
  local cfg=$1 form=$2 rnd=$3 cport=$port oltp=yes
  case $cfg in
    *-alone) oltp=no ;;
  esac
  case $cfg in
    bare|bare-alone) start "" "" ;;
    pgbouncer) start "" ""; as_pg pgbouncer -d "$work/pgbouncer.ini"; cport=$bport ;;
    gate|gate-alone) start pg_gatekeeper "" ;;
    gate-nostall) start pg_gatekeeper "pg_gatekeeper.stall_timeout = 0" ;;
    gate-stall-*) start pg_gatekeeper "pg_gatekeeper.stall_timeout = '${cfg#gate-stall-}'" ;;
    gate-progress-*) start pg_gatekeeper "pg_gatekeeper.progress_timeout = '${cfg#gate-progress-}'" ;;
    gate-lane-*) start pg_gatekeeper "pg_gatekeeper.long_lane = '${cfg#gate-lane-}'" ;;
    gate-longcap-*) start pg_gatekeeper "pg_gatekeeper.classes = 'long (max_active = ${cfg#gate-longcap-})'" ;;
    gate-class) start pg_gatekeeper "pg_gatekeeper.classes = 'reports (max_active = 2)'"
      psql_su -c "ALTER ROLE report SET pg_gatekeeper.class = 'reports'" ;;
    gate-fixed) start pg_gatekeeper "pg_gatekeeper.active_per_cpu_max = 0" ;;
    gate-max-*) start pg_gatekeeper "pg_gatekeeper.max_active = ${cfg#gate-max-}" ;;
  esac
  # Every run starts from the same tables: no history rows, no dead rows
  # or pending writes left by the run before (whichever configuration ran it).
  psql_su -q -c "TRUNCATE pgbench_history" -c "VACUUM ANALYZE pgbench_accounts, pgbench_branches, pgbench_tellers" \
    -c "CHECKPOINT" >/dev/null
  sleep 1
  local tag="$cfg-$form-$rnd" done_file="$work/reports-$cfg-$form-$rnd" sql="$REPORT"
  [ "$form" = block ] && sql="BEGIN; $REPORT; COMMIT"
  : > "$done_file"
  local end=$((SECONDS + duration)) pids=() t0
  t0=$(psql_su -Atc "SELECT now()")
  for r in $(seq "$reports"); do
    ( while [ $SECONDS -lt $end ]; do
        as_pg "$PG_BIN/psql" -X -q -h "$work" -p "$cport" -U report -d bench -c "$sql" \
          >/dev/null 2>>"$work/reports-$tag.err" && echo x >> "$done_file"
      done ) &
    pids+=($!)
  done
  local rc=0 status=ok
  if [ $oltp = yes ]; then
    (cd "$work" && as_pg "$PG_BIN/pgbench" -n -c "$clients" -j 2 -T "$duration" -h "$work" -p "$cport" -U oltp \
        -l --log-prefix="$work/tx-$tag" bench > "$work/pgbench-$tag.out" 2>&1) || rc=$?
  else
    : > "$work/pgbench-$tag.out"
  fi
  wait "${pids[@]}" 2>/dev/null || true
  local tps p99 n
  tps=$(grep -oP 'tps = \K[0-9.]+' "$work/pgbench-$tag.out" | head -1 || true)
  # A run whose clients failed is recorded, with why, and left out of the
  # medians (pgbench prints a tps even when clients aborted).
  if [ $oltp = yes ] && { [ $rc != 0 ] || [ -z "$tps" ] || grep -q 'aborted\|pgbench: error' "$work/pgbench-$tag.out"; }; then
    status="failed: $(grep -m1 'aborted\|pgbench: error' "$work/pgbench-$tag.out" | tr -d ',"' | cut -c1-120) (pgbench exit $rc)"
    echo "  $status"
  fi
  local report_errors=0
  [ -s "$work/reports-$tag.err" ] && report_errors=$(grep -c 'ERROR\|FATAL' "$work/reports-$tag.err" || true)
  p99=$(cat "$work"/tx-"$tag".* 2>/dev/null | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int(NR*0.99)]/1000; else print "nan"}' || true)
  n=$(wc -l < "$done_file")
  [ -s "$work/reports-$tag.err" ] && echo "  report errors: $(sort -u "$work/reports-$tag.err" | head -3 | tr '\n' ' ')"
  rm -f "$work"/tx-"$tag".*
  # The gate's limit over the run (from its history) and the holders its
  # stall check relieved: what the adaptive limit did beside long work.
  local gk=",,,,"
  if [[ $cfg == gate* ]]; then
    gk=$(psql_su -Atc "CREATE EXTENSION IF NOT EXISTS pg_gatekeeper" \
           -c "SELECT concat_ws(',', round(avg(max_active), 1), min(max_active), max(max_active),
                 (SELECT stalls_total FROM gatekeeper.status))
               FROM gatekeeper.history
              WHERE sample_time > '$t0'::timestamptz AND sample_time <= '$t0'::timestamptz + interval '$duration s'" \
           2>/dev/null | tail -1)
    gk=",${gk:-,,,}"
  fi
  echo "$cfg,$form,$rnd,${tps:-0},$p99,$n$gk,$report_errors,\"$status\"" >> "$out/results.csv"
  printf '%-13s %-6s round %s: %8s OLTP tps, p99 %8s ms, %3s reports\n' "$cfg" "$form" "$rnd" "${tps:-0}" "$p99" "$n"
  [ "$cfg" = pgbouncer ] && kill "$(cat "$work/pgbouncer.pid")" && sleep 0.5
  [ "$cfg" = gate-class ] && psql_su -c "ALTER ROLE report RESET pg_gatekeeper.class"
  stop
}

echo "config,form,round,oltp_tps,oltp_p99_ms,reports,limit_avg,limit_min,limit_max,stalls,report_errors,status" > "$out/results.csv"
echo "mixed: $clients TPC-B clients + $reports report loops ($forms), ${duration}s per run, $rounds rounds, scale $scale, $(nproc) CPUs, $durability commits"
# The configurations in the given order in odd rounds and reversed in even
# ones, so that none always runs right after the same other.
for rnd in $(seq "$rounds"); do
  order=$configs
  ((rnd % 2 == 0)) && order=$(printf '%s\n' $configs | tac | tr '\n' ' ')
  for form in ${forms//,/ }; do
    for cfg in $order; do one_run "$cfg" "$form" "$rnd"; done
  done
done

python3 - "$out" "$clients" "$reports" "$duration" "$rounds" "$durability" "$configs" "$forms" "$(nproc)" <<'PY'
import csv, statistics, sys, os
out, clients, reports, duration, rounds, durability, configs, forms, cpus = sys.argv[1:]
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
failed = [r for r in rows if r.get("status", "ok") != "ok"]
rows = [r for r in rows if r.get("status", "ok") == "ok"]
cfgs = list(dict.fromkeys(r["config"] for r in rows))
def col(c, f, k): return [float(r[k]) for r in rows if r["config"] == c and r["form"] == f]
def med(v): return statistics.median(v) if v else None
commits = ("durable commits (fsync = on, synchronous_commit = on)" if durability == "durable"
           else "ASYNCHRONOUS commits (fsync = off, synchronous_commit = off)")
flag = " --async" if durability == "async" else ""
lines = [f"Mixed workload: {clients} TPC-B clients beside {reports} report loops, {duration} s per run, {commits}, "
         f"{cpus} CPUs, medians of {rounds} round(s) (min-max). Reports as a single statement (`single`) "
         f"or inside BEGIN ... COMMIT (`block`); `-alone`: the reports without OLTP clients. "
         f"Command: `MIXED_CONFIGS='{configs}' bench/mixed.sh --clients {clients} --reports {reports} --rounds {rounds} --duration {duration} --forms {forms}{flag}`.", "",
         "| configuration | reports | OLTP tps | vs bare | OLTP p99 ms | reports done | vs bare | gate limit avg (range), holders relieved |", "|---|---|---|---|---|---|---|---|"]
for f in forms.split(","):
    for c in cfgs:
        t, p, n = col(c, f, "oltp_tps"), col(c, f, "oltp_p99_ms"), col(c, f, "reports")
        if not n:
            continue
        base = "bare-alone" if c.endswith("-alone") else "bare"
        bt, bn = med(col(base, f, "oltp_tps")), med(col(base, f, "reports"))
        if c.endswith("-alone"):
            oltp = "| | | "
        else:
            m = med(t)
            ratio = f"{m / bt:.2f}x" if bt else ""
            oltp = f"| {m:.0f} ({min(t):.0f}-{max(t):.0f}) | {ratio} | {med(p):.1f} "
        nr = f"{med(n) / bn:.2f}x" if bn else ""
        lim = [r for r in rows if r["config"] == c and r["form"] == f and r.get("limit_avg")]
        lim = (f"{med([float(r['limit_avg']) for r in lim]):.1f} ({min(int(r['limit_min']) for r in lim)}-"
               f"{max(int(r['limit_max']) for r in lim)}), {med([int(r['stalls']) for r in lim]):.0f}") if lim else ""
        lines.append(f"| {c} | {f} {oltp}| {med(n):.0f} ({min(n):.0f}-{max(n):.0f}) | {nr} | {lim} |")
if failed:
    lines += ["", f"Left out of the medians, {len(failed)} failed run(s):"]
    lines += [f"- {r['config']} {r['form']} round {r['round']}: {r['status']}" for r in failed]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
# System Python: apt's matplotlib is not visible to a pyenv/virtualenv python3.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)
"$PY" "$(dirname "$0")/plot_mixed.py" "$out" || echo "no chart (matplotlib missing?)"
