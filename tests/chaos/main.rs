//! Reliability under chaos, and crash/restart.
//!
//! Run:
//!   CARGO_TARGET_DIR=target/itest cargo test --test chaos -- --test-threads=1 --nocapture
//!
//! Environment (cargo test has no custom flags):
//! - `GATEKEEPER_CHAOS_LONG=1`: the big variant:
//!   240 sessions and 200,000 transactions instead of 200 and 20,000.
//! - `GATEKEEPER_CHAOS_SEED=<u64>`: replay a run. The seed is printed at the
//!   start of every run; it drives every random choice (each thread has its
//!   own generator derived from it). Thread interleaving is up to the OS, so
//!   a replay makes the same choices, not the same schedule.
//! - `GATEKEEPER_CHAOS_SESSIONS=<n>`, `GATEKEEPER_CHAOS_XACTS=<n>`: override
//!   the size (for development; CI uses the defaults).
//!
//! The chaos test (`chaos_keeps_the_gate_exact`) drives, at once:
//! - "a" sessions (role `app`, 3/4 of the sessions): explicit and implicit
//!   transactions, prepared statements, errors inside blocks then ROLLBACK,
//!   savepoints, explicit rollbacks, `statement_timeout` firing at a block's first statement and
//!   on parked or running statements, client-side idling inside blocks (so
//!   that idle holders lend their places), LOCK TABLE behind parked lock
//!   holders (deadlock breaker), VACUUM/ANALYZE and a procedure that
//!   COMMITs. They are the targets of the fault injector: cancels (through
//!   `CancelToken` and `pg_cancel_backend`) and `pg_terminate_backend` of
//!   parked and of running sessions. Terminated sessions reconnect.
//! - "t" sessions (role `app_to`, 1/4): `ALTER ROLE app_to SET
//!   pg_gatekeeper.queue_timeout`, so their waits time out (53000). No fault
//!   is ever injected into them, which makes every queue timeout countable
//!   exactly on the client side (see the assertions).
//! - psql clients (role `app`), killed with SIGKILL while parked, while
//!   running, or left to finish: the lost-client check.
//! - a limits thread: `ALTER SYSTEM` of max_active (1-4), max_tickets,
//!   max_queued (rejections, 53400), sample_interval, stall_timeout, and
//!   the `app_to` queue timeout, each followed by `pg_reload_conf()`; it
//!   also terminates the worker now and then (it must come back) and reads
//!   the views as a member of pg_monitor (never admitted nor parked, by the
//!   server's own account of that session).
//! - a monitor: samples `gatekeeper.status` every 50 ms and checks the
//!   invariants that hold at every instant (no free ticket while someone is
//!   queued; tickets within [max_active, ceiling]; no wait over 60 s), and
//!   that no parked session holds a transaction id (parked mid-transaction).
//!
//! Afterwards: every session ends its transaction, the gate is quiet, every
//! slot is free, the totals agree with the clients' own counts (see
//! `check_totals` for what is exact and what is a bound, and why), and the
//! server log has no crash.
//!
//! The restart tests: `pg_ctl restart -m fast` with parked and running
//! sessions, and `DROP EXTENSION` / `CREATE EXTENSION` while sessions are
//! parked and running. (SIGKILL of a backend with parked sessions is
//! `the_gate_starts_clean_after_a_crash_restart` in tests/worker.rs.)
//!
//! The last test reproduces a defect these tests found (a transaction begun
//! while exempt was parked mid-way after a reload made its role gated).
//!
//! Layout: `rng` (the seeded generator), `setup` (size, seed, schema),
//! `shared` (what the threads share and count), `kinds` and `driver` (the
//! sessions), `faults` (fault injector and psql killers), `limits` (reloads,
//! worker terminations, monitoring reads), `monitor` (the invariants at every
//! instant), `checks` (the accounting afterwards), `restart` and `findings`
//! (the other tests).

#[path = "../common/mod.rs"]
mod common;

mod checks;
mod driver;
mod faults;
mod findings;
mod kinds;
mod limits;
mod monitor;
mod restart;
mod rng;
mod setup;
mod shared;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use checks::{check_totals, diagnostics, log_summary};
use common::{count_lines, crash_lines, wait_until, Cluster};
use driver::Driver;
use faults::{inject_faults, psql_killer};
use kinds::Class;
use limits::change_limits;
use monitor::{monitor, Peaks};
use rng::Rng;
use setup::{seed, setup_schema, size, CLIENT_CHECK_INTERVAL};
use shared::{Shared, Tally};

// ---------------------------------------------------------------------------
// The chaos test.

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn chaos_keeps_the_gate_exact() {
    let size = size();
    let seed = seed();
    println!(
        "chaos: seed {seed} (replay with GATEKEEPER_CHAOS_SEED={seed}); {} sessions ({} app, {} app_to), {} psql \
         drivers, target {} transactions{}",
        size.a_sessions + size.t_sessions,
        size.a_sessions,
        size.t_sessions,
        size.psql_drivers,
        size.xacts,
        if size.long { " (long)" } else { "" }
    );
    let max_connections = (size.a_sessions + size.t_sessions + size.psql_drivers * 2 + 60).to_string();
    let c = Cluster::start(&[
        ("max_connections", &max_connections),
        ("shared_buffers", "32MB"),
        ("pg_gatekeeper.max_active", "3"),
        ("pg_gatekeeper.client_check_interval", CLIENT_CHECK_INTERVAL),
        ("pg_gatekeeper.history_interval", "100ms"),
        ("deadlock_timeout", "100ms"),
    ]);
    setup_schema(&c);
    let start_status = c.status();
    assert_eq!(start_status.int("admitted_total"), 0, "{:?}", start_status.0);
    wait_until("the worker runs", Duration::from_secs(5), || c.worker_pid().is_some());

    let sh = Shared {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        tokens: Mutex::new(HashMap::new()),
        violations: Mutex::new(vec![]),
    };
    let t0 = Instant::now();
    let mut a = Tally::default();
    let mut tt = Tally::default();
    let mut faults = Tally::default();
    let mut peaks = Peaks::default();
    let mut stuck = None;

    std::thread::scope(|scope| {
        let (c, sh) = (&c, &sh);
        // If this thread panics inside the scope, the scope still joins every
        // thread: make sure they all stop.
        let _stop_on_unwind = StopOnDrop(&sh.stop);
        let mut drivers = vec![];
        for i in 0..size.a_sessions + size.t_sessions {
            let (class, name) = if i < size.a_sessions {
                (Class::A, format!("a{i:03}"))
            } else {
                (Class::T, format!("t{:03}", i - size.a_sessions))
            };
            let d = Driver::new(c, sh, class, name, Rng::fork(seed, i as u64 + 1));
            drivers.push((class, scope.spawn(move || d.drive())));
        }
        let mut helpers = vec![];
        helpers.push(scope.spawn(move || inject_faults(c, sh, Rng::fork(seed, 10_001))));
        helpers.push(scope.spawn(move || change_limits(c, sh, Rng::fork(seed, 10_002))));
        for k in 0..size.psql_drivers {
            helpers.push(scope.spawn(move || psql_killer(c, sh, k, Rng::fork(seed, 20_000 + k as u64))));
        }
        let mon = scope.spawn(move || monitor(c, sh));

        // Run until the target is reached (or the time is up).
        let mut next_report = Instant::now() + Duration::from_secs(10);
        while sh.completed.load(Ordering::Relaxed) < size.xacts && t0.elapsed() < size.max_wall {
            std::thread::sleep(Duration::from_millis(100));
            if Instant::now() >= next_report {
                next_report += Duration::from_secs(10);
                let s = c.status();
                println!(
                    "chaos: {:>4} s: {} transactions completed; max_active {} tickets {} admitted {} queued {}; \
                     timeouts {} rejected {} cancels {} exits {} lost {} overflow {}",
                    t0.elapsed().as_secs(),
                    sh.completed.load(Ordering::Relaxed),
                    s.max_active(),
                    s.tickets(),
                    s.admitted(),
                    s.queued(),
                    s.int("queue_timeouts_total"),
                    s.int("rejected_total"),
                    s.int("queue_cancels_total"),
                    s.int("queue_exits_total"),
                    s.int("clients_lost_total"),
                    s.int("overflow_total"),
                );
            }
        }
        sh.stop.store(true, Ordering::Relaxed);
        println!("chaos: stopping after {:.1} s", t0.elapsed().as_secs_f64());

        // Every session finishes the transaction it is in. A session that
        // never comes back is stranded: report, then stop the server so
        // that every thread returns.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline && !drivers.iter().all(|(_, h)| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !drivers.iter().all(|(_, h)| h.is_finished()) {
            stuck = Some(diagnostics(c));
            let _ = c.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        }
        for (class, h) in drivers {
            let tally = h.join().expect("session thread panicked");
            match class {
                Class::A => a.merge(tally),
                Class::T => tt.merge(tally),
            }
        }
        for h in helpers {
            faults.merge(h.join().expect("helper thread panicked"));
        }
        peaks = mon.join().expect("monitor panicked");
    });
    let wall = t0.elapsed();
    if let Some(diag) = stuck {
        panic!("sessions did not finish within 120 s of the stop (stranded?)\n{diag}");
    }

    // -- quiet ------------------------------------------------------------
    c.assert_quiet();
    wait_until("every gated session has gone", Duration::from_secs(20), || c.status().int("total_sessions") == 0);
    // Every slot is free again: the worker's next history sample counts
    // slots by state (idle counts attached gated slots whose backend is idle).
    let after: String = c.admin_query("SELECT clock_timestamp()::text", &[])[0].get(0);
    let mut sample = (0, 0, 0);
    wait_until("a history sample after the sessions left", Duration::from_secs(5), || {
        let rows = c.admin_query(
            "SELECT idle, admitted, queued FROM gatekeeper.history
             WHERE sample_time > $1::text::timestamptz ORDER BY sample_time DESC LIMIT 1",
            &[&after],
        );
        rows.first().is_some_and(|r| {
            sample = (r.get::<_, i32>(0), r.get::<_, i32>(1), r.get::<_, i32>(2));
            true
        })
    });

    let s = c.status();
    let log = c.log_text();
    let hist_sum = c.admin_i64("SELECT coalesce(sum(waits), 0)::bigint FROM gatekeeper.wait_histogram");
    let completed = a.completed + tt.completed;
    let attempted = a.attempted + tt.attempted;

    // -- report -------------------------------------------------------------
    println!(
        "chaos: seed {seed}; {:.1} s; {completed} transactions completed of {attempted} attempted",
        wall.as_secs_f64()
    );
    println!(
        "chaos: app sessions:    completed {} attempted {} reconnects {} errors {:?}",
        a.completed, a.attempted, a.reconnects, a.errors
    );
    println!(
        "chaos: app_to sessions: completed {} attempted {} reconnects {} errors {:?}",
        tt.completed, tt.attempted, tt.reconnects, tt.errors
    );
    println!("chaos: faults and changes: {:?}", faults.faults);
    println!("chaos: monitor: {peaks:?}");
    println!("chaos: final gatekeeper.status: {}", s.0);
    println!("chaos: server log messages by kind:\n{}", log_summary(&log));

    // -- checks -------------------------------------------------------------
    let mut bad: Vec<String> = vec![];
    let mut check = |ok: bool, msg: String| {
        if !ok {
            bad.push(msg);
        }
    };
    check(completed >= size.xacts, format!("only {completed} of {} transactions in {:?}", size.xacts, size.max_wall));
    check(
        a.unexpected.is_empty() && tt.unexpected.is_empty(),
        format!("unexpected errors: {:?} {:?}", a.unexpected, tt.unexpected),
    );
    // The monitor samples every 50 ms: at least one sample a second, or its
    // instant checks were not made.
    check(
        peaks.samples >= wall.as_secs().max(1),
        format!("the monitor took only {} samples in {:.0} s", peaks.samples, wall.as_secs_f64()),
    );
    let violations = sh.violations.lock().unwrap().clone();
    check(violations.is_empty(), format!("invariant violations during the run: {violations:#?}"));
    check(
        sample == (0, 0, 0),
        format!("slots still in use after every session left (idle, admitted, queued) = {sample:?}"),
    );
    // The worker came back after every termination, and only then.
    let terminations = faults.fault("worker terminations") as usize;
    let starts = count_lines(&log, "pg_gatekeeper worker started");
    check(
        c.worker_pid().is_some() && starts == 1 + terminations,
        format!("the worker started {starts} times for {terminations} terminations, or does not run now"),
    );
    let crashes = crash_lines(&log);
    check(crashes.is_empty(), format!("crash lines in the server log: {crashes:#?}"));
    check_totals(&s, &a, &tt, &faults, &log, hist_sum, completed, &mut check);

    if !bad.is_empty() {
        panic!("chaos (seed {seed}) found {} problem(s):\n- {}", bad.len(), bad.join("\n- "));
    }
    println!("chaos: all checks passed (seed {seed})");
}
