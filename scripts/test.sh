#!/usr/bin/env bash
# Run every test of pg_gatekeeper: unit tests of the admission core,
# pg_regress suites, concurrent integration tests, and a smoke run of the
# benchmark. Installs what is missing first. Run as root from anywhere:
#   bash scripts/test.sh
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=/usr/lib/postgresql/15/bin
unset RUST_BACKTRACE
passed=0 failed=0 summary=()

step() { # name command...
  local name=$1; shift
  printf '\n==== %s\n' "$name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1)); summary+=("ok    $name ($((SECONDS - t0)) s)")
  else
    failed=$((failed + 1)); summary+=("FAIL  $name ($((SECONDS - t0)) s)")
  fi
}

bash scripts/deps.sh || { echo "dependency installation failed"; exit 1; }

step "core unit tests" cargo test -p gatekeeper_core
step "build and install (debug)" cargo pgrx install --pg-config "$BIN/pg_config"
if [ $failed -eq 0 ]; then
  step "pg_regress" bash scripts/regress.sh
  # A separate target dir keeps these builds from thrashing cargo-pgrx's cache.
  # One test at a time: timings (lending, the deadlock breaker) need the CPUs.
  step "integration tests" env CARGO_TARGET_DIR=target/itest \
    cargo test --test gate --test worker --test isolation --test errors -- --test-threads=1
  step "chaos and restart tests" env CARGO_TARGET_DIR=target/itest \
    cargo test --test chaos -- --test-threads=1
  step "benchmark smoke" bash bench/run.sh --smoke --no-build
fi

printf '\n==== summary\n'
printf '%s\n' "${summary[@]}"
echo "suites: $passed passed, $failed failed"
[ $failed -eq 0 ]
