#!/usr/bin/env bash
# Run every test of pg_gatekeeper, on every supported PostgreSQL version by
# default: style checks and unit tests of the admission core once, then for
# each version: build and install, pg_regress (upgrade path included),
# concurrent integration tests, chaos and restart tests, and the package
# (built, installed, used, updated and removed); the pg_upgrade test
# (15 to 18) and a smoke run of the benchmark (15) once. Installs what is
# missing first. Run as root from anywhere:
#   bash scripts/test.sh            # every version
#   bash scripts/test.sh --pg 17    # one version
#   bash scripts/test.sh --no-citus # without the Citus cluster run
# The Citus cluster run (PostgreSQL 15: 3 nodes, the gate on each, every
# workload at the defaults and at small limits, and what passes a worker's
# gate) needs Citus's source beside the repository (../shared/vendor, see
# scripts/citus_build.sh); without it the step says so and is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_env.sh

majors=("${PG_MAJORS[@]}")
citus=1
while [ $# -gt 0 ]; do
  case $1 in
    --pg) majors=("$2"); shift ;;
    --citus) citus=1 ;;
    --no-citus) citus=0 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (use --pg NN)" >&2; exit 2 ;;
  esac
  shift
done

unset RUST_BACKTRACE
passed=0 failed=0 summary=()
# The whole run's time budget, in seconds from here (CI allows 90 minutes;
# a run takes 45-60 on a 2-CPU machine, a fresh machine's installs
# included). Each step's limit is cut to what is left of it less a minute
# (for its cleanup), and a step with less than two minutes of that is not
# started but counted as failed: a
# run with hangs still ends with its summary, before CI's own limit.
budget=${PG_GATEKEEPER_TEST_BUDGET_S:-5100}
deadline=$((SECONDS + budget))

# Each step's output goes to the terminal and to target/test-logs/; a failed
# step's panic messages and last lines also go into the summary, which is
# what a CI log keeps.
# (tee runs beside the step, not after it in a pipe, so that a server a step
# leaves running with its output cannot hold the step open.)
logdir=target/test-logs
rm -rf "$logdir"; mkdir -p "$logdir"
# A step that runs past its limit (seconds) is a hang: it is ended, counted
# as failed, and the test servers it left are stopped, so that the run goes
# on and its summary comes out long before CI's own time runs out.
step() { # name limit command...
  local name=$1 limit=$2; shift 2
  printf '\n==== %s\n' "$name"
  local t0=$SECONDS log rc=0 left=$((deadline - SECONDS - 60))
  if [ "$left" -lt 120 ]; then
    failed=$((failed + 1)); note "FAIL  $name: not run, the run's time budget of $budget s is spent"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  step_name=$name
  touch "$logdir/.step-start"
  log=$logdir/$(printf '%02d' $((passed + failed + 1)))-$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '-' | cut -c1-60).log
  # timeout runs the step in a process group of its own (so that the
  # whole of it ends at the limit), out of the terminal's reach: an
  # interrupt is passed on to it by the trap below.
  timeout -k 30 "$limit" "$@" > >(tee "$log") 2>&1 &
  step_pid=$!
  wait $step_pid || rc=$?
  local group=$step_pid
  step_pid=
  if [ $rc = 0 ]; then
    passed=$((passed + 1)); note "ok    $name ($((SECONDS - t0)) s)"
  else
    if { [ $rc = 124 ] || [ $rc = 137 ]; } && [ $((SECONDS - t0)) -ge "$limit" ]; then
      note "FAIL  $name: ended after its limit of $limit s (a hang?)"
    fi
    # A test killed on its way (its limit, or memory) leaves its servers.
    end_step "$group"
    failed=$((failed + 1)); note "FAIL  $name ($((SECONDS - t0)) s); what it printed last:"
    sleep 1 # tee's last write
    # A Rust test's panic message (what failed, and why) comes first; the
    # server log tail a test prints after it would push it out of the tail.
    while IFS= read -r line; do summary+=("      | $line"); done < <(
      # (`head` may leave before `grep` has written all: not a failure.)
      { grep -A 6 'panicked at' "$log" | head -n 42 || true; grep -v '^[[:space:]]*$' "$log" | tail -n 8; } | cut -c1-240)
    return 1
  fi
}

# A line of the summary, printed at once too (the summary itself comes at
# the end, or when the run is ended).
note() {
  summary+=("$1")
  printf '%s\n' "$1"
}
print_summary() {
  printf '\n==== summary\n'
  printf '%s\n' "${summary[@]}"
  echo "suites: $passed passed, $failed failed"
}

# The integration tests' servers (tests/common) that a failed or ended step
# left running: those whose test process (the first number in the
# directory's name) is gone, not another run's; a standby's is inside its
# primary's. Then the servers the scripts' clusters (package, upgrade,
# Citus) started since the step began: pg_ctl detaches them from the
# step's process group, so they outlive it when it is ended (SIGQUIT: an
# immediate shutdown, whatever the version).
stop_test_servers() {
  local pid_file owner pid
  for pid_file in /tmp/pg_gatekeeper_test.*/data/postmaster.pid /tmp/pg_gatekeeper_test.*/*/data/postmaster.pid; do
    [ -f "$pid_file" ] || continue
    owner=${pid_file#/tmp/pg_gatekeeper_test.}
    owner=${owner%%.*}
    kill -0 "$owner" 2>/dev/null && continue
    runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$(dirname "$pid_file")" stop -m immediate >/dev/null 2>&1 || true
  done
  for pid_file in /tmp/pg_gatekeeper_{cluster,package_test,upgrade,regress}.*/{,*/,*/*/}postmaster.pid /tmp/citus-*/*/postmaster.pid; do
    [ -f "$pid_file" ] && [ "$pid_file" -nt "$logdir/.step-start" ] || continue
    pid=$(head -n 1 "$pid_file")
    # A stale file (its server killed) may name a PID reused since.
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] || continue
    kill -QUIT "$pid" 2>/dev/null || true
  done
}
# What is left of a step's process group once it ended or was ended: its
# processes end a moment after timeout does (waited for up to 30 s), then
# the test servers they left.
end_step() { # group
  kill -TERM -- -"$1" 2>/dev/null
  for _ in $(seq 1 150); do kill -0 -- -"$1" 2>/dev/null || break; sleep 0.2; done
  stop_test_servers
}
step_pid= step_name=
# A step under way when the run is ended counts as failed.
on_signal() { # what
  if [ -n "$step_pid" ]; then
    end_step "$step_pid"
    failed=$((failed + 1)); note "FAIL  $step_name: $1 while it ran"
  fi
  echo "$1"
  print_summary
}
trap 'on_signal interrupted; exit 130' INT
trap 'on_signal terminated; exit 143' TERM

bash scripts/deps.sh "${majors[@]}" || { echo "dependency installation failed"; echo "suites: 0 passed, 1 failed"; exit 1; }

step "rustfmt" 300 cargo fmt --all --check
step "clippy (warnings denied)" 1200 cargo clippy --workspace --all-targets -- -D warnings
step "core unit tests" 600 cargo test -p gatekeeper_core

# The integration tests talk to the installed extension over connections;
# they are built once. A separate target dir keeps these builds from
# thrashing cargo-pgrx's cache. One test at a time: timings (lending, the
# deadlock breaker, stall relief) need the CPUs. Each test file is a step of
# its own, so that neither a failure nor a hang in one hides the others.
itest() { # the test files' options...
  env CARGO_TARGET_DIR=target/itest PG_BINDIR="$PG_BINDIR" cargo test --no-fail-fast "$@" -- --test-threads=1
}
export -f itest

# Limits are several times what each step takes on a 2-CPU machine (the
# whole run 45-60 minutes, a fresh machine's builds included).
for m in "${majors[@]}"; do
  PG_MAJOR=$m source scripts/pg_env.sh
  if step "PostgreSQL $m: build and install (debug)" 1200 bash scripts/install.sh "$m"; then
    step "PostgreSQL $m: pg_regress" 300 bash scripts/regress.sh --pg "$m"
    for t in gate worker isolation liveness adaptive errors exporter standby citus_names first_statement lane; do
      step "PostgreSQL $m: integration tests: $t" 900 bash -c 'itest "$@"' itest --test "$t"
    done
    step "PostgreSQL $m: chaos and restart tests" 900 bash -c 'itest "$@"' itest --test chaos
    # Last for this version: it sets the development install aside and puts
    # it back when done. The release build, as the packages users install
    # are (about 2 minutes to build on 2 CPUs).
    step "PostgreSQL $m: release package (install, use, update, remove)" 1200 bash scripts/package_test.sh --pg "$m" --release
  fi
done

if [[ " ${majors[*]} " == *" 15 "* && " ${majors[*]} " == *" 18 "* ]]; then
  step "pg_upgrade 15 to 18 with the extension" 300 bash scripts/upgrade_test.sh 15 18
fi
if [[ " ${majors[*]} " == *" 15 "* ]]; then
  PG_MAJOR=15 source scripts/pg_env.sh
  # The benchmark runs the installed library: PostgreSQL 15's debug build,
  # installed again in case a step above left another in its place.
  if step "PostgreSQL 15: install again for the benchmark" 1200 bash scripts/install.sh 15; then
    step "benchmark smoke (PostgreSQL 15)" 900 bash bench/run.sh --smoke --no-build
  fi
  # About 3 minutes (Citus's build, once, 1.5 more).
  if [ $citus = 1 ] && ls ../shared/vendor/citus-*.tar.gz >/dev/null 2>&1; then
    step "Citus: 3 nodes, the gate on each, no hang (PostgreSQL 15)" 1500 bash scripts/citus.sh --smoke
  elif [ $citus = 1 ]; then
    note "skip  Citus: no Citus source in ../shared/vendor (see scripts/citus_build.sh)"
  fi
fi

print_summary
[ $failed -eq 0 ]
