#!/usr/bin/env bash
# pg_gatekeeper on a 3-node Citus cluster. Builds Citus once for
# PostgreSQL 15 or --pg NN (scripts/citus_build.sh, from ../shared/vendor), starts a
# coordinator and 2 workers on this machine (loopback only, data under
# /tmp/citus-*), each with shared_preload_libraries = 'citus, pg_gatekeeper',
# distributes pgbench's tables, and runs each workload through the
# coordinator as the non-superuser `app`, in each configuration:
#   nogate    Citus alone (pg_gatekeeper not preloaded)
#   defaults  the gate at its defaults on every node
#   small     the gate with max_active = 4 on the coordinator, 2 on the workers
# Workloads: tpcb-32, tpcb-128, tpcb-256 (pgbench's tpcb-like, -n);
# explicit-32, explicit-128 (BEGIN; two UPDATEs of accounts on different
# workers; COMMIT); hot-32, hot-128 (the same over 10 tellers: every
# transaction contends, and opposite orders form distributed deadlocks,
# which Citus breaks after 2 x deadlock_timeout); mixed (TPC-B at 32
# beside a loop of multi-shard UPDATEs and a loop of \copy into history);
# index (TPC-B at 32 while CREATE INDEX, then CREATE INDEX CONCURRENTLY,
# run on accounts); idle-C-N (TPC-B at C clients beside N warm idle
# sessions: each ended one TPC-B transaction, so it holds Citus's
# connections into the workers); rate-R-C (TPC-B at C clients held to R
# transactions a second in all, pgbench --rate: what a transaction costs
# when its session's backends sat idle between turns); select-N (pgbench's
# select-only: single-shard reads, each outside a block); multi-N (a
# multi-shard count over pgbench_accounts, outside a block).
# A run hangs when it has not finished within duration + --hang-after s:
# the gate's views and pg_stat_activity are recorded on every node, the
# clients are killed, and the cluster is restarted if it stays stuck.
# Results: bench/results/citus-<date>/ (results.csv, summary.md by
# bench/citus_report.py, run.log, runs/: each run's output and the views).
# With the defaults configuration, round 1 also checks what passes the
# gate on a worker (trust_check below), the coordinator's shard tasks to
# itself (loopback_check), clients on both workers (mx_check) and Citus's
# views through run_command_on_all_nodes (views_check).
# Exit status 1 if any run hung or failed to run, or the trust check failed.
#
#   bash scripts/citus.sh                    # 20 s per run, scale 10, every configuration
#   bash scripts/citus.sh --smoke            # tests: 5 s per run, scale 2, every configuration
#   options: --duration S --scale N --rounds N --configs "nogate defaults small"
#            --workloads "tpcb-32 ..." --hang-after S --port-base P --out DIR --keep
#            --pg NN (15 by default; Citus 13.2.2 also builds for 16 from the wheels)
set -uo pipefail
cd "$(dirname "$0")/.."
orig_args="$*"
PG_MAJOR=15

duration=20 scale=10 rounds=1 hang_after=60 port_base=61401 keep=0 smoke=0 out=
configs="nogate defaults small"
workloads="tpcb-32 tpcb-128 tpcb-256 explicit-32 explicit-128 hot-32 hot-128 mixed index"
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 duration=5 scale=2 hang_after=30 configs="nogate defaults small" ;;
    --duration) duration=$2; shift ;;
    --scale) scale=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --configs) configs=$2; shift ;;
    --workloads) workloads=$2; shift ;;
    --hang-after) hang_after=$2; shift ;;
    --port-base) port_base=$2; shift ;;
    --out) out=$2; shift ;;
    --pg) PG_MAJOR=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for wl in $workloads; do
  [[ $wl =~ ^(tpcb|explicit|hot|select|multi)-[0-9]+$ || $wl =~ ^(idle|rate)-[0-9]+-[0-9]+$ || $wl = mixed || $wl = index ]] ||
    { echo "unknown workload $wl (--help lists them)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (servers run as postgres)" >&2; exit 2; }
source scripts/pg_env.sh
unset RUST_BACKTRACE

if [ -z "$out" ]; then
  if [ $smoke = 1 ]; then out=bench/results/smoke-citus-$(date -u +%Y%m%d-%H%M%S)
  else out=bench/results/citus-$(date -u +%Y%m%d-%H%M); fi
fi
mkdir -p "$out/runs"
out=$(cd "$out" && pwd)
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/run.log"; }

bash scripts/citus_build.sh --pg "$PG_MAJOR" 2>&1 | tee -a "$out/run.log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "Citus build failed" >&2; exit 1; }
[ -f "$("$PG_CONFIG" --pkglibdir)/pg_gatekeeper.so" ] ||
  { echo "pg_gatekeeper is not installed for PostgreSQL $PG_MAJOR (bash scripts/install.sh $PG_MAJOR)" >&2; exit 1; }
# Measurements need the release build (a debug build checks the gate's
# invariants at every change); the smoke run only checks for hangs.
if [ $smoke = 0 ]; then
  source bench/require_release.sh
  require_release "$PG_BINDIR"
fi

PGBENCH=$PG_BINDIR/pgbench
PSQL=$PG_BINDIR/psql
nodes=(coord w1 w2)
# Listening ports outside the kernel's ephemeral range, as bench/util.py's
# pick_port does: an outgoing connection (pgbench's, or Citus's between the
# nodes) may hold a port inside it, and a node then fails to start with
# "Address already in use" (the test command's smoke run lost w1 so, on
# 55402).
read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { eph_lo=32768 eph_hi=60999; }
if ((port_base + 2 >= eph_lo && port_base <= eph_hi)); then
  log "ports $port_base-$((port_base + 2)) are in the ephemeral range $eph_lo-$eph_hi: using $((eph_hi + 1))-$((eph_hi + 3))"
  port_base=$((eph_hi + 1))
fi
declare -A port=([coord]=$port_base [w1]=$((port_base + 1)) [w2]=$((port_base + 2)))
declare -A small_limit=([coord]=4 [w1]=2 [w2]=2)
# Nodes that a run killed on its way left running (its script gone, so no
# trap stopped them) would hold the ports: stop them, not another run's.
for d in /tmp/citus-*/; do
  [ -f "$d/owner" ] || continue
  kill -0 "$(cat "$d/owner")" 2>/dev/null && continue
  for pid_file in "$d"*/postmaster.pid; do
    [ -f "$pid_file" ] || continue
    log "stopping a node left by an ended run: $(dirname "$pid_file")"
    runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$(dirname "$pid_file")" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  done
done
for n in "${nodes[@]}"; do
  if (echo >/dev/tcp/127.0.0.1/"${port[$n]}") 2>/dev/null; then
    echo "port ${port[$n]} is in use (--port-base)" >&2; exit 1
  fi
done

root=$(mktemp -d /tmp/citus-XXXXXX)
echo $$ >"$root/owner"
repo=$(pwd)
chmod 755 "$root"
chown postgres: "$root"
bg_pids=()

as_pg() { runuser -u postgres -- env -u RUST_BACKTRACE "$@"; }
# psql on node $1 as user $2 (a superuser: postgres is exempt from the gate).
q() { local n=$1 u=$2; shift 2; timeout --foreground 120 "$PSQL" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${port[$n]}" -U "$u" -d postgres "$@"; }
node_start() { as_pg "$PG_BINDIR/pg_ctl" -D "$root/$1" -l "$root/$1.log" -w -t 120 start >/dev/null; }
node_stop() {
  [ -f "$root/$1/postmaster.pid" ] || return 0
  as_pg "$PG_BINDIR/pg_ctl" -D "$root/$1" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    as_pg "$PG_BINDIR/pg_ctl" -D "$root/$1" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
}
node_stop_now() {
  [ -f "$root/$1/postmaster.pid" ] || return 0
  as_pg "$PG_BINDIR/pg_ctl" -D "$root/$1" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
}
cleanup() {
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done
  # Ended from outside (a test run's time limit): the nodes stop at once,
  # within the grace before that run's SIGKILL.
  for n in "${nodes[@]}"; do
    if [ "$interrupted" = 1 ]; then node_stop_now "$n"; else node_stop "$n"; fi
  done
  # The copies name the temporary cluster directory WORKDIR.
  for n in "${nodes[@]}"; do
    [ -f "$root/$n.log" ] && sed "s|$root|WORKDIR|g" "$root/$n.log" >"$out/runs/server-$n.log"
  done
  if [ $keep = 1 ]; then echo "cluster data kept in $root"; else rm -rf "$root"; fi
}
interrupted=0
trap cleanup EXIT
# (The psql and pgbench calls this shell waits on run under `timeout
# --foreground`, in this process group: a TERM to the group ends them with
# this shell, whose trap would otherwise wait for them to end. Those of the
# background jobs end when the cleanup stops the nodes.)
trap 'interrupted=1; exit 130' INT TERM

# The gate's configuration, in gate.conf (included last by postgresql.conf).
# Besides the three: coordonly = the gate on the coordinator only, at
# max_active 4 with lending off (max_tickets 4), app exempt on the workers;
# workersonly = the gate at its defaults on the workers, not loaded on the
# coordinator;
# any of them with -ptMS appended sets progress_timeout to MS ms, with -cmN
# the coordinator's max_active to N (e.g. defaults-cm32), with -whMS the
# coordinator's warm_hand_off to MS ms (e.g. defaults-wh1000), with -np
# citus_peers to '' on the workers (they trust no peer: every connection
# from the coordinator is gated there, as the statements Citus sent outside
# a distributed transaction were before 0.5.0; for select-N and multi-N,
# which send only such statements).
set_config() { # config
  local base=${1%%-*} pt= cm= wh= np= opt
  for opt in $(echo "${1#"$base"}" | tr '-' ' '); do
    case $opt in
      pt*) pt=${opt#pt} ;;
      cm*) cm=${opt#cm} ;;
      wh*) wh=${opt#wh} ;;
      np) np=1 ;;
      *) echo "unknown configuration option -$opt" >&2; return 1 ;;
    esac
  done
  for n in "${nodes[@]}"; do
    {
      case $base in
        nogate) echo "shared_preload_libraries = 'citus'" ;;
        defaults) echo "shared_preload_libraries = 'citus, pg_gatekeeper'" ;;
        small) printf "shared_preload_libraries = 'citus, pg_gatekeeper'\npg_gatekeeper.max_active = %s\n" "${small_limit[$n]}" ;;
        workersonly) if [ $n = coord ]; then echo "shared_preload_libraries = 'citus'"
          else echo "shared_preload_libraries = 'citus, pg_gatekeeper'"; fi ;;
        coordonly) echo "shared_preload_libraries = 'citus, pg_gatekeeper'"
          if [ $n = coord ]; then printf "pg_gatekeeper.max_active = 4\npg_gatekeeper.max_tickets = 4\n"
          else echo "pg_gatekeeper.exempt_roles = 'app'"; fi ;;
        *) echo "unknown configuration $1" >&2; return 1 ;;
      esac
      [ -z "$pt" ] || echo "pg_gatekeeper.progress_timeout = '${pt}ms'"
      [ -z "$cm" ] || [ "$n" != coord ] || echo "pg_gatekeeper.max_active = $cm"
      [ -z "$wh" ] || [ "$n" != coord ] || echo "pg_gatekeeper.warm_hand_off = '${wh}ms'"
      [ -z "$np" ] || [ "$n" = coord ] || echo "pg_gatekeeper.citus_peers = ''"
    } >"$root/$n/gate.conf"
    chown postgres: "$root/$n/gate.conf"
  done
}
restart_all() {
  for n in "${nodes[@]}"; do node_stop "$n"; done
  for n in "${nodes[@]}"; do node_start "$n" || { log "node $n did not start"; tail -20 "$root/$n.log"; return 1; }; done
}

# -- the cluster ---------------------------------------------------------------
log "cluster in $root: coordinator :${port[coord]}, workers :${port[w1]} :${port[w2]}; scale $scale"
for n in "${nodes[@]}"; do
  as_pg "$PG_BINDIR/initdb" -D "$root/$n" -A trust -U postgres --no-sync >/dev/null || exit 1
  # Workers take more connections than the coordinator: Citus's shared pool
  # per worker defaults to the coordinator's max_connections.
  if [ $n = coord ]; then mc=300; else mc=400; fi
  cat >>"$root/$n/postgresql.conf" <<EOF
port = ${port[$n]}
listen_addresses = '127.0.0.1'
unix_socket_directories = '$root'
max_connections = $mc
max_prepared_transactions = $mc
log_line_prefix = '%m [%p] %q%a '
include_if_exists = 'gate.conf'
EOF
done
set_config defaults
restart_all || exit 1
for n in "${nodes[@]}"; do
  q "$n" postgres -c "CREATE EXTENSION citus" -c "CREATE EXTENSION pg_gatekeeper" || exit 1
done
citus_version=$(q coord postgres -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'")
citus_full=$(q coord postgres -c "SELECT split_part(citus_version(), ' on ', 1)")
pg_version=$(q coord postgres -c "SHOW server_version")
q coord postgres -c "SELECT citus_set_coordinator_host('127.0.0.1', ${port[coord]})" \
  -c "SELECT citus_add_node('127.0.0.1', ${port[w1]})" \
  -c "SELECT citus_add_node('127.0.0.1', ${port[w2]})" \
  -c "CREATE ROLE app LOGIN" >/dev/null || exit 1
# app owns pgbench's tables (CREATE INDEX runs as app).
for n in "${nodes[@]}"; do q "$n" postgres -c "GRANT CREATE ON SCHEMA public TO app" || exit 1; done
t0=$SECONDS
"$PGBENCH" -i -q -s "$scale" -h 127.0.0.1 -p "${port[coord]}" -U app postgres >"$out/init.log" 2>&1 ||
  { tail "$out/init.log"; exit 1; }
PGOPTIONS='-c client_min_messages=warning' q coord app >/dev/null <<'EOF' || exit 1
SELECT create_distributed_table('pgbench_accounts', 'aid');
SELECT create_distributed_table('pgbench_branches', 'bid', colocate_with => 'none');
SELECT create_distributed_table('pgbench_tellers', 'tid', colocate_with => 'none');
SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts');
SELECT truncate_local_data_after_distributing_table(t)
  FROM unnest(ARRAY['pgbench_accounts', 'pgbench_branches', 'pgbench_tellers', 'pgbench_history']::regclass[]) t;
EOF
# A CTE `placed`: each key of a distributed table, from generate_series($3),
# with the port of the worker that holds its shard.
placed() { # table key series-arguments
  cat <<EOF
placed AS (
  SELECT $2, (SELECT nodeport FROM pg_dist_shard_placement p
                WHERE p.shardid = get_shard_id_for_distribution_column('$1', $2)) AS port
    FROM generate_series($3) $2)
EOF
}
# Pairs of accounts on different workers, in either order, for the explicit
# transactions (a reference table: read on the coordinator).
naids=$((100000 * scale))
step=$(( naids / 20000 )); [ $step -ge 1 ] || step=1
q coord app >/dev/null <<EOF || exit 1
CREATE TABLE aid_pairs (k int PRIMARY KEY, a1 int NOT NULL, a2 int NOT NULL);
SELECT create_reference_table('aid_pairs');
INSERT INTO aid_pairs
WITH $(placed pgbench_accounts aid "1, $naids, $step"),
w1 AS (SELECT aid, row_number() OVER (ORDER BY random()) n FROM placed WHERE port = ${port[w1]}),
w2 AS (SELECT aid, row_number() OVER (ORDER BY random()) n FROM placed WHERE port = ${port[w2]})
SELECT n, CASE WHEN f THEN a ELSE b END, CASE WHEN f THEN b ELSE a END
  FROM (SELECT w1.n, w1.aid a, w2.aid b, random() < 0.5 f FROM w1 JOIN w2 USING (n)) s;
EOF
npairs=$(q coord app -c "SELECT count(*) FROM aid_pairs")
# The contended form: every pair of the first 10 tellers that sit on
# different workers, in both orders.
q coord app >/dev/null <<EOF || exit 1
CREATE TABLE hot_pairs (k int PRIMARY KEY, t1 int NOT NULL, t2 int NOT NULL);
SELECT create_reference_table('hot_pairs');
INSERT INTO hot_pairs
WITH $(placed pgbench_tellers tid "1, 10")
SELECT row_number() OVER (ORDER BY a.tid, b.tid), a.tid, b.tid
  FROM placed a JOIN placed b ON a.port <> b.port;
EOF
nhot=$(q coord app -c "SELECT count(*) FROM hot_pairs")
[ "$nhot" -gt 0 ] || { log "the first 10 tellers all sit on one worker: no hot pairs"; exit 1; }
shards=$(q coord postgres -c "SELECT string_agg(nodeport || ':' || c, ' ') FROM (SELECT nodeport, count(*) c FROM citus_shards WHERE table_name = 'pgbench_accounts'::regclass GROUP BY 1 ORDER BY 1) s")
log "loaded and distributed in $((SECONDS - t0)) s; accounts shards per node: $shards; $npairs account pairs across workers"

# -- workload scripts ------------------------------------------------------------
wdir=$root/scripts
mkdir -p "$wdir"
# A transfer between the two rows of a random pair: file, pairs table and
# its count's variable, the pair's columns, the table, key and balance.
transfer_script() {
  cat >"$1" <<EOF
\\set k random(1, :$3)
SELECT $4 AS x1, $5 AS x2 FROM $2 WHERE k = :k \\gset
\\set delta random(-5000, 5000)
BEGIN;
UPDATE $6 SET $8 = $8 + :delta WHERE $7 = :x1;
UPDATE $6 SET $8 = $8 - :delta WHERE $7 = :x2;
COMMIT;
EOF
}
transfer_script "$wdir/explicit.sql" aid_pairs npairs a1 a2 pgbench_accounts aid abalance
transfer_script "$wdir/hot.sql" hot_pairs nhot t1 t2 pgbench_tellers tid tbalance
# One TPC-B transaction, then asleep: a session that is connected and warm
# (it holds Citus's connections into both workers) but idle. (pgbench's
# \sleep counts microseconds in an int: 2000 s is near its most.)
cat >"$wdir/once.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
END;
\sleep 2000 s
EOF
echo "SELECT count(*) FROM pgbench_accounts WHERE abalance <> 0;" >"$wdir/multi.sql"
cat >"$wdir/msupdate.sql" <<'EOF'
\set r random(0, 9)
UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid % 10 = :r;
EOF
"$PSQL" -X -At -h 127.0.0.1 -p "${port[coord]}" -U app -d postgres -c \
  "COPY (SELECT (g % (10 * $scale)) + 1, (g % $scale) + 1, (g * 7919) % $naids + 1, 0, now() FROM generate_series(1, 2000) g) TO STDOUT CSV" \
  >"$wdir/history.csv"
chmod -R a+rX "$wdir"

# -- one run ---------------------------------------------------------------------
csv=$out/results.csv
echo "round,config,workload,clients,duration_s,tps,failed_tx,aborted_clients,zero_tps_intervals,hang,stuck_after_kill,overflow_coord,overflow_w1,overflow_w2,maxq_coord,maxq_w1,maxq_w2,progress_log_lines,breaker_log_lines,citus_deadlocks,side" >"$csv"
hangs=0
# Runs that ended but did not run: no tps line, or a client aborted on an
# error pgbench does not retry (--max-tries covers deadlocks and
# serialization failures). Each fails the script, as a hang does.
broken=0

gated() { [ "$1" != nogate ]; }
overflow() { q "$1" postgres -c "SELECT overflow_total FROM gatekeeper.status" 2>/dev/null || echo NA; }
log_size() { stat -c %s "$root/$1.log"; }
log_count() { # node offset pattern
  tail -c +$(($2 + 1)) "$root/$1.log" | grep -c -- "$3"
}
dump_node() { # node file
  {
    echo "== $1: gatekeeper.status"
    q "$1" postgres -x -c "SELECT * FROM gatekeeper.status"
    echo "== $1: gatekeeper.sessions (not idle)"
    q "$1" postgres -c "SELECT * FROM gatekeeper.sessions WHERE state <> 'idle' ORDER BY state, queue_position"
    echo "== $1: pg_stat_activity of app"
    q "$1" postgres -c "SELECT pid, state, wait_event_type, wait_event, application_name, now() - xact_start, left(query, 80) FROM pg_stat_activity WHERE usename = 'app' ORDER BY state"
    if [ "$1" = coord ]; then echo "== citus_lock_waits"; q coord postgres -c "SELECT * FROM citus_lock_waits"; fi
  } >"$2" 2>&1
}
snapshot_node() { # node file: who is where, mid-run
  {
    echo "== $1: gatekeeper.status"
    q "$1" postgres -x -c "SELECT max_active, tickets, admitted, running, stalled, queued, overflow_total FROM gatekeeper.status"
    echo "== $1: gatekeeper.sessions by state and name"
    q "$1" postgres -c "SELECT state, split_part(application_name, ' ', 1), count(*) FROM gatekeeper.sessions GROUP BY 1, 2 ORDER BY 1, 2"
    echo "== $1: app backends by state and wait event"
    q "$1" postgres -c "SELECT state, wait_event_type, wait_event, count(*) FROM pg_stat_activity WHERE usename = 'app' GROUP BY 1, 2, 3 ORDER BY 4 DESC"
  } >"$2" 2>&1
}
app_backends() { q "$1" postgres -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND pid <> pg_backend_pid()" 2>/dev/null || echo 0; }
# Node $1 still has app sessions doing something (queued or not idle).
busy_backends() {
  q "$1" postgres -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND state <> 'idle'" 2>/dev/null || echo 0
}

pgbench_run() { # name clients extra-args... (runs in background, files in $rdir)
  local name=$1 c=$2; shift 2
  "$PGBENCH" -n -c "$c" -j 2 -T "$duration" -P 5 --max-tries=10 -h 127.0.0.1 -p "${port[coord]}" -U app "$@" postgres \
    >"$rdir/$name.out" 2>"$rdir/$name.err" &
  run_pids+=($!)
}
copy_loop() { # until the run's end
  local end=$((SECONDS + duration)) ok=0 bad=0
  while [ $SECONDS -lt $end ]; do
    if timeout $((duration + hang_after)) "$PSQL" -X -q -h 127.0.0.1 -p "${port[coord]}" -U app -d postgres \
         -c "\\copy pgbench_history (tid, bid, aid, delta, mtime) FROM '$wdir/history.csv' CSV" 2>>"$rdir/copy.err"; then
      ok=$((ok + 1))
    else bad=$((bad + 1)); fi
  done
  echo "copies ok $ok failed $bad" >"$rdir/copy.out"
}
index_job() {
  sleep $((duration / 4))
  local t s
  for stmt in "CREATE INDEX ix_abal ON pgbench_accounts (abalance)" "DROP INDEX ix_abal" \
              "CREATE INDEX CONCURRENTLY ix_abal ON pgbench_accounts (abalance)" "DROP INDEX ix_abal"; do
    t=$EPOCHREALTIME
    if timeout $((duration + hang_after)) "$PSQL" -X -q -h 127.0.0.1 -p "${port[coord]}" -U app -d postgres -c "$stmt" 2>>"$rdir/index.err"; then s=ok; else s=failed; fi
    awk -v a="$t" -v b="$EPOCHREALTIME" -v st="$stmt: $s" 'BEGIN {printf "%s in %.1f s\n", st, b - a}' >>"$rdir/index.out"
  done
}
# N warm idle sessions on the coordinator (once.sql); waits until all of
# them have ended their transaction (up to 60 s; warm = how many did).
# Their pgbench (idle_pid) is stopped by run_one.
idle_sessions() { # n
  "$PGBENCH" -n -c "$1" -j 1 -T $((duration + hang_after + 120)) -f "$wdir/once.sql" \
    -h 127.0.0.1 -p "${port[coord]}" -U app postgres >"$rdir/idle.out" 2>"$rdir/idle.err" &
  idle_pid=$!
  local i
  warm=0
  for i in $(seq 1 120); do
    warm=$(q coord postgres -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND state = 'idle' AND query ~ '^END'")
    [ "$warm" -ge "$1" ] && break
    sleep 0.5
  done
}
sampler() { # node: the gate's counters every 500 ms over one exempt connection
  # (columns: time, queued, admitted, overflow_total, then the limit, tickets,
  # why the limit last moved, running holders and the CPUs' idle share)
  printf "SELECT extract(epoch FROM now())::int, queued, admitted, overflow_total, max_active, tickets, limit_reason, running, round(cpu_idle::numeric, 2) FROM gatekeeper.status \\\\watch 0.5\n" |
    timeout $((duration + hang_after + 30)) "$PSQL" -X -q -At -F ' ' -h 127.0.0.1 -p "${port[$1]}" -U postgres -d postgres \
    >"$rdir/samples-$1.txt" 2>/dev/null &
  sampler_pids+=($!)
}

run_one() { # round config workload
  local round=$1 config=$2 wl=$3 clients
  rdir=$out/runs/r$round-$config-$wl
  mkdir -p "$rdir"
  run_pids=() sampler_pids=() idle_pid=
  declare -A ov0 off0
  for n in "${nodes[@]}"; do
    off0[$n]=$(log_size "$n")
    if gated "$config"; then ov0[$n]=$(overflow "$n"); sampler "$n"; fi
  done
  case $wl in
    tpcb-*) clients=${wl#tpcb-}; pgbench_run main "$clients" ;;
    explicit-*) clients=${wl#explicit-}; pgbench_run main "$clients" -f "$wdir/explicit.sql" -D npairs="$npairs" ;;
    hot-*) clients=${wl#hot-}; pgbench_run main "$clients" -f "$wdir/hot.sql" -D nhot="$nhot" ;;
    select-*) clients=${wl#select-}; pgbench_run main "$clients" -S ;;
    multi-*) clients=${wl#multi-}; pgbench_run main "$clients" -f "$wdir/multi.sql" ;;
    mixed) clients=32
      pgbench_run main 32
      pgbench_run msupdate 1 -f "$wdir/msupdate.sql"
      copy_loop & run_pids+=($!) ;;
    index) clients=32
      pgbench_run main 32
      index_job & run_pids+=($!) ;;
    idle-*) clients=${wl#idle-}; local parked=${clients#*-}; clients=${clients%-*}
      idle_sessions "$parked"
      pgbench_run main "$clients" ;;
    rate-*) clients=${wl#rate-}; local rate=${clients%-*}; clients=${clients#*-}
      pgbench_run main "$clients" --rate "$rate" ;;
  esac
  bg_pids=("${run_pids[@]}" "${sampler_pids[@]}" $idle_pid)
  local deadline=$((SECONDS + duration + hang_after)) mid=$((SECONDS + duration / 2)) snapped=no hang=no stuck=no p
  while :; do
    if [ $snapped = no ] && [ $SECONDS -ge $mid ]; then
      snapped=yes
      for n in "${nodes[@]}"; do snapshot_node "$n" "$rdir/mid-$n.txt"; done
    fi
    local alive=0
    for p in "${run_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    if [ $SECONDS -ge $deadline ]; then
      hang=yes
      hangs=$((hangs + 1))
      log "HANG: $config $wl not finished after $((duration + hang_after)) s; recording the views"
      for n in "${nodes[@]}"; do dump_node "$n" "$rdir/hang-$n.txt"; done
      for p in "${run_pids[@]}"; do pkill -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
      sleep 1
      for p in "${run_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
      # Does the hang outlive its clients?
      sleep 10
      for n in "${nodes[@]}"; do
        if [ "$(busy_backends "$n")" != 0 ]; then stuck=yes; dump_node "$n" "$rdir/after-kill-$n.txt"; fi
      done
      break
    fi
    sleep 1
  done
  wait "${run_pids[@]}" 2>/dev/null
  for p in "${sampler_pids[@]}" $idle_pid; do kill "$p" 2>/dev/null; done
  wait "${sampler_pids[@]}" $idle_pid 2>/dev/null
  bg_pids=()

  local tps failed aborted zero side=""
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$rdir/main.out")
  [ -n "$tps" ] || tps=NA
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$rdir/main.out"); failed=${failed:-NA}
  aborted=$(cat "$rdir"/*.err 2>/dev/null | grep -c 'client [0-9]* aborted')
  zero=$(grep -c ', 0\.0 tps' "$rdir/main.err")
  case $wl in
    mixed) side="msupdate tps $(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' "$rdir/msupdate.out"); $(cat "$rdir/copy.out" 2>/dev/null)" ;;
    index) side=$(tr '\n' ';' <"$rdir/index.out" 2>/dev/null) ;;
    idle-*) side="$warm of $parked idle sessions warm" ;;
    # The whole run's average latency counts each backend's first
    # transaction (Citus connects to the workers then); the last 5 s
    # interval's (pgbench -P 5) is warm.
    rate-*) side="latency avg $(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$rdir/main.out") ms (last 5 s: $(sed -n 's/^progress: .* lat \([0-9.]*\) ms.*/\1/p' "$rdir/main.err" | tail -1) ms), schedule lag avg $(sed -n 's/^rate limit schedule lag: avg \([0-9.]*\) .*/\1/p' "$rdir/main.out") ms" ;;
  esac
  local ovs=() mq=() lim=() prog=0 brk=0 dl=0 n d
  for n in "${nodes[@]}"; do
    if gated "$config"; then
      d=$(overflow "$n")
      if [[ $d =~ ^[0-9]+$ && ${ov0[$n]} =~ ^[0-9]+$ ]]; then ovs+=($((d - ${ov0[$n]}))); else ovs+=(NA); fi
      mq+=("$(awk 'NF >= 4 && $2 ~ /^[0-9]+$/ && $2 > m {m = $2} END {print m + 0}' "$rdir/samples-$n.txt")")
      # The limit over the samples taken while sessions were queued: average, range.
      lim+=("$n:$(awk 'NF >= 9 && $2 > 0 && $5 ~ /^[0-9]+$/ {s += $5; k++; if (!lo || $5 < lo) lo = $5; if ($5 > hi) hi = $5}
                  END {if (k) printf "%.1f(%d-%d)", s / k, lo, hi; else printf "-"}' "$rdir/samples-$n.txt")")
    else ovs+=(""); mq+=(""); fi
    prog=$((prog + $(log_count "$n" "${off0[$n]}" "no holder\( of the class\)\? worked")))
    brk=$((brk + $(log_count "$n" "${off0[$n]}" "over the limit because process")))
    dl=$((dl + $(log_count "$n" "${off0[$n]}" "distributed deadlock")))
  done
  echo "$round,$config,$wl,$clients,$duration,$tps,$failed,$aborted,$zero,$hang,$stuck,${ovs[0]},${ovs[1]},${ovs[2]},${mq[0]},${mq[1]},${mq[2]},$prog,$brk,$dl,\"$side\"" >>"$csv"
  log "$config $wl: tps $tps, failed $failed, aborted clients $aborted, hang $hang (stuck after kill: $stuck), overflow ${ovs[*]}, max queued ${mq[*]}${lim:+, limit while queued ${lim[*]}}, progress/breaker log lines $prog/$brk, Citus deadlocks $dl${side:+; $side}"
  if [ "$hang" = no ] && { [ "$tps" = NA ] || [ "$aborted" != 0 ]; }; then
    broken=$((broken + 1))
    log "FAILED: $config $wl ended without running: tps $tps, aborted clients $aborted (see $rdir)"
  fi

  # Leave the cluster clean for the next run.
  if [ $hang = yes ]; then
    log "restarting the cluster after the hang"
    for n in "${nodes[@]}"; do node_stop_now "$n"; done
    restart_all || return 1
  else
    local tries=0
    while [ $tries -lt 10 ]; do
      [ "$(app_backends coord)" = 0 ] && break
      sleep 1; tries=$((tries + 1))
    done
  fi
  q coord app -c "DROP INDEX IF EXISTS ix_abal" >/dev/null 2>&1
  return 0
}

# -- what passes on a worker -------------------------------------------------------
# A session named like Citus's connections (citus_internal gpid=N) on
# worker 1 sleeps, in a block opened the way Citus opens a distributed
# transaction's, or in a statement outside a block, the way Citus sends a
# shard task; its state in gatekeeper.sessions says whether the gate
# admitted it (active: gated) or let it ride (idle). Both ride when the
# session comes from a node's address (127.0.0.1, where every node is
# registered; pg_gatekeeper.citus_peers = 'nodes', the default); the same
# over a Unix-domain socket, a peer that is not a node, are gated, and the
# refused peer is logged. Returns 1 when any answer is wrong.
trust_failed=0
# The first answer of query $1 on worker 1 that is not empty, within 10 s
# (empty if none came).
poll_w1() {
  local r= i
  for i in $(seq 1 100); do
    r=$(q w1 postgres -c "$1")
    [ -n "$r" ] && break
    sleep 0.1
  done
  printf '%s' "$r"
}
# A session of app on worker 1, named $name and connected to $host, runs
# $sql, which sleeps: the state gatekeeper.sessions shows for it while it
# sleeps must be $expected.
session_case() { # what label name host sql expected
  PGAPPNAME=$3 timeout --foreground 60 "$PSQL" -X -q -h "$4" -p "${port[w1]}" -U app -d postgres -c "$5" \
    >/dev/null 2>"$out/trust-$1.err" &
  local pid=$! state
  state=$(poll_w1 "SELECT s.state FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid)
                   WHERE a.application_name = '$3' AND a.wait_event = 'PgSleep'")
  wait $pid || { log "trust: $1: the session failed: $(cat "$out/trust-$1.err")"; trust_failed=1; return; }
  if [ "$state" = "$6" ]; then log "trust: $1 ($2): $state in gatekeeper.sessions, as expected"
  else log "trust: $1 ($2): '$state' in gatekeeper.sessions, expected $6"; trust_failed=1; fi
}
# run_command_on_*'s connections run the caller's SQL. Citus opens them
# under its executor's name and renames them citus_run_command gpid=N; the
# caller's SQL names the session back (RESET application_name) and sleeps
# from 127.0.0.1, a node: still gated on worker 1 (active), where riding,
# one admission would start any number of ungated transactions.
renamed_case() {
  local sql="SELECT success FROM master_run_on_worker(ARRAY['127.0.0.1'], ARRAY[${port[w1]}],
               ARRAY['RESET application_name; SELECT pg_sleep(2)'], false)"
  timeout --foreground 60 "$PSQL" -X -q -At -h 127.0.0.1 -p "${port[coord]}" -U app -d postgres -c "$sql" \
    >"$out/trust-renamed.out" 2>&1 &
  local pid=$! state ok
  state=$(poll_w1 "SELECT s.state FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid)
                   WHERE a.application_name LIKE 'citus\_internal gpid=%' AND a.wait_event = 'PgSleep'")
  wait $pid
  ok=$(cat "$out/trust-renamed.out")
  if [ "$ok" != t ]; then log "trust: renamed: master_run_on_worker failed: $ok"; trust_failed=1
  elif [ "$state" = active ]; then log "trust: renamed (run_command's connection named back as the executor's): active in gatekeeper.sessions, as expected"
  else log "trust: renamed (run_command's connection named back as the executor's): '$state' in gatekeeper.sessions, expected active"; trust_failed=1; fi
}
trust_check() {
  local block="BEGIN TRANSACTION ISOLATION LEVEL READ COMMITTED;SELECT assign_distributed_transaction_id(1, 7, '2026-01-01 00:00:00+00');SELECT pg_sleep(2);COMMIT"
  session_case citus "a distributed transaction's block, from 127.0.0.1" "citus_internal gpid=10000000099" 127.0.0.1 "$block" idle
  session_case socket "the same block, over a Unix socket" "citus_internal gpid=10000000099" "$root" "$block" active
  session_case task "a statement outside a block, from 127.0.0.1" "citus_internal gpid=20000000098" 127.0.0.1 "SELECT pg_sleep(2)" idle
  session_case task-socket "the same statement, over a Unix socket" "citus_internal gpid=20000000098" "$root" "SELECT pg_sleep(2)" active
  renamed_case
  # A node that reaches itself through a socket directory
  # (citus.local_hostname) trusts its own Unix-socket peers.
  if q w1 postgres -c "ALTER SYSTEM SET citus.local_hostname = '$root'" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 &&
      wait_setting w1 citus.local_hostname "$root"; then
    session_case local-socket "the block over a Unix socket, citus.local_hostname a socket directory" \
      "citus_internal gpid=10000000097" "$root" "$block" idle
  else log "trust: could not set citus.local_hostname on worker 1"; trust_failed=1; fi
  q w1 postgres -c "ALTER SYSTEM RESET citus.local_hostname" -c "SELECT pg_reload_conf()" >/dev/null 2>&1
  wait_setting w1 citus.local_hostname localhost || log "trust: citus.local_hostname not back to localhost on worker 1"
  # The refused peer is logged.
  if grep -q "its peer (a Unix-domain socket) is not in pg_gatekeeper.citus_peers" "$root/w1.log"; then
    log "trust: the refused peer is in worker 1's log"
  else log "trust: worker 1's log does not name the refused peer"; trust_failed=1; fi
}

# Wait (up to 10 s) until new sessions of node $1 see setting $2 at $3.
wait_setting() { # node setting value
  local i
  for i in $(seq 1 100); do
    [ "$(q "$1" postgres -c "SELECT current_setting('$2')")" = "$3" ] && return 0
    sleep 0.1
  done
  return 1
}

# -- a small gate with every wait logged, for the checks below --------------------
# Node $2's gate at max_active 2, with every wait (log_min_wait = 0) and
# connection (log_connections) in its log, for check $1 (its setup log is
# $out/$1-setup.log). Returns once new sessions see the settings (or after
# 10 s, logged), 1 when they could not be set (the check has failed).
small_gate() { # check node
  local i
  if ! q "$2" postgres -c "ALTER SYSTEM SET pg_gatekeeper.log_min_wait = 0" -c "ALTER SYSTEM SET pg_gatekeeper.max_active = 2" \
      -c "ALTER SYSTEM SET log_connections = on" -c "SELECT pg_reload_conf()" >>"$out/$1-setup.log" 2>&1; then
    log "$1: could not set $2 up: $(tail -3 "$out/$1-setup.log")"; trust_failed=1; return 1
  fi
  # New sessions see the reloaded settings once the postmaster has read them.
  for i in $(seq 1 100); do
    [ "$(q "$2" postgres -c "SELECT current_setting('pg_gatekeeper.max_active') || current_setting('log_connections')")" = 2on ] &&
      return 0
    sleep 0.1
  done
  log "$1: $2 had not reloaded after 10 s; checking anyway"
}
small_gate_off() { # node
  q "$1" postgres -c "ALTER SYSTEM RESET pg_gatekeeper.log_min_wait" -c "ALTER SYSTEM RESET pg_gatekeeper.max_active" \
    -c "ALTER SYSTEM RESET log_connections" -c "SELECT pg_reload_conf()" >/dev/null 2>&1
}
# What node $1 logged since offset $2: the waits of Citus's shard tasks,
# the waits of clients (pgbench), and the connections Citus's tasks came
# over, as three numbers.
logged_waits() { # node offset
  echo "$(log_count "$1" "$2" "citus_internal gpid=[0-9]* LOG:  pg_gatekeeper: process [0-9]* admitted after waiting")" \
    "$(log_count "$1" "$2" "pgbench LOG:  pg_gatekeeper: process [0-9]* admitted after waiting")" \
    "$(log_count "$1" "$2" "connection authorized: user=app database=postgres application_name=citus_internal gpid=")"
}

# -- loopback shard tasks on the coordinator ------------------------------------
# With shards on the coordinator too, a multi-shard read outside a block
# sends the coordinator's own shard tasks over connections to itself, named
# citus_internal gpid=<the holder's>. They ride on their holder's admission:
# with the coordinator's gate full (max_active 2, 8 clients), none of them
# may wait in its queue, while clients do. log_min_wait = 0 logs every wait
# under the waiting session's application name; log_connections shows that
# the tasks did come over connections. Returns 1 (trust_failed) when a task
# waited, or the check proved nothing (no shard on the coordinator, no task
# connection, no client wait), or the reads did not finish.
loopback_check() {
  local setup=(-c "SELECT citus_set_node_property('127.0.0.1', ${port[coord]}, 'shouldhaveshards', true)"
    -c "CREATE TABLE loopback (id int PRIMARY KEY, v int)"
    -c "SELECT create_distributed_table('loopback', 'id', shard_count => 12)"
    -c "INSERT INTO loopback SELECT g, g FROM generate_series(1, 10000) g"
    -c "GRANT SELECT ON loopback TO app")
  local undo=(-c "DROP TABLE IF EXISTS loopback"
    -c "SELECT citus_set_node_property('127.0.0.1', ${port[coord]}, 'shouldhaveshards', false)")
  local off rc tasks clients here conns
  off=$(log_size coord)
  if ! q coord postgres "${setup[@]}" >"$out/loopback-setup.log" 2>&1; then
    log "loopback: setup failed: $(tail -3 "$out/loopback-setup.log")"; trust_failed=1
    q coord postgres "${undo[@]}" >/dev/null 2>&1; return
  fi
  if ! small_gate loopback coord; then
    small_gate_off coord; q coord postgres "${undo[@]}" >/dev/null 2>&1; return
  fi
  here=$(q coord postgres -c "SELECT count(*) FROM citus_shards WHERE table_name = 'loopback'::regclass AND nodeport = ${port[coord]}")
  echo "SELECT count(*) FROM loopback WHERE v >= 0;" >"$root/loopback.sql"
  chmod a+r "$root/loopback.sql"
  timeout --foreground 120 "$PGBENCH" -n -f "$root/loopback.sql" -c 8 -j 2 -t 20 -h 127.0.0.1 -p "${port[coord]}" -U app postgres \
    >"$out/loopback-pgbench.log" 2>&1
  rc=$?
  small_gate_off coord
  q coord postgres "${undo[@]}" >/dev/null 2>&1
  read -r tasks clients conns < <(logged_waits coord "$off")
  if [ $rc != 0 ]; then log "loopback: the reads failed or did not finish in 120 s (exit $rc)"; trust_failed=1
  elif [ "$tasks" != 0 ]; then log "loopback: $tasks of the coordinator's own shard tasks waited in its queue"; trust_failed=1
  elif [ "${here:-0}" = 0 ]; then log "loopback: no shard of the table is on the coordinator: nothing was checked"; trust_failed=1
  elif [ "$conns" = 0 ]; then log "loopback: no shard task came over a connection: nothing was checked"; trust_failed=1
  elif [ "$clients" = 0 ]; then log "loopback: no client waited: the coordinator's gate never filled"; trust_failed=1
  else log "loopback: $clients client waits, $conns task connections, no task waited ($here of 12 shards on the coordinator), as expected"; fi
}

# -- clients on both workers ---------------------------------------------------------
# Citus syncs its metadata to the workers, so clients may query any node.
# A multi-shard read outside a block on one worker sends tasks to the other
# over connections named citus_internal gpid=<the holder's>, from that
# node's address. They ride on the admission of the holder they serve:
# with both workers' gates full (max_active 2, 8 clients on each), none of
# them may wait in a queue, while clients do. Gated, the two workers'
# holders each waited for tasks queued behind the other's. Returns 1
# (trust_failed) when a task waited, or the check proved nothing (no task
# connection, no client wait), or the reads did not finish.
mx_check() {
  local setup=(-c "CREATE TABLE mx (id int PRIMARY KEY, v int)"
    -c "SELECT create_distributed_table('mx', 'id', shard_count => 12)"
    -c "INSERT INTO mx SELECT g, g FROM generate_series(1, 10000) g" -c "GRANT SELECT ON mx TO app")
  local n i rc=0 tasks=0 clients=0 conns=0 t c k pids=()
  declare -A off
  if ! q coord postgres "${setup[@]}" >"$out/mx-setup.log" 2>&1; then
    log "mx: setup failed: $(tail -3 "$out/mx-setup.log")"; trust_failed=1
    q coord postgres -c "DROP TABLE IF EXISTS mx" >/dev/null 2>&1; return
  fi
  for n in w1 w2; do
    off[$n]=$(log_size "$n")
    if ! small_gate mx "$n"; then
      small_gate_off w1; small_gate_off w2; q coord postgres -c "DROP TABLE IF EXISTS mx" >/dev/null 2>&1; return
    fi
  done
  echo "SELECT count(*) FROM mx WHERE v >= 0;" >"$root/mx.sql"
  chmod a+r "$root/mx.sql"
  local t0=$SECONDS
  for n in w1 w2; do
    timeout --foreground 120 "$PGBENCH" -n -f "$root/mx.sql" -c 8 -j 2 -t 20 -h 127.0.0.1 -p "${port[$n]}" -U app postgres \
      >"$out/mx-pgbench-$n.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=$?; done
  local took=$((SECONDS - t0))
  for n in w1 w2; do small_gate_off "$n"; done
  q coord postgres -c "DROP TABLE IF EXISTS mx" >/dev/null 2>&1
  for n in w1 w2; do
    read -r t c k < <(logged_waits "$n" "${off[$n]}")
    tasks=$((tasks + t)) clients=$((clients + c)) conns=$((conns + k))
  done
  if [ $rc != 0 ]; then log "mx: the reads failed or did not finish in 120 s (exit $rc)"; trust_failed=1
  elif [ "$tasks" != 0 ]; then log "mx: $tasks shard tasks waited in a queue (the reads took $took s)"; trust_failed=1
  elif [ "$conns" = 0 ]; then log "mx: no shard task came over a connection: nothing was checked"; trust_failed=1
  elif [ "$clients" = 0 ]; then log "mx: no client waited: the workers' gates never filled"; trust_failed=1
  else log "mx: 320 reads in $took s: $clients client waits, $conns task connections, no task waited, as expected"; fi
}

# -- Citus's views, through run_command_on_all_nodes ----------------------------
# citus_stat_activity (granted to PUBLIC) runs its query on every node, this
# one included, over connections renamed citus_run_command gpid=<the
# caller's>. A non-superuser's are gated (master_run_on_worker opens as many
# as its caller asks for): with the coordinator's gate full (max_active 2,
# 8 clients of the view), each call's connection to the coordinator queues
# behind its own caller, which polls for it in a pg_usleep loop, showing no
# wait event. The progress guarantee must see through the polling and move
# them: the reads must end within 120 s (they did not while a poller's
# moments on a CPU counted as work; 24 s after). Returns 1 (trust_failed)
# when they did not, or the check proved nothing (no command connection or
# no client waited).
views_check() {
  local off rc commands clients
  off=$(log_size coord)
  small_gate views coord || { small_gate_off coord; return; }
  echo "SELECT count(*) FROM citus_stat_activity;" >"$root/views.sql"
  chmod a+r "$root/views.sql"
  local t0=$SECONDS
  timeout --foreground 120 "$PGBENCH" -n -f "$root/views.sql" -c 8 -j 2 -t 5 -h 127.0.0.1 -p "${port[coord]}" -U app postgres \
    >"$out/views-pgbench.log" 2>&1
  rc=$?
  local took=$((SECONDS - t0))
  small_gate_off coord
  commands=$(log_count coord "$off" "citus_run_command gpid=[0-9]* LOG:  pg_gatekeeper: process [0-9]* admitted after waiting")
  clients=$(log_count coord "$off" "pgbench LOG:  pg_gatekeeper: process [0-9]* admitted after waiting")
  if [ $rc != 0 ]; then log "views: the reads of citus_stat_activity failed or did not finish in 120 s (exit $rc)"; trust_failed=1
  elif [ "$commands" = 0 ]; then log "views: no run_command_on_all_nodes connection waited: nothing was checked"; trust_failed=1
  elif [ "$clients" = 0 ]; then log "views: no client waited: the coordinator's gate never filled"; trust_failed=1
  else log "views: 40 reads of citus_stat_activity in $took s: $clients client waits, $commands command connection waits, as expected"; fi
}

# -- summary ---------------------------------------------------------------------
# The results name no machine path: the cluster's temporary directory
# becomes <cluster>, and paths inside the repository become relative.
scrub() {
  grep -rlF -e "$root" -e "$repo/" "$out" 2>/dev/null | while read -r f; do
    sed -i -e "s#$root#<cluster>#g" -e "s#$repo/##g" "$f"
  done
}
summary() {
  cat >"$out/meta.md" <<EOF
# pg_gatekeeper on Citus: 3 nodes on one machine

- Command: \`bash scripts/citus.sh $orig_args\` ($rounds round(s), $duration s per run, pgbench scale $scale, hang = not finished $hang_after s after its end)
- Machine: $(nproc) CPUs, $(free -g | awk '/^Mem/ {print $2}') GiB; coordinator and 2 workers on it, loopback TCP; the clients (pgbench -j 2) share the CPUs
- PostgreSQL $pg_version; $citus_full (extension $citus_version); pg_gatekeeper $(grep -m1 default_version "$("$PG_CONFIG" --sharedir)/extension/pg_gatekeeper.control" | cut -d"'" -f2) as installed in PostgreSQL $PG_MAJOR (repository at $(git rev-parse --short HEAD 2>/dev/null))
- Durable commits: synchronous_commit = on, fsync = on (PostgreSQL's defaults); max_connections coordinator 300, workers 400; max_prepared_transactions the same
- pgbench_accounts shards per worker port: $shards; the explicit transactions update 2 accounts on different workers, in random order ($npairs pairs); the hot transactions update 2 of the first 10 tellers on different workers, in random order ($nhot ordered pairs)
- Configurations: nogate = Citus alone (pg_gatekeeper not preloaded); defaults = the gate at its defaults on every node; small = max_active 4 on the coordinator, 2 on the workers; coordonly = the gate on the coordinator only (max_active 4, max_tickets 4: no lending), app exempt on the workers (exempt_roles); workersonly = the gate at its defaults on the workers only; -ptMS = progress_timeout MS ms; -cmN = max_active N on the coordinator; -whMS = warm_hand_off MS ms on the coordinator; -np = citus_peers '' on the workers (every connection from the coordinator gated there)
- Clients: the non-superuser app through the coordinator; pgbench -n -j 2 --max-tries=10 -T $duration; rounds rotate the order of the configurations
EOF
  python3 bench/citus_report.py "$out"
  scrub
}

for round in $(seq 1 "$rounds"); do
  # Each round starts with another configuration (drift: the tables grow).
  read -r -a cf <<<"$configs"
  for ((c = 0; c < ${#cf[@]}; c++)); do
    config=${cf[$(( (c + round - 1) % ${#cf[@]} ))]}
    log "== round $round: configuration $config"
    set_config "$config" || exit 2
    restart_all || exit 1
    q coord app -c "VACUUM ANALYZE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history" >/dev/null 2>&1
    for n in "${nodes[@]}"; do q "$n" postgres -c CHECKPOINT >/dev/null; done
    for wl in $workloads; do
      run_one "$round" "$config" "$wl" || { log "cluster failed to restart"; exit 1; }
    done
    if [ "$round" = 1 ] && [ "$config" = defaults ]; then trust_check; loopback_check; mx_check; views_check; fi
  done
  summary
  log "round $round done: ${out#"$repo/"}/summary.md"
done
log "results: ${out#"$repo/"}/results.csv, ${out#"$repo/"}/summary.md; hangs: $hangs; runs that did not run: $broken"
[ $hangs = 0 ] && [ $trust_failed = 0 ] && [ $broken = 0 ]
