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
#
# Three configurations: the library not loaded; not loaded with
# compute_query_id = on (the query ids that pg_stat_statements, or the
# library for its shapes, has PostgreSQL compute: every statement that is
# not prepared is jumbled); loaded and gating. The second separates the cost
# of the query ids from the gate's own. The table is vacuumed before any
# run, so that no run pays for setting hint bits that a later one finds set.
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
printf '%s\n' "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g;" \
  "VACUUM (FREEZE, ANALYZE) t" |
  as_pg "$BIN/postgres" --single -D "$work/data" postgres >/dev/null 2>"$work/setup.log" ||
  { cat "$work/setup.log"; exit 1; }

for n in "$N1" "$N2"; do
  for i in $(seq "$n"); do echo "SELECT v FROM t WHERE id = $((i % 1000 + 1))"; done > "$work/in_$n.sql"
done
chown postgres: "$work"/in_*.sql

instructions() { # config n (config: bare, ids or pg_gatekeeper)
  local opts=()
  case $1 in
    ids) opts+=(-c compute_query_id=on) ;;
    # The single-user session is the bootstrap superuser: gate it anyway.
    pg_gatekeeper) opts+=(-c shared_preload_libraries=pg_gatekeeper -c pg_gatekeeper.exempt_superusers=off) ;;
  esac
  local out="$work/cg_$1_$2.out"
  as_pg valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN/postgres" --single -D "$work/data" "${opts[@]}" postgres < "$work/in_$2.sql" > /dev/null 2>"$work/vg.log"
  grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}'
}

b1=$(instructions bare "$N1"); b2=$(instructions bare "$N2")
q1=$(instructions ids "$N1"); q2=$(instructions ids "$N2")
g1=$(instructions pg_gatekeeper "$N1"); g2=$(instructions pg_gatekeeper "$N2")
python3 - "$N1" "$N2" "$b1" "$b2" "$q1" "$q2" "$g1" "$g2" <<'PY'
import sys
n1, n2, b1, b2, q1, q2, g1, g2 = map(int, sys.argv[1:])
bare = (b2 - b1) / (n2 - n1)
ids = (q2 - q1) / (n2 - n1)
gate = (g2 - g1) / (n2 - n1)
print(f"instructions per statement: bare {bare:.0f}, bare computing query ids {ids:.0f}, gatekeeper {gate:.0f}")
print(f"  gatekeeper over bare: {gate - bare:+.0f} ({(gate / bare - 1) * 100:+.2f}%)")
print(f"  of which the query ids: {ids - bare:+.0f} ({(ids / bare - 1) * 100:+.2f}%)")
print(f"  gatekeeper over bare computing query ids: {gate - ids:+.0f} ({(gate / ids - 1) * 100:+.2f}%)")
PY
# Where the gate's instructions go: per function, the same difference between
# the two gated runs, for the library's own functions and the sigsetjmp that
# pgrx's guard runs around every call from Rust into PostgreSQL; then every
# function whose count per statement differs between the gated runs and the
# runs computing query ids (a check that the rest of the difference is the
# library's, not an accident of the runs).
for c in pg_gatekeeper ids; do
  for n in "$N1" "$N2"; do
    callgrind_annotate --inclusive=no --threshold=100 "$work/cg_${c}_$n.out" > "$work/ann_${c}_$n.txt" 2>/dev/null
  done
done
python3 - "$N1" "$N2" "$work"/ann_{pg_gatekeeper,ids}_{"$N1","$N2"}.txt <<'PY'
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
g1, g2, q1, q2 = (load(p) for p in sys.argv[3:7])
def per(a, b, key):
    return (b.get(key, 0) - a.get(key, 0)) / (n2 - n1)
rows = []
for key in g2:
    fn, obj = key
    if obj == "pg_gatekeeper.so" or "sigsetjmp" in fn or "sigjmp_save" in fn:
        n = per(g1, g2, key)
        if n >= 1:
            rows.append((n, fn, obj))
rows.sort(reverse=True)
print("gated run, instructions per statement by function (pg_gatekeeper.so and sigsetjmp):")
for n, fn, obj in rows[:12]:
    print(f"  {n:6.0f}  {fn}  [{obj}]")
print(f"  {sum(r[0] for r in rows):6.0f}  in all")
other = []
for key in set(g2) | set(q2):
    fn, obj = key
    if obj != "pg_gatekeeper.so":
        d = per(g1, g2, key) - per(q1, q2, key)
        if abs(d) >= 5:
            other.append((d, fn, obj))
other.sort(key=lambda r: -abs(r[0]))
print("outside the library, gated run minus the run computing query ids, per statement (5 or more):")
for d, fn, obj in other[:12]:
    print(f"  {d:+6.0f}  {fn}  [{obj}]")
print(f"  {sum(r[0] for r in other):+6.0f}  in all")
PY
