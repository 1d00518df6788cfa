#!/usr/bin/env bash
# Test pg_gatekeeper's package for PostgreSQL NN as a DBA uses it, on a
# server with no development install: builds it (scripts/package.sh into a
# directory of its own), removes the development install, installs the
# package (15: apt-get install ./postgresql-15-pg-gatekeeper_*.deb; 16-18:
# the tarball copied into the relocatable install as its INSTALL.txt says),
# starts a throw-away cluster with the library preloaded, creates the
# extension, checks that a non-superuser is gated (never more than 2 of 6
# sessions inside pg_sleep at max_active = 2, and some queued), updates the
# extension from the oldest released version, then removes the package
# (15: apt-get purge) and checks that none of its files is left. The
# development install is put back at the end, whatever happened. As root:
#   bash scripts/package_test.sh [--pg NN] [--release | --package FILE]
# By default the debug library that scripts/install.sh built is packaged;
# --release packages the release build (a few minutes); --package tests a
# package built already (dist/...: the .deb for 15, the tarball for 16-18).
set -euo pipefail
cd "$(dirname "$0")/.."

PG_MAJOR=15 profile=(--debug) given=
while [ $# -gt 0 ]; do
  case $1 in
    --pg) PG_MAJOR=$2; shift ;;
    --release) profile=() ;;
    --package) given=$(realpath "$2"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
source scripts/pg_env.sh
source scripts/cluster.sh

EXT=pg_gatekeeper
pkglibdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
oldest=$(for f in sql/$EXT--*.sql; do basename "$f" .sql; done |
  sed -n "s/^$EXT--\([0-9][0-9.]*\)$/\1/p" | sort -V | head -1)
debian=0
[ "$PG_CONFIG" = "/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" ] && debian=1
pkg=postgresql-$PG_MAJOR-pg-gatekeeper

work=$(mktemp -d "${TMPDIR:-/tmp}/pg_gatekeeper_package_test.XXXXXX")
mkdir -p "$work/dev/lib" "$work/dev/ext"
dir= installed=()
apt() { DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300 "$@"; }
package_installed() { dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed; }
dev_files() { find "$pkglibdir" "$extdir" -maxdepth 1 -name "$EXT*" \( -type f -o -type l \); }

# A package already installed is someone's (or a killed run's): this test
# would set its files aside as the development install and purge it.
if ((debian)) && package_installed; then
  echo "FAIL: $pkg is installed already; this test installs and purges its own build." >&2
  echo "      Remove it first (apt-get purge $pkg), then run the test again." >&2
  rm -rf "$work"
  exit 1
fi

# Whatever happens, the development install is put back at exit.
cleanup() {
  local rc=$?
  # After a failure (or a test run's time limit ending this one) the server
  # may be stuck: stop it at once, so that the purge and the development
  # install's return fit in the grace before a SIGKILL.
  if [ -n "$dir" ] && [ "$rc" -ne 0 ]; then
    cluster_stop_now "$dir"
  elif [ -n "$dir" ]; then
    cluster_stop "$dir"
  fi
  if ((debian)) && package_installed; then
    apt purge "$pkg" >/dev/null 2>&1 || dpkg --purge "$pkg" >/dev/null 2>&1 || true
  fi
  for f in "${installed[@]}"; do rm -f "$f"; done
  cp -a "$work/dev/lib/." "$pkglibdir/"
  cp -a "$work/dev/ext/." "$extdir/"
  if [ "$rc" -ne 0 ] && [ -n "$dir" ] && [ -f "$dir/server.log" ]; then
    echo "--- server log (tail)"
    tail -20 "$dir/server.log"
  fi
  [ -n "$dir" ] && rm -rf "$dir"
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
# Ended from outside (a test run's time limit), the cleanup must know: an
# untrapped signal leaves $? at the last command's status in the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

# The development install is set aside.
dev_files | while read -r f; do
  case $f in
    "$pkglibdir"/*) mv "$f" "$work/dev/lib/" ;;
    *) mv "$f" "$work/dev/ext/" ;;
  esac
done

mkdir -p "$work/dist"
if [ -n "$given" ]; then
  cp "$given" "$work/dist/"
else
  echo "== building the package (scripts/package.sh --pg $PG_MAJOR ${profile[*]})"
  bash scripts/package.sh --pg "$PG_MAJOR" "${profile[@]}" --out "$work/dist" >"$work/package.log" 2>&1 ||
    { tail -30 "$work/package.log"; fail "scripts/package.sh failed"; }
fi
[ -z "$(dev_files)" ] || fail "the development install is still there: $(dev_files)"

if ((debian)); then
  deb=$(echo "$work/dist/${pkg}_"*.deb)
  [ -f "$deb" ] || fail "no $pkg package in $work/dist"
  echo "== apt-get install ./$(basename "$deb") ($(du -h "$deb" | cut -f1))"
  apt install "$deb" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install failed"; }
  package_installed || fail "$pkg is not installed after apt-get install"
  mapfile -t installed < <(dpkg -L "$pkg" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
  tgz=$(echo "$work/dist/$EXT-"*"-pg$PG_MAJOR-"*.tar.gz)
  [ -f "$tgz" ] || fail "no tarball for PostgreSQL $PG_MAJOR in $work/dist"
  echo "== $(basename "$tgz") ($(du -h "$tgz" | cut -f1)) into $(dirname "$pkglibdir"), as its INSTALL.txt says"
  tar -xzf "$tgz" -C "$work"
  top=$work/$(basename "$tgz" .tar.gz)
  # The note's commands, as written there.
  grep -q "^  install -m 755 pkglibdir/$EXT.so" "$top/INSTALL.txt" || fail "INSTALL.txt lost its install commands"
  install_as_noted() { (cd "$top" && PG_CONFIG=$PG_CONFIG bash -euo pipefail -c "$(grep '^  install ' INSTALL.txt)"); }
  install_as_noted
  mapfile -t installed < <(cd "$top" && find pkglibdir -type f | sed "s|^pkglibdir|$pkglibdir|"
    find sharedir/extension -type f | sed "s|^sharedir/extension|$extdir|")
fi
for f in "$pkglibdir/$EXT.so" "$extdir/$EXT.control" "$extdir/$EXT--$oldest.sql"; do
  # Not `printf ... | grep -q`: under pipefail, grep leaving at the first
  # match can end printf, still writing (one write a line), with SIGPIPE.
  listed=0
  for g in "${installed[@]}"; do [ "$g" = "$f" ] && listed=1; done
  ((listed)) || fail "the package does not install $f"
done
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$extdir/$EXT.control")

echo "== a throw-away cluster with the packaged library preloaded"
dir=$(cluster_dir)
cluster_init "$dir" $((29000 + RANDOM % 1000)) "shared_preload_libraries = '$EXT'" \
  "pg_gatekeeper.max_active = 2" "pg_gatekeeper.stall_timeout = 0" "max_connections = 30"
cluster_start "$dir"
sql() { cluster_psql "$dir" postgres -d "${db:-postgres}" -c "$1"; }
sql "CREATE EXTENSION $EXT" >/dev/null
if [ -n "${top:-}" ]; then
  # An upgrade runs the same commands over the library the running server
  # has mapped: each must write a new file, not rewrite the mapped one. The
  # old file, held open here, shows which: a file rewritten in place is
  # still the one the name leads to.
  echo "== INSTALL.txt's commands again, over the library the server has loaded"
  exec 9<"$pkglibdir/$EXT.so"
  install_as_noted
  [ "$(stat -c %i "$pkglibdir/$EXT.so")" != "$(stat -L -c %i /proc/$$/fd/9)" ] ||
    fail "INSTALL.txt's commands rewrote the loaded library in place"
  exec 9<&-
  [ "$(sql "SELECT count(*) FROM gatekeeper.status")" = 1 ] || fail "the server did not answer after the install"
fi
got=$(sql "SELECT extversion FROM pg_extension WHERE extname = '$EXT'")
[ "$got" = "$version" ] || fail "CREATE EXTENSION gave version $got, not $version"
sql "CREATE ROLE app LOGIN" >/dev/null

echo "== a non-superuser is gated: 6 sessions, 2 statements each, max_active = 2"
sessions=() rounds=2
for i in 1 2 3 4 5 6; do
  cluster_psql "$dir" app -d postgres -c "SELECT pg_sleep(0.3)" -c "SELECT pg_sleep(0.3)" >/dev/null &
  sessions+=($!)
done
max_sleeping=0 max_queued=0 deadline=$((SECONDS + 60))
alive() { local p; for p in "${sessions[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while alive; do
  ((SECONDS < deadline)) || fail "the gated sessions did not finish within 60 s"
  IFS='|' read -r sleeping queued < <(sql "SELECT (SELECT count(*) FROM pg_stat_activity
      WHERE usename = 'app' AND wait_event = 'PgSleep'), queued FROM gatekeeper.status")
  ((sleeping > max_sleeping)) && max_sleeping=$sleeping
  ((queued > max_queued)) && max_queued=$queued
done
for p in "${sessions[@]}"; do wait "$p" || fail "a gated session failed"; done
((max_sleeping <= 2)) || fail "$max_sleeping sessions slept at once, limit 2"
((max_sleeping == 2)) || fail "never 2 sessions sleeping at once: the test proves nothing"
((max_queued >= 1)) || fail "nobody was ever queued"
IFS='|' read -r admitted_total admitted queued < <(sql "SELECT admitted_total, admitted, queued FROM gatekeeper.status")
[ "$admitted_total" = $((6 * rounds)) ] || fail "admitted_total is $admitted_total, not $((6 * rounds))"
[ "$admitted|$queued" = "0|0" ] || fail "the gate is not quiet: admitted $admitted, queued $queued"

echo "== ALTER EXTENSION UPDATE from $oldest to $version"
sql "CREATE DATABASE upgrade_test" >/dev/null
db=upgrade_test sql "CREATE EXTENSION $EXT VERSION '$oldest'" >/dev/null
db=upgrade_test sql "ALTER EXTENSION $EXT UPDATE" >/dev/null
got=$(db=upgrade_test sql "SELECT extversion FROM pg_extension WHERE extname = '$EXT'")
[ "$got" = "$version" ] || fail "the update from $oldest ended at $got, not $version"
members="SELECT string_agg(o, ', ' ORDER BY o) FROM (SELECT pg_describe_object(classid, objid, 0) AS o
  FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = '$EXT')) m"
fresh=$(sql "$members") updated=$(db=upgrade_test sql "$members")
[ "$updated" = "$fresh" ] ||
  fail "the updated extension's objects differ from a fresh install's: $updated; fresh: $fresh"
got=$(db=upgrade_test sql "SELECT max_active || ' ' || limit_reason FROM gatekeeper.status")
[ "$got" = "2 manual" ] || fail "gatekeeper.status after the update: $got"
cluster_stop "$dir"

if ((debian)); then
  echo "== apt-get purge $pkg"
  apt purge "$pkg" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get purge failed"; }
  ! package_installed || fail "$pkg is still installed after apt-get purge"
  [ ! -e "/usr/share/doc/$pkg" ] || fail "/usr/share/doc/$pkg is left behind"
else
  echo "== removing the files INSTALL.txt lists"
  rm -f "${installed[@]}"
fi
for f in "${installed[@]}"; do [ ! -e "$f" ] || fail "$f is left behind"; done
[ -z "$(dev_files)" ] || fail "left behind: $(dev_files | tr '\n' ' ')"
installed=()

echo "ok: pg_gatekeeper $version's package for PostgreSQL $PG_MAJOR installs, gates" \
  "(at most $max_sleeping of 6 sessions running, up to $max_queued queued), updates from $oldest" \
  "and leaves nothing behind"
