#!/usr/bin/env bash
# Build and install Citus for PostgreSQL NN (15 by default) from the source
# tarball beside the repository, ../shared/vendor/citus-13.2.2.tar.gz (see
# ../shared/vendor/CITUS.md). Cached: skipped when that PostgreSQL already
# has citus.so of this version. Citus is AGPL-3.0: nothing of it is kept in
# this repository; the build happens under target/citus-build/. Needs root.
#   bash scripts/citus_build.sh [--pg NN]
set -euo pipefail
cd "$(dirname "$0")/.."
while [ $# -gt 0 ]; do
  case $1 in
    --pg) PG_MAJOR=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
source scripts/pg_env.sh

CITUS_VERSION=13.2.2
tarball=../shared/vendor/citus-$CITUS_VERSION.tar.gz
libdir=$("$PG_CONFIG" --pkglibdir)

installed_version() {
  [ -f "$libdir/citus.so" ] || return 1
  # citus.so carries its version string ("Citus 13.2.2 on ...").
  grep -a -o -m1 "Citus $CITUS_VERSION " "$libdir/citus.so" >/dev/null
}

if installed_version; then
  echo "Citus $CITUS_VERSION already installed for PostgreSQL $PG_MAJOR ($libdir/citus.so)"
  exit 0
fi
[ -f "$tarball" ] || { echo "missing $tarball (Citus's source, see CITUS.md)" >&2; exit 1; }

# Headers Citus needs beyond PostgreSQL's: lz4, zstd, and krb5 (the server
# headers of 15-18, built with GSSAPI, include gssapi.h). scripts/deps.sh
# installs them too.
source scripts/apt_install.sh
apt_install liblz4-dev libzstd-dev libkrb5-dev || { echo "could not install Citus's build dependencies" >&2; exit 1; }

work=target/citus-build/pg$PG_MAJOR
rm -rf "$work"
mkdir -p "$work"
tar xzf "$tarball" -C "$work"
cd "$work/citus-$CITUS_VERSION"
# PostgreSQL 15.20 exports have_createdb_privilege(); Citus 13.2.2 still
# defines a static copy for PG < 16, which then fails to compile.
if grep -q 'extern bool have_createdb_privilege' "$("$PG_CONFIG" --includedir-server)/commands/dbcommands.h"; then
  perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n//s' src/include/pg_version_compat.h
fi
t0=$SECONDS
./configure PG_CONFIG="$PG_CONFIG" --without-libcurl >configure.log 2>&1 ||
  { tail -20 configure.log; exit 1; }
make -j"$(nproc)" >make.log 2>&1 || { tail -30 make.log; exit 1; }
make install >install.log 2>&1 || { tail -20 install.log; exit 1; }
installed_version || { echo "citus.so installed but its version is not $CITUS_VERSION" >&2; exit 1; }
echo "Citus $CITUS_VERSION built and installed for PostgreSQL $PG_MAJOR in $((SECONDS - t0)) s"
