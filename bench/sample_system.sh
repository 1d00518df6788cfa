#!/usr/bin/env bash
# Log what the whole machine does during a benchmark, once a second, until
# killed: vmstat (run queue, swap, context switches, CPU split) and memory
# in use, with the number of server processes, to read beside a bench/run.sh
# run of many clients (per-backend memory, scheduling).
#
#   bench/sample_system.sh OUT.tsv &  ...  kill $!
set -euo pipefail
out=${1:?usage: bench/sample_system.sh OUT.tsv}
printf 'time\tbackends\tmem_used_mib\tswap_used_mib\trun_queue\tblocked\tctx_switches_per_s\tus\tsy\tid\twa\n' > "$out"
vmstat -n 1 | while read -r r b _swpd _free _buff _cache _si _so _bi _bo _in cs us sy id wa _st _gu; do
  [[ $r =~ ^[0-9]+$ ]] || continue
  read -r used swap < <(free -m | awk '/^Mem:/ {u=$3} /^Swap:/ {s=$3} END {print u, s}')
  backends=$(pgrep -c -x postgres || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date +%T)" "$backends" "$used" "$swap" \
    "$r" "$b" "$cs" "$us" "$sy" "$id" "$wa" >> "$out"
done
