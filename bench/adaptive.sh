#!/usr/bin/env bash
# The adaptive limit side by side: pg_gatekeeper's automatic limit (its
# defaults: it starts at active_per_cpu per CPU and may grow up to
# active_per_cpu_max per CPU while a larger limit raises throughput) against
# the gate fixed at 1, 2, 4 and 8 per CPU, bare PostgreSQL and PgBouncer's
# pools, in one run, medians of N rounds, with the client sharing the
# server's CPUs, on CPUs of its own (bench.py --pin), or both.
#
#   bench/adaptive.sh                  both modes, 3 rounds, 16 s runs measured after 6 s (see bench/README.md)
#   bench/adaptive.sh --smoke          the script itself, end to end: one round, 2 s runs, 16 and 32 clients
#   bench/adaptive.sh --modes pinned --rounds 5
#
# Options:
#   --modes shared,pinned   shared: server, PgBouncer and pgbench on every CPU;
#                           pinned: bench.py --pin (server and PgBouncer on
#                           some CPUs, pgbench on the others)
#   --rounds N (3)   --duration S (16)   --warmup S (6)   --scale N (10)
#   --clients LIST (64,256,1000)   client counts of the CPU-bound workload (TPC-B)
#   --wait-clients LIST (200)      client counts of the wait-bound workload
#   --fixed LIST ("1 2 4 8")       per-CPU factors of the fixed gates
#   --pools LIST (2xcpu,8,32)      PgBouncer pool sizes (bench.py --pools)
#   --out DIR        default bench/results/adaptive-<timestamp>
#   --workdir DIR    where bench.py's throw-away clusters live (its --workdir)
#   --smoke          1 round, 2 s runs, no warm-up, scale 1, 16 clients CPU-bound and
#                    32 wait-bound, gates fixed at 1 and 4 only, one pool (8)
#   --build / --no-build / --pg NN   as bench/run.sh (the release build is built
#                    once, before the first run; --smoke uses an installed build)
#
# Configurations (bench.py --gk variants; the GUC names without the
# pg_gatekeeper. prefix):
#   CPU-bound (tpcb): gk-adaptive (defaults), gk-fixed1/2/4/8
#                     (active_per_cpu=N, active_per_cpu_max=0), bare,
#                     pgbouncer-N (pools 2xcpu, 8, 32: bench.py's default)
#   wait-bound (wait): bare, the same pools, gk-fixed4, gk-adaptive
# Each mode and workload is one bench.py run (its own throw-away cluster,
# in DIR/<mode>-<tpcb|wait>/); DIR/results.csv joins their rows and
# DIR/summary.md (bench/adaptive_report.py) shows them side by side with
# the ratios: adaptive / best fixed gate, adaptive / bare, adaptive / best
# pool, and the worker's CPU.
#
# Must run as root (bench/run.sh installs what is missing and starts servers
# as postgres). Exits 1 if any run failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
modes=shared,pinned
rounds=3 duration=16 warmup=6 scale=10
clients=64,256,1000 wait_clients=200
fixed="1 2 4 8" pools=2xcpu,8,32
out="" smoke=0 build=auto pg=() workdir=()
cmdline="bench/adaptive.sh${*:+ $*}"
while [ $# -gt 0 ]; do
  case $1 in
    --modes) modes=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --duration) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --scale) scale=$2; shift ;;
    --clients) clients=$2; shift ;;
    --wait-clients) wait_clients=$2; shift ;;
    --fixed) fixed=${2//,/ }; shift ;;
    --pools) pools=$2; shift ;;
    --out) out=$2; shift ;;
    --workdir) workdir=(--workdir "$2"); shift ;;
    --smoke) smoke=1 ;;
    --build) build=yes ;;
    --no-build) build=no ;;
    --pg) pg=(--pg "$2"); PG_MAJOR=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $smoke == 1 ]]; then
  # --smoke overrides the sizes and timings given with it: it tests the script, not the gate.
  rounds=1 duration=2 warmup=0 scale=1 clients=16 wait_clients=32 fixed="1 4" pools=8
fi
for m in ${modes//,/ }; do
  [[ $m == shared || $m == pinned ]] || { echo "unknown mode '$m' (shared, pinned)" >&2; exit 2; }
done
if [[ $(id -u) -ne 0 ]]; then
  echo "bench/adaptive.sh must run as root (bench/run.sh starts servers as postgres)" >&2
  exit 2
fi
out=${out:-$here/results/adaptive-$(date +%Y%m%d-%H%M%S)}
if [[ -e $out/results.csv ]]; then
  echo "$out already holds results: choose another --out, or remove it" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# --smoke uses the installed build when there is one (as bench/run.sh --smoke).
source "$repo/scripts/pg_env.sh"
if [[ $build == auto && $smoke == 1 && -f $("$PG_CONFIG" --pkglibdir)/pg_gatekeeper.so ]]; then
  build=no
fi

gk_fixed=()
for n in $fixed; do gk_fixed+=(--gk "gk-fixed$n:active_per_cpu=$n,active_per_cpu_max=0"); done
gk_adaptive=(--gk gk-adaptive)
# Measure from the start with --warmup 0 (and no per-client warm-up either).
timing=(--rounds "$rounds" --duration "$duration" --warmup "$warmup" --scale "$scale" --pools "$pools")
[[ $warmup == 0 ]] && timing+=(--warmup-per-client 0)

python3 - "$out/adaptive.json" "$cmdline" "$modes" "$rounds" "$duration" "$warmup" "$scale" \
  "$clients" "$wait_clients" "$smoke" "$fixed" "$pools" <<'PY'
import datetime, json, sys
p, cmd, modes, rounds, duration, warmup, scale, clients, wait_clients, smoke, fixed, pools = sys.argv[1:]
json.dump({"command": cmd, "modes": modes.split(","), "rounds": int(rounds), "duration_s": float(duration),
           "warmup_s": float(warmup), "scale": int(scale), "clients": clients, "wait_clients": wait_clients,
           "smoke": smoke == "1", "fixed_per_cpu": fixed.split(), "pools": pools,
           "started_at": datetime.datetime.now().isoformat(timespec="seconds")}, open(p, "w"), indent=2)
# A first estimate, as bench.py makes its own: each run lasts --duration plus
# 8 ms per client of warm-up (none with --warmup 0), and about 4 s more for
# the checkpoint before it and the restarts.
per_client = 0 if float(warmup) == 0 else 8
def run_s(c):
    return float(duration) + round(per_client * c / 1000.0) + 4
npools = len(pools.split(","))
cpu = sum(run_s(int(c)) for c in clients.split(",")) * (len(fixed.split()) + 2 + npools)
wait = sum(run_s(int(c)) for c in wait_clients.split(",")) * (npools + 3)
total = (cpu + wait) * int(rounds) * len(modes.split(","))
print("adaptive: %s; first estimate %d min (plus a release build unless --no-build)" % (
    ", ".join(modes.split(",")), round(total / 60.0 + len(modes.split(",")) * 2 * 0.5)))
PY

failed=()
t0=$SECONDS
for mode in ${modes//,/ }; do
  pin=()
  [[ $mode == pinned ]] && pin=(--pin)
  for w in tpcb wait; do
    if [[ $w == tpcb ]]; then
      cfg=(--workloads tpcb --clients "$clients" --configs bare,pgbouncer,gatekeeper
           "${gk_adaptive[@]}" "${gk_fixed[@]}")
    else
      cfg=(--workloads wait --clients "$wait_clients" --configs bare,pgbouncer,gatekeeper
           --gk "gk-fixed4:active_per_cpu=4,active_per_cpu_max=0" "${gk_adaptive[@]}")
    fi
    b=()
    case $build in
      no) b=(--no-build) ;;
      yes) b=(--build) ;;
    esac
    echo
    echo "==== $mode, $w ($((SECONDS - t0)) s so far)"
    if bash "$here/run.sh" "${pg[@]}" "${b[@]}" "${pin[@]}" "${timing[@]}" "${cfg[@]}" "${workdir[@]}" \
         --out "$out/$mode-$w"; then
      :
    else
      failed+=("$mode-$w (rc $?)")
    fi
    # Built (or not) once: the later runs use what is installed.
    build=no
  done
done

if ! python3 "$here/adaptive_report.py" "$out"; then
  failed+=("adaptive_report.py")
fi
echo "adaptive: $((SECONDS - t0)) s; results in $out"
if ((${#failed[@]})); then
  echo "adaptive: FAILED: ${failed[*]} (see the FAILED lines above and $out/*/failed-*.txt)" >&2
  exit 1
fi
