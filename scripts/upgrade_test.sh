#!/usr/bin/env bash
# pg_upgrade with pg_gatekeeper: a cluster of PostgreSQL OLD with the library
# preloaded and the extension created is upgraded to PostgreSQL NEW with
# pg_upgrade, then the extension must work there: the same version, the
# views, and a gated role admitted through the gate. The extension must be
# installed for both versions (scripts/install.sh). Run as root:
#   bash scripts/upgrade_test.sh 15 18
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-15} new=${2:-18}
PG_MAJOR=$old source scripts/pg_env.sh; OLD_BIN=$PG_BINDIR
PG_MAJOR=$new source scripts/pg_env.sh; NEW_BIN=$PG_BINDIR

source scripts/cluster.sh

work=$(cluster_dir pg_gatekeeper_upgrade)
old_dir=$work/old new_dir=$work/new
port=$((28000 + RANDOM % 1000))
cleanup() {
  PG_BINDIR=$OLD_BIN cluster_stop "$old_dir"
  PG_BINDIR=$NEW_BIN cluster_stop "$new_dir"
  if [ "${keep:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
keep=1
psql_new() { PG_BINDIR=$NEW_BIN cluster_psql "$new_dir" "$@"; }

# The new cluster is upgraded before the library is preloaded there, as a
# DBA often does: pg_upgrade then loads the library into a server that did
# not preload it, to check it loads (the library must not fail there).
# Checksums on both sides: PostgreSQL 18 enables them by default.
for d in "$old_dir" "$new_dir"; do
  mkdir "$d" && chown postgres: "$d"
done
PG_BINDIR=$OLD_BIN cluster_init --initdb --data-checksums "$old_dir" "$port" "pg_gatekeeper.max_active = 2" \
  "shared_preload_libraries = 'pg_gatekeeper'"
# Limits that differ, so that the view's reading tells the clusters apart.
PG_BINDIR=$NEW_BIN cluster_init --initdb --data-checksums "$new_dir" "$port" "pg_gatekeeper.max_active = 3"

PG_BINDIR=$OLD_BIN cluster_start "$old_dir"
PG_BINDIR=$OLD_BIN cluster_psql "$old_dir" postgres -d postgres \
  -c "CREATE EXTENSION pg_gatekeeper" -c "CREATE ROLE app LOGIN" \
  -c "ALTER ROLE app SET pg_gatekeeper.queue_timeout = '5s'"
version=$(PG_BINDIR=$OLD_BIN cluster_psql "$old_dir" postgres -d postgres \
  -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper'")
PG_BINDIR=$OLD_BIN cluster_stop "$old_dir"

echo "pg_upgrade $old -> $new (extension $version)"
# pg_upgrade writes its logs in the directory it runs in.
(cd "$work" && as_pg "$NEW_BIN/pg_upgrade" -b "$OLD_BIN" -B "$NEW_BIN" -d "$old_dir/data" -D "$new_dir/data" \
  -p "$port" -P "$port" -U postgres --socketdir="$work") >"$work/pg_upgrade.out" 2>&1 || {
  cat "$work/pg_upgrade.out"; exit 1; }

echo "shared_preload_libraries = 'pg_gatekeeper'" >> "$new_dir/data/postgresql.conf"
PG_BINDIR=$NEW_BIN cluster_start "$new_dir"
fail() { echo "FAIL: $*"; tail -20 "$new_dir/server.log"; exit 1; }
got=$(psql_new postgres -d postgres -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper'") ||
  fail "the upgraded cluster did not answer"
[ "$got" = "$version" ] || fail "extension version $got after the upgrade, $version before"
[ "$(psql_new postgres -d postgres -c 'SELECT max_active FROM gatekeeper.status')" = 3 ] ||
  fail "gatekeeper.status does not show the new cluster's limit"
psql_new app -d postgres -c "SELECT count(*) FROM pg_class" >/dev/null || fail "a gated role's query failed"
admitted=$(psql_new postgres -d postgres -c "SELECT admitted_total FROM gatekeeper.status") ||
  fail "gatekeeper.status failed"
[ "$admitted" -ge 1 ] || fail "the gated role's transaction was not admitted through the gate"
# The worker starts after the postmaster accepts connections: up to 10 s.
for _ in $(seq 100); do
  workers=$(psql_new postgres -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'") ||
    workers=
  [ "$workers" = 1 ] && break
  sleep 0.1
done
[ "$workers" = 1 ] || fail "no pg_gatekeeper worker on the upgraded cluster"
keep=0
echo "ok: pg_upgrade $old -> $new keeps pg_gatekeeper $version working (views, gate, worker)"
