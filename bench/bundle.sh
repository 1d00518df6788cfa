#!/usr/bin/env bash
# A benchmark kit for a bigger Linux machine that has no Debian packages:
# PostgreSQL NN (the relocatable install of scripts/deps.sh, 16 by default)
# with the release extension installed, PgBouncer, and every library both
# need beyond the C library, in one compressed tarball (about 20 MB), to
# run bench/bench.py there (bench/README.md, "On a bigger machine").
#
#   bash bench/bundle.sh [--pg NN] KIT.tar.xz     # here: build and pack
#   bash bench/bundle.sh --run KIT.tar.xz [bench.py options]
#                                                 # there, as root, from a copy
#                                                 # of the repository
#
# --run makes the postgres user if it is missing, unpacks the kit where that
# user can read it (/opt/pg_gatekeeper-kit), and runs bench.py with the
# kit's binaries first on the PATH. bench.py needs Python 3 with matplotlib
# and taskset (--pin). sysbench and its OLTP scripts come in the kit when
# sysbench is installed here (bench/run.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,17p' "$0"; exit 2; }

if [ "${1:-}" = --run ]; then
  [ $# -ge 2 ] || usage
  kit=$2; shift 2
  [ "$(id -u)" = 0 ] || { echo "run as root (servers run as postgres)" >&2; exit 2; }
  id postgres >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash postgres
  dest=/opt/pg_gatekeeper-kit
  rm -rf "$dest"
  mkdir -p "$dest"
  tar xJf "$kit" -C "$dest"
  [ -x "$dest/bin/postgres" ] || { echo "$kit is no kit (no bin/postgres)" >&2; exit 2; }
  chmod -R a+rX "$dest"
  export PATH=$dest/bin:$PATH
  # sysbench finds its scripts on Lua's path; ";;" keeps the default one.
  [ ! -d "$dest/share/sysbench" ] || export LUA_PATH="$dest/share/sysbench/?.lua;;"
  exec python3 bench/bench.py --pg-bin "$dest/bin" "$@"
fi

PG_MAJOR=16
while [ $# -gt 1 ]; do
  case $1 in
    --pg) PG_MAJOR=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ $# = 1 ] || usage
out=$(realpath "$1")
[ "$PG_MAJOR" != 15 ] || { echo "PostgreSQL 15 is Debian's, not relocatable: use 16, 17 or 18" >&2; exit 2; }
source scripts/pg_env.sh
bash scripts/deps.sh "$PG_MAJOR" >/dev/null
command -v pgbouncer >/dev/null || { echo "PgBouncer is missing (apt-get install pgbouncer)" >&2; exit 2; }

# A private copy of the install, so that the development one keeps its build.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$PG_GATEKEEPER_PGHOME/$PG_MAJOR" "$work/$PG_MAJOR"
PG_GATEKEEPER_PGHOME=$work bash scripts/install.sh "$PG_MAJOR" --release >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; exit 1; }

kit=$work/kit
mkdir -p "$kit"
cp -a "$work/$PG_MAJOR"/{bin,lib,share,COPYRIGHT,LICENSE} "$kit/"
# Python's procedural language and its transforms would bring libpython.
rm -f "$kit"/lib/*plpython3*
cp "$(command -v pgbouncer)" "$kit/bin/pgbouncer"
patchelf --set-rpath '$ORIGIN/../lib' "$kit/bin/pgbouncer"
if command -v sysbench >/dev/null && [ -d /usr/share/sysbench ]; then
  cp "$(command -v sysbench)" "$kit/bin/sysbench"
  patchelf --set-rpath '$ORIGIN/../lib' "$kit/bin/sysbench"
  cp -a /usr/share/sysbench "$kit/share/sysbench"
fi
strip --strip-unneeded "$kit/lib/pg_gatekeeper.so"
# The libraries the binaries load from the system, less the C library's own
# (the other machine has its own, of the same ABI or newer).
for f in "$kit"/bin/* "$kit"/lib/*.so*; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) continue ;;
  esac
  dest=$kit/lib/$(basename "$lib")
  [ -e "$dest" ] && continue
  cp -L "$lib" "$dest"
  # A run path, not the executable's, finds a library's own dependencies.
  patchelf --set-rpath '$ORIGIN' "$dest"
done
mkdir -p "$(dirname "$out")"
tar cJf "$out" -C "$kit" .
sb=
[ ! -x "$kit/bin/sysbench" ] || sb=", $("$kit/bin/sysbench" --version)"
echo "kit for PostgreSQL $PG_MAJOR with the release extension, $(pgbouncer --version | head -1)$sb: $out ($(du -sh "$out" | cut -f1))"
