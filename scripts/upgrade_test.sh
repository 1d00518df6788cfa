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

work=$(mktemp -d /tmp/pg_gatekeeper_upgrade.XXXXXX)
chown postgres: "$work"
port=$((28000 + RANDOM % 1000))
as_pg() { (cd "$work" && runuser -u postgres -- env -u RUST_BACKTRACE "$@"); }
cleanup() {
  for d in old new; do
    [ -f "$work/$d/postmaster.pid" ] && as_pg "$([ $d = old ] && echo "$OLD_BIN" || echo "$NEW_BIN")/pg_ctl" \
      -D "$work/$d" -m immediate stop >/dev/null 2>&1 || true
  done
  if [ "${keep:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
keep=1

conf() { # datadir
  cat >> "$1/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$work'
listen_addresses = ''
pg_gatekeeper.max_active = 2
CONF
}
psql_new() { as_pg "$NEW_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$work" -p "$port" "$@"; }

# The new cluster is upgraded before the library is preloaded there, as a
# DBA often does: pg_upgrade then loads the library into a server that did
# not preload it, to check it loads (the library must not fail there).
for d in old new; do
  bin=$([ $d = old ] && echo "$OLD_BIN" || echo "$NEW_BIN")
  # Checksums on both sides: PostgreSQL 18 enables them by default.
  as_pg "$bin/initdb" -D "$work/$d" -A trust -U postgres --no-sync --data-checksums >/dev/null
  conf "$work/$d"
done
echo "shared_preload_libraries = 'pg_gatekeeper'" >> "$work/old/postgresql.conf"

as_pg "$OLD_BIN/pg_ctl" -D "$work/old" -l "$work/old.log" -w start >/dev/null
as_pg "$OLD_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres -d postgres \
  -c "CREATE EXTENSION pg_gatekeeper" -c "CREATE ROLE app LOGIN" \
  -c "ALTER ROLE app SET pg_gatekeeper.queue_timeout = '5s'"
version=$(as_pg "$OLD_BIN/psql" -X -At -h "$work" -p "$port" -U postgres -d postgres \
  -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper'")
as_pg "$OLD_BIN/pg_ctl" -D "$work/old" -m fast -w stop >/dev/null

echo "pg_upgrade $old -> $new (extension $version)"
as_pg "$NEW_BIN/pg_upgrade" -b "$OLD_BIN" -B "$NEW_BIN" -d "$work/old" -D "$work/new" \
  -p "$port" -P "$port" -U postgres --socketdir="$work" >"$work/pg_upgrade.out" 2>&1 || {
  cat "$work/pg_upgrade.out"; exit 1; }

echo "shared_preload_libraries = 'pg_gatekeeper'" >> "$work/new/postgresql.conf"
as_pg "$NEW_BIN/pg_ctl" -D "$work/new" -l "$work/new.log" -w start >/dev/null
fail() { echo "FAIL: $*"; tail -20 "$work/new.log"; exit 1; }
got=$(psql_new -U postgres -d postgres -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper'")
[ "$got" = "$version" ] || fail "extension version $got after the upgrade, $version before"
[ "$(psql_new -U postgres -d postgres -c 'SELECT max_active FROM gatekeeper.status')" = 2 ] ||
  fail "gatekeeper.status does not show the new cluster's limit"
psql_new -U app -d postgres -c "SELECT count(*) FROM pg_class" >/dev/null || fail "a gated role's query failed"
admitted=$(psql_new -U postgres -d postgres -c "SELECT admitted_total FROM gatekeeper.status")
[ "$admitted" -ge 1 ] || fail "the gated role's transaction was not admitted through the gate"
workers=$(psql_new -U postgres -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
[ "$workers" = 1 ] || fail "no pg_gatekeeper worker on the upgraded cluster"
keep=0
echo "ok: pg_upgrade $old -> $new keeps pg_gatekeeper $version working (views, gate, worker)"
