# A throw-away cluster for scripts: source this file after scripts/pg_env.sh
# (it uses PG_BINDIR). Servers run as the postgres user (initdb and postgres
# refuse root) with RUST_BACKTRACE unset (it would add backtraces to every
# error's DETAIL). The socket lives in the cluster's directory, the server
# listens on no TCP address.
#
#   dir=$(cluster_dir)                 # a new directory, owned by postgres
#   cluster_init "$dir" PORT [LINE...]  # initdb into $dir/data; LINEs go to postgresql.conf
#   cluster_start "$dir"                # pg_ctl start, log in $dir/server.log
#   cluster_psql "$dir" USER [ARGS...]  # psql -X -At -v ON_ERROR_STOP=1, as USER
#   cluster_stop "$dir"                 # fast, then immediate; quiet if not running

as_pg() { runuser -u postgres -- env -u RUST_BACKTRACE "$@"; }

cluster_dir() {
  local d
  d=$(mktemp -d "${TMPDIR:-/tmp}/pg_gatekeeper_cluster.XXXXXX")
  chmod 755 "$d"
  chown postgres: "$d"
  echo "$d"
}

cluster_init() { # dir port [conf line...]
  local dir=$1 port=$2
  shift 2
  as_pg "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
  {
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "listen_addresses = ''"
    printf '%s\n' "$@"
  } >>"$dir/data/postgresql.conf"
  echo "$port" >"$dir/port"
}

cluster_start() { # dir
  as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 60 start >/dev/null
}

cluster_stop() { # dir
  [ -f "$1/data/postmaster.pid" ] || return 0
  as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m immediate -w stop >/dev/null 2>&1 || true
}

cluster_psql() { # dir user [psql args...]
  local dir=$1 user=$2
  shift 2
  as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$(cat "$dir/port")" -U "$user" "$@"
}
