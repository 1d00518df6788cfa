#!/usr/bin/env bash
# Instructions per statement with pg_gatekeeper preloaded and gating, against
# the library not loaded, counted by callgrind in a single-user backend.
# Unlike CPU time, instruction counts do not depend on what else the machine
# does, so a difference of a fraction of a percent is measurable.
#
# Each configuration runs twice, with N1 and N2 single-row SELECTs (each its
# own implicit transaction); (I(N2) - I(N1)) / (N2 - N1) removes start-up.
# The same difference, per function, then shows where the gated run's extra
# instructions go (the library's functions and pgrx's sigsetjmp).
# Usage (root): bash bench/overhead_callgrind.sh [N1 N2]
set -euo pipefail
N1=${1:-500}
N2=${2:-2500}
source "$(dirname "$0")/../scripts/pg_env.sh"
BIN=$PG_BINDIR
source "$(dirname "${BASH_SOURCE[0]}")/require_release.sh"
require_release "$BIN"
command -v valgrind >/dev/null || { source "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt_install.sh" && apt_install valgrind; }

source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cluster.sh"
work=$(cluster_dir pg_gatekeeper_callgrind)
trap 'rm -rf "$work"' EXIT
# Never started: the runs below are single-user backends (the port is unused).
cluster_init "$work" 5432
echo "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g;" |
  as_pg "$BIN/postgres" --single -D "$work/data" postgres >/dev/null 2>"$work/setup.log" ||
  { cat "$work/setup.log"; exit 1; }

for n in "$N1" "$N2"; do
  for i in $(seq "$n"); do echo "SELECT v FROM t WHERE id = $((i % 1000 + 1))"; done > "$work/in_$n.sql"
done
chown postgres: "$work"/in_*.sql

instructions() { # preload n
  local opts=(-c "shared_preload_libraries=$1")
  # The single-user session is the bootstrap superuser: gate it anyway.
  [ -n "$1" ] && opts+=(-c pg_gatekeeper.exempt_superusers=off)
  local out="$work/cg_${1:-bare}_$2.out"
  as_pg valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN/postgres" --single -D "$work/data" "${opts[@]}" postgres < "$work/in_$2.sql" > /dev/null 2>"$work/vg.log"
  grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}'
}

b1=$(instructions "" "$N1"); b2=$(instructions "" "$N2")
g1=$(instructions pg_gatekeeper "$N1"); g2=$(instructions pg_gatekeeper "$N2")
python3 - "$N1" "$N2" "$b1" "$b2" "$g1" "$g2" <<'PY'
import sys
n1, n2, b1, b2, g1, g2 = map(int, sys.argv[1:])
bare = (b2 - b1) / (n2 - n1)
gate = (g2 - g1) / (n2 - n1)
print(f"instructions per statement: bare {bare:.0f}, gatekeeper {gate:.0f}, "
      f"extra {gate - bare:.0f} ({(gate / bare - 1) * 100:+.2f}%)")
PY
# Where the gate's instructions go: per function, the same difference between
# the two gated runs, for the library's own functions and the sigsetjmp that
# pgrx's guard runs around every call from Rust into PostgreSQL.
for n in "$N1" "$N2"; do
  callgrind_annotate --inclusive=no --threshold=100 "$work/cg_pg_gatekeeper_$n.out" > "$work/ann_$n.txt" 2>/dev/null
done
python3 - "$N1" "$N2" "$work/ann_$N1.txt" "$work/ann_$N2.txt" <<'PY'
import re, sys
n1, n2 = int(sys.argv[1]), int(sys.argv[2])
line = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*?)\s+\[(.*)\]\s*$")
def load(path):
    out = {}
    for l in open(path):
        m = line.match(l)
        if m:
            fn = m.group(2).split(":")[-1]
            out[(fn, m.group(3).rsplit("/", 1)[-1])] = int(m.group(1).replace(",", ""))
    return out
a, b = load(sys.argv[3]), load(sys.argv[4])
rows = []
for key in b:
    fn, obj = key
    if obj == "pg_gatekeeper.so" or "sigsetjmp" in fn or "sigjmp_save" in fn:
        per = (b[key] - a.get(key, 0)) / (n2 - n1)
        if per >= 1:
            rows.append((per, fn, obj))
rows.sort(reverse=True)
print("gated run, instructions per statement by function (pg_gatekeeper.so and sigsetjmp):")
for per, fn, obj in rows[:12]:
    print(f"  {per:6.0f}  {fn}  [{obj}]")
print(f"  {sum(r[0] for r in rows):6.0f}  in all")
PY
