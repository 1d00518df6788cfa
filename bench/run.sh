#!/usr/bin/env bash
# pg_gatekeeper benchmark: bare PostgreSQL vs PgBouncer vs pg_gatekeeper.
#
#   bench/run.sh                 full run (pgbench: tpcb, select, slow; 8..1000 clients, 3 rounds, 16 s per run measured after 6 s)
#   bench/run.sh --smoke         CI smoke: 16 clients, 3 s, 1 round, every configuration and workload
#   bench/run.sh --overhead      backend CPU per statement, library loaded vs not (1 client)
#   bench/run.sh --help          this header's options, then bench/bench.py's
#
# Options handled here, the rest go to bench.py:
#   --no-build   do not build and install the release extension (use what is installed)
#   --build      build even in --smoke mode when an install is present
#   --pg NN      PostgreSQL major version (15 by default; 16, 17, 18 from scripts/deps.sh)
#
# Must run as root (apt-get, runuser); servers run as the postgres user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build=auto
smoke=0
args=()
pg_next=0
for a in "$@"; do
  if [ $pg_next = 1 ]; then PG_MAJOR=$a; pg_next=0; continue; fi
  case $a in
    --pg) pg_next=1 ;;
    --no-build) build=no ;;
    --build) build=yes ;;
    --smoke) smoke=1; args+=("$a") ;;
    -h|--help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exec python3 "$here/bench.py" --help ;;
    *) args+=("$a") ;;
  esac
done

source "$repo/scripts/pg_env.sh"
PG_BIN=${PG_BIN:-$PG_BINDIR}
PG_CONFIG=$PG_BIN/pg_config
args+=(--pg-bin "$PG_BIN")

if [[ $(id -u) -ne 0 ]]; then
  echo "bench/run.sh must run as root (it installs packages and starts servers as postgres)" >&2
  exit 2
fi

# System Python: apt's matplotlib is not visible to a pyenv/virtualenv python3.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)

need_pkgs=()
command -v pgbouncer >/dev/null || need_pkgs+=(pgbouncer)
command -v sysbench >/dev/null || need_pkgs+=(sysbench)
# PostgreSQL 15 is Debian's; 16-18 come from scripts/deps.sh, as for the tests.
[[ -x $PG_BIN/pgbench ]] || { [[ $PG_MAJOR == 15 ]] && need_pkgs+=(postgresql-15); } || {
  echo "no pgbench in $PG_BIN: run bash scripts/deps.sh $PG_MAJOR first" >&2
  exit 2
}
"$PY" -c 'import matplotlib' 2>/dev/null || need_pkgs+=(python3-matplotlib)
if ((${#need_pkgs[@]})); then
  source "$repo/scripts/apt_install.sh"
  apt_install "${need_pkgs[@]}"
fi
# Debian's pgbouncer package starts a service on install; ours runs on its own port, but
# stop the packaged one if it is running so that it takes no CPU.
if command -v systemctl >/dev/null && systemctl is-active --quiet pgbouncer 2>/dev/null; then
  systemctl stop pgbouncer || true
fi

libdir=$("$PG_CONFIG" --pkglibdir)
if [[ $build == auto && $smoke == 1 && -f $libdir/pg_gatekeeper.so ]]; then
  build=no
  echo "smoke: using the installed extension ($libdir/pg_gatekeeper.so); --build to rebuild"
fi
built=no
if [[ $build != no ]]; then
  echo "building and installing the release extension (cargo pgrx install --release) ..."
  t0=$SECONDS
  (cd "$repo" && env -u RUST_BACKTRACE bash scripts/install.sh "$PG_MAJOR" --release) \
    >"${TMPDIR:-/tmp}/pg_gatekeeper_bench_build.log" 2>&1 || {
    tail -50 "${TMPDIR:-/tmp}/pg_gatekeeper_bench_build.log" >&2
    echo "release build failed; full log in ${TMPDIR:-/tmp}/pg_gatekeeper_bench_build.log" >&2
    exit 2
  }
  echo "built in $((SECONDS - t0)) s"
  built=yes
elif [[ ! -f $libdir/pg_gatekeeper.so ]]; then
  echo "pg_gatekeeper is not installed ($libdir/pg_gatekeeper.so); drop --no-build" >&2
  exit 2
fi

# 1000 clients need more than 1024 descriptors in pgbench, sysbench and pgbouncer.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# A server crash leaves a core file in the data directory (kept after a failure).
ulimit -c unlimited 2>/dev/null || true

exec "$PY" "$here/bench.py" --built-release "$built" \
  --command-line "bench/run.sh${*:+ $*}" "${args[@]}"
