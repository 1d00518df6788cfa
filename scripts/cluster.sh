# A throw-away cluster for scripts: source this file after scripts/pg_env.sh
# (it uses PG_BINDIR; `PG_BINDIR=... cluster_init ...` picks another
# version for one call). Servers run as the postgres user (initdb and
# postgres refuse root) with RUST_BACKTRACE unset (it would add backtraces to
# every error's DETAIL). The socket lives in the cluster's directory; the
# server listens on no TCP address unless a LINE says otherwise.
#
#   dir=$(cluster_dir [NAME [PARENT]])  # a new directory PARENT/NAME.XXXXXX (default
#                                       # $TMPDIR or /tmp, pg_gatekeeper_cluster), owned by postgres
#   cluster_init [--initdb ARG]... DIR PORT [LINE...]
#                                       # initdb into DIR/data (with each ARG); the LINEs go to
#                                       # postgresql.conf after port and socket (later lines win)
#   cluster_start DIR [PG_CTL_ARG...]   # pg_ctl start (-w -t 60 unless an ARG says), log in DIR/server.log
#   cluster_psql DIR USER [ARGS...]     # psql -X -q -At -v ON_ERROR_STOP=1, as USER
#   cluster_stop DIR                    # fast, then immediate; quiet if not running
#   cluster_stop_now DIR                # immediate; quiet if not running
#   cluster_drop DIR                    # stop, then remove DIR
#   as_pg COMMAND [ARGS...]             # run a command as postgres, without RUST_BACKTRACE

as_pg() { runuser -u postgres -- env -u RUST_BACKTRACE "$@"; }

cluster_dir() { # [name [parent]]
  local d
  d=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/${1:-pg_gatekeeper_cluster}.XXXXXX")
  chmod 755 "$d"
  chown postgres: "$d"
  echo "$d"
}

cluster_init() { # [--initdb arg]... dir port [conf line...]
  local initdb=()
  while [ "${1:-}" = --initdb ]; do
    initdb+=("$2")
    shift 2
  done
  local dir=$1 port=$2
  shift 2
  as_pg "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres --no-sync "${initdb[@]}" >/dev/null
  {
    echo
    echo "# throw-away cluster (scripts/cluster.sh)"
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "listen_addresses = ''"
    printf '%s\n' "$@"
  } >>"$dir/data/postgresql.conf"
  echo "$port" >"$dir/port"
}

cluster_start() { # dir [pg_ctl args...]
  local dir=$1
  shift
  as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 "$@" start >/dev/null
}

cluster_stop() { # dir
  [ -f "$1/data/postmaster.pid" ] || return 0
  as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m immediate -w stop >/dev/null 2>&1 || true
}

# At once (immediate shutdown): for a cleanup that a time limit may cut short.
cluster_stop_now() { # dir
  [ -f "$1/data/postmaster.pid" ] || return 0
  as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
}

cluster_drop() { # dir
  cluster_stop "$1"
  rm -rf "$1"
}

cluster_psql() { # dir user [psql args...]
  local dir=$1 user=$2
  shift 2
  as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$(cat "$dir/port")" -U "$user" "$@"
}
