# Sourced by the overhead scripts, which measure the installed library:
# require_release BIN_DIR exits unless pg_gatekeeper is installed there as a
# release build. CI installs a debug build, whose costs would mislead.
require_release() {
  local lib
  lib=$("$1/pg_config" --pkglibdir)/pg_gatekeeper.so
  [[ -f $lib ]] || { echo "pg_gatekeeper is not installed ($lib)" >&2; exit 2; }
  if readelf -S "$lib" | grep -q debug_info; then
    echo "the installed $lib has debug info (a debug build?): install the release build first," >&2
    echo "with cargo pgrx install --release, or by running bench/run.sh once" >&2
    exit 2
  fi
}
