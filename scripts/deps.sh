#!/usr/bin/env bash
# Install everything pg_gatekeeper needs to build, test and benchmark on a
# fresh Debian 12 machine. Idempotent: each step is skipped when done.
# Needs root (apt-get); Rust (rustup, 1.95+) must already be on the PATH.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PGRX_VERSION=0.18.1
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang
          pgbouncer python3-matplotlib procps)

say() { printf '\n== %s\n' "$*"; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  say "cargo install cargo-pgrx $PGRX_VERSION (about 6 minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
if ! grep -qs "pg15" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  say "cargo pgrx init --pg15"
  cargo pgrx init --pg15 "$PG_CONFIG"
fi
