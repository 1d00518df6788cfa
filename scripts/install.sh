#!/usr/bin/env bash
# Build pg_gatekeeper for PostgreSQL NN and install it there, with every
# released install and upgrade script of the extension (cargo pgrx install
# writes the current version's script only).
#   bash scripts/install.sh [NN] [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJOR=15 profile=()
for a in "$@"; do
  case $a in
    --release) profile=(--release) ;;
    *) PG_MAJOR=$a ;;
  esac
done
source scripts/pg_env.sh
cargo pgrx install "${profile[@]}" --pg-config "$PG_CONFIG"
cp sql/pg_gatekeeper--*.sql "$("$PG_CONFIG" --sharedir)/extension/"
