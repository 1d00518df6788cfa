#!/usr/bin/env bash
# Build and install pg_gatekeeper (release), then start a demo cluster with
# the library preloaded and the extension created. Run as root from the
# repository root: bash scripts/demo.sh [NN]   (PostgreSQL 15 by default;
# 16, 17 or 18 for those)
set -euo pipefail
cd "$(dirname "$0")/.."

PG_MAJOR=${1:-15}
source scripts/pg_env.sh
BIN=$PG_BINDIR
DEMO=${DEMO_DIR:-/var/tmp/pg_gatekeeper-demo-$PG_MAJOR}
PORT=${DEMO_PORT:-$((5484 + PG_MAJOR))}

bash scripts/deps.sh --build-only "$PG_MAJOR"
echo "== building and installing pg_gatekeeper (release) for PostgreSQL $PG_MAJOR"
bash scripts/install.sh "$PG_MAJOR" --release

source scripts/cluster.sh

if [ -f "$DEMO/data/PG_VERSION" ]; then
  cluster_stop "$DEMO"
  if [ -n "${DEMO_PORT:-}" ]; then
    # A port asked for anew: the server's configuration follows (the last
    # setting in postgresql.conf wins).
    echo "port = $PORT" >>"$DEMO/data/postgresql.conf"
    echo "$PORT" >"$DEMO/port"
  elif [ -s "$DEMO/port" ]; then
    PORT=$(cat "$DEMO/port")
  fi
else
  mkdir -p "$DEMO" && chown postgres: "$DEMO"
  cluster_init "$DEMO" "$PORT" "# pg_gatekeeper demo" "shared_preload_libraries = 'pg_gatekeeper'" \
    "max_connections = 300"
fi
# The cluster trusts whoever reaches it (initdb -A trust): only through its
# socket, in a directory that only postgres (and root) may enter. A demo of
# an earlier version also listened on 127.0.0.1: no more.
chmod 700 "$DEMO"
sed -i "s/^listen_addresses = '127.0.0.1'$/listen_addresses = ''/" "$DEMO/data/postgresql.conf"
cluster_start "$DEMO"
# A demo made by an earlier version has that version's extension: updated.
cluster_psql "$DEMO" postgres -d postgres \
  -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_gatekeeper" \
  -c "ALTER EXTENSION pg_gatekeeper UPDATE" \
  -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF; END\$\$"

cat <<MSG

pg_gatekeeper demo cluster is running (data: $DEMO/data, log: $DEMO/server.log).
  Connect as a superuser (exempt from the gate by default):
    psql -h $DEMO -p $PORT -U postgres
  Connect as a gated role:
    psql -h $DEMO -p $PORT -U app postgres
  (Only root and postgres can reach it: it trusts every connection on its
  socket, and listens on no TCP port.)
  Look at the gate:
    SELECT * FROM gatekeeper.status;   SELECT * FROM gatekeeper.sessions;
  Stop it:
    runuser -u postgres -- $BIN/pg_ctl -D $DEMO/data stop
MSG
