#!/usr/bin/env bash
# Run the pg_regress suites (sql/, expected/) against temporary instances:
# the main schedule with pg_gatekeeper preloaded, and a second instance
# without it, for the not-preloaded errors. The extension must be installed.
# Usage: bash scripts/regress.sh [--pg NN] [test ...]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --pg ]; then
  PG_MAJOR=$2
  shift 2
fi
source scripts/pg_env.sh
BIN=$PG_BINDIR
PRELOADED=(setup surface gucs bad_values privileges parking timeouts utility classes shapes upgrade old_versions upgrade_privileges exemption free_path before_admission encodings)
NOT_PRELOADED=(not_preloaded)
[ $# -gt 0 ] && PRELOADED=("$@") && NOT_PRELOADED=()

work=$(mktemp -d /tmp/pg_gatekeeper_regress.XXXXXX)
# pg_regress runs as postgres: give it a copy it can read and a place to write.
cp -r sql expected "$work"/
cat > "$work/preload.conf" <<CONF
shared_preload_libraries = 'pg_gatekeeper'
max_connections = 50
max_prepared_transactions = 5
pg_gatekeeper.history_interval = '100ms'
pg_gatekeeper.progress_timeout = '1h'
CONF
printf "max_connections = 20\n" > "$work/plain.conf"
chown -R postgres: "$work"

# Each instance writes its own results, diffs and server log, so that a
# failure in the first is not overwritten by the second.
run() { # conf port tests...
  local conf=$1 port=$2; shift 2
  local out=$work/out-${conf%.conf}
  mkdir -p "$out" && chown postgres: "$out"
  # A deadline of its own (the suite takes seconds), inside the test run's
  # limit for the step, so that a hang still prints the diffs and the log
  # (in the foreground: pg_regress stays in the step's process group, which
  # the test run ends as a whole).
  timeout --foreground -k 10 120 runuser -u postgres -- env -u RUST_BACKTRACE -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
    "$PG_REGRESS" --temp-instance="$work/tmp_$port" --temp-config="$work/$conf" \
    --inputdir="$work" --outputdir="$out" --bindir="$BIN" --port="$port" \
    --dbname=regression "$@" || {
    echo "pg_regress failed ($conf); differences:"
    cat "$out/regression.diffs" 2>/dev/null || true
    echo "the server's last log lines ($out/log/postmaster.log):"
    tail -n 60 "$out/log/postmaster.log" 2>/dev/null || true
    return 1
  }
}

status=0
run preload.conf 58432 "${PRELOADED[@]}" || status=1
if [ ${#NOT_PRELOADED[@]} -gt 0 ]; then
  run plain.conf 58433 "${NOT_PRELOADED[@]}" || status=1
fi
if [ $status -ne 0 ]; then
  echo "(kept in $work)"
  exit 1
fi
rm -rf "$work"
