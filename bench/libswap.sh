# Benchmark several builds of pg_gatekeeper side by side: each is installed
# in turn over the server's library, and the library installed before is
# put back at exit. Source after scripts/pg_env.sh (it uses PG_CONFIG); the
# library directory needs root.
#
#   libswap_save           # INSTALLED_LIB: the server's library file, a copy
#                          # of which is kept aside (exits 2 if not installed)
#   libswap_check SPEC...  # exits 2 unless each SPEC is NAME=FILE, FILE existing
#   libswap_use FILE       # install FILE (nothing if FILE is the installed one)
#   libswap_restore        # put the copy back and remove it (from an EXIT trap)

libswap_save() {
  INSTALLED_LIB=$("$PG_CONFIG" --pkglibdir)/pg_gatekeeper.so
  [[ -f $INSTALLED_LIB ]] || {
    echo "pg_gatekeeper is not installed for $("$PG_CONFIG" --version) (scripts/install.sh NN --release)" >&2
    exit 2
  }
  LIBSWAP_SAVED=$(mktemp)
  cp "$INSTALLED_LIB" "$LIBSWAP_SAVED"
}

libswap_check() {
  local l
  for l in "$@"; do
    [[ $l == *=* && -f ${l#*=} ]] || { echo "--lib wants NAME=FILE with an existing FILE: $l" >&2; exit 2; }
  done
}

libswap_use() {
  [[ $1 -ef $INSTALLED_LIB ]] || install -m 755 "$1" "$INSTALLED_LIB"
}

libswap_restore() {
  [[ -n ${LIBSWAP_SAVED:-} ]] || return 0
  if install -m 755 "$LIBSWAP_SAVED" "$INSTALLED_LIB"; then
    rm -f "$LIBSWAP_SAVED"
  else
    echo "could not put the installed library back: it is in $LIBSWAP_SAVED" >&2
  fi
}
