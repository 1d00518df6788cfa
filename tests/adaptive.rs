//! The adaptive limit (docs/DESIGN.md §9): with `max_active = 0` the worker
//! grows the limit while a larger one raises throughput (wait-bound work),
//! never grows it behind a lock pile-up and brings a grown one down there,
//! and a manual `max_active` or `active_per_cpu_max = 0` keeps it still.
//!
//! The floor is 1 per CPU here, so that a few sessions queue; gated sessions
//! are role `app`, the observer is the exempt superuser. Stall relief is off,
//! so that it cannot move places around beside the rule under test.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_until, Cluster, Running, Status};

fn conf(max_per_cpu: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("pg_gatekeeper.active_per_cpu", "1"),
        ("pg_gatekeeper.active_per_cpu_max", max_per_cpu),
        ("pg_gatekeeper.stall_timeout", "0"),
        ("max_connections", "80"),
    ]
}

fn start_loops(c: &Cluster, prefix: &str, n: usize, sql: &str, stop: &Arc<AtomicBool>) -> Vec<Running> {
    (0..n).map(|k| c.app(&format!("{prefix}{k}")).looping(sql, stop)).collect()
}

fn stop_loops(loops: Vec<Running>, stop: &Arc<AtomicBool>) {
    stop.store(true, Ordering::Relaxed);
    for r in loops {
        r.join_ok(Duration::from_secs(30));
    }
}

fn text(s: &Status, col: &str) -> String {
    s.0[col].as_str().unwrap_or_else(|| panic!("gatekeeper.status.{col} is not text in {}", s.0)).to_string()
}

/// The limit at its floor, with the reason given, for `dur`.
fn assert_stays(c: &Cluster, floor: i64, reason: &str, dur: Duration) {
    let start = Instant::now();
    while start.elapsed() < dur {
        let s = c.status();
        assert_eq!(s.max_active(), floor, "the limit moved: {}", s.0);
        assert_eq!(text(&s, "limit_reason"), reason, "{}", s.0);
        std::thread::sleep(Duration::from_millis(50));
    }
}

const WAIT_BOUND: &str = "SELECT pg_sleep(0.02)";

/// Grow the limit with 24 sessions whose statements wait 20 ms each: the
/// floor queues most of them, and every place more adds throughput.
fn grow(c: &Cluster, floor: i64, stop: &Arc<AtomicBool>) -> Vec<Running> {
    let loops = start_loops(c, "sleep", 24, WAIT_BOUND, stop);
    c.wait_status_for("the limit grows past twice its floor", Duration::from_secs(15), |s| {
        s.max_active() >= 2 * floor && text(s, "limit_reason") == "grow"
    });
    loops
}

#[test]
fn wait_bound_work_grows_the_limit() {
    // The default ceiling, 100 per CPU: far above the 24 sessions below.
    let c = Cluster::start(&conf("100"));
    let s = c.status();
    let cpus = s.0["effective_cpus"].as_f64().unwrap();
    let floor = cpus.ceil() as i64;
    assert_eq!(s.max_active(), floor, "{}", s.0);
    assert_eq!((s.int("limit_min"), s.int("limit_max")), (floor, (cpus * 100.0).ceil() as i64));
    assert_eq!(text(&s, "limit_reason"), "start");

    let stop = Arc::new(AtomicBool::new(false));
    let loops = grow(&c, floor, &stop);
    // Never far past the 24 sessions there are to run, although the ceiling
    // is far above them: it grows only while sessions are queued, so from
    // 23 at most, by an eighth (at least 1) doubled at most twice: to 31.
    let bound = 24 + 24 / 2;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let s = c.status();
        assert!(s.max_active() <= bound, "the limit passed {bound} with 24 sessions: {}", s.0);
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until("history shows the growth", Duration::from_secs(5), || {
        c.admin_i64("SELECT count(*) FROM gatekeeper.history WHERE limit_reason = 'grow'") >= 1
    });
    stop_loops(loops, &stop);
    c.assert_quiet();
}

/// `max_tickets` caps admissions at once: tickets never fall below the
/// limit, so it caps the adaptive limit's climb too.
#[test]
fn max_tickets_caps_the_adaptive_limit() {
    let c = Cluster::start(&conf("100"));
    let floor = c.status().max_active();
    let cap = floor + 2;
    c.set_conf(&[("pg_gatekeeper.max_tickets", &cap.to_string())]);
    c.wait_status_for("the limit's range ends at max_tickets", Duration::from_secs(5), |s| {
        (s.int("limit_min"), s.int("limit_max"), s.int("ticket_ceiling")) == (floor, cap, cap)
    });
    let stop = Arc::new(AtomicBool::new(false));
    let loops = start_loops(&c, "sleep", 24, WAIT_BOUND, &stop);
    c.wait_status_for("the limit grows to max_tickets", Duration::from_secs(15), |s| s.max_active() == cap);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let s = c.status();
        assert!(s.max_active() <= cap && s.tickets() <= cap, "past max_tickets = {cap}: {}", s.0);
        std::thread::sleep(Duration::from_millis(50));
    }
    stop_loops(loops, &stop);
    c.assert_quiet();
}

#[test]
fn a_lock_pile_up_never_grows_the_limit_and_brings_a_grown_one_down() {
    // The progress guarantee admits the head of a queue behind which
    // nothing works; at its default (1 s) it drained the pile-up's queue
    // before the limit reached its floor on a loaded machine, and the limit
    // rightly stops moving once the queue is empty (it does not bind).
    let mut conf = conf("16");
    conf.push(("pg_gatekeeper.progress_timeout", "5s"));
    let c = Cluster::start(&conf);
    c.admin_exec(
        "CREATE TABLE hot (id int PRIMARY KEY, v int); INSERT INTO hot VALUES (1, 0); GRANT ALL ON hot TO app",
    );
    let floor = c.status().max_active();
    // The exempt superuser holds the row; gated sessions queue behind it.
    let mut owner = c.superuser("owner");
    owner.ok("BEGIN; SELECT * FROM hot WHERE id = 1 FOR UPDATE");
    let update = "UPDATE hot SET v = v + 1 WHERE id = 1";
    let waiters: Vec<Running> = (0..12).map(|k| c.app(&format!("upd{k}")).spawn(update)).collect();
    c.wait_status("the holders wait on the row and the rest queue", |s| {
        s.admitted() >= floor && s.admitted() + s.queued() == 12 && s.queued() > 0
    });
    // On a loaded machine the first holders' arrival (parse, plan, on a
    // busy CPU before they reach the row) can read as work for a window,
    // and a step up be tried; the pile-up then takes it back.
    let s = c.wait_status_for("the limit at its floor", Duration::from_secs(10), |s| s.max_active() == floor);
    // Ten throughput windows with a queue: the holders only wait.
    assert_stays(&c, floor, &text(&s, "limit_reason"), Duration::from_secs(5));
    owner.ok("COMMIT");
    for w in waiters {
        w.join_ok(Duration::from_secs(10));
    }

    // Grown by wait-bound work, then a pile-up bigger than the limit:
    // places held by lock waiters come back, down to the floor.
    let stop = Arc::new(AtomicBool::new(false));
    let loops = grow(&c, floor, &stop);
    stop_loops(loops, &stop);
    let grown = c.status().max_active();
    owner.ok("BEGIN; SELECT * FROM hot WHERE id = 1 FOR UPDATE");
    // The limit may have stepped on since it was read: a margin.
    let n = grown as usize + 16;
    let waiters: Vec<Running> = (0..n).map(|k| c.app(&format!("pile{k}")).spawn(update)).collect();
    c.wait_status_for("the limit comes back to its floor", Duration::from_secs(20), |s| {
        s.max_active() == floor && text(s, "limit_reason") == "shrink"
    });
    owner.ok("COMMIT");
    for w in waiters {
        w.join_ok(Duration::from_secs(20));
    }
    c.assert_quiet();
}
#[test]
fn a_manual_limit_or_a_zero_ceiling_keeps_it_still() {
    let c = Cluster::start(&conf("0"));
    let floor = c.status().max_active();
    let s = c.status();
    assert_eq!((s.int("limit_min"), s.int("limit_max")), (floor, floor));
    let stop = Arc::new(AtomicBool::new(false));
    let loops = start_loops(&c, "sleep", 16, WAIT_BOUND, &stop);
    c.wait_status_for("sessions queue", Duration::from_secs(5), |s| s.queued() > 0);
    assert_stays(&c, floor, "fixed", Duration::from_secs(2));

    c.set_conf(&[("pg_gatekeeper.max_active", "3")]);
    let s = c.status();
    assert_eq!((s.int("limit_min"), s.int("limit_max")), (3, 3));
    assert_stays(&c, 3, "manual", Duration::from_secs(2));

    // Back to automatic with room to grow: it starts from the floor.
    c.set_conf(&[("pg_gatekeeper.max_active", "0"), ("pg_gatekeeper.active_per_cpu_max", "16")]);
    c.wait_status_for("adaptation starts over and grows", Duration::from_secs(20), |s| {
        s.max_active() > floor && text(s, "limit_reason") == "grow"
    });
    stop_loops(loops, &stop);
    c.assert_quiet();
}

#[test]
fn a_turn_to_cpu_bound_work_brings_the_limit_back_within_five_seconds() {
    // The default floor (4 per CPU), stall relief and the long lane on, as
    // by default: computing holders must not escape through relief either.
    let c = Cluster::start(&[("pg_gatekeeper.stall_timeout", "200ms"), ("max_connections", "150")]);
    c.create_burn();
    let floor = c.status().max_active();
    let stop = Arc::new(AtomicBool::new(false));
    let loops = start_loops(&c, "sleep", 60, WAIT_BOUND, &stop);
    c.wait_status_for("wait-bound work grows the limit to three times its floor", Duration::from_secs(30), |s| {
        s.max_active() >= 3 * floor
    });
    // The switch: the same number of sessions, now computing for a second
    // per statement.
    let stop_cpu = Arc::new(AtomicBool::new(false));
    let storm = start_loops(&c, "cpu", 60, "SELECT burn(1.0)", &stop_cpu);
    stop_loops(loops, &stop);
    let switched = Instant::now();
    let cap = 2 * floor;
    c.wait_status_for("the limit comes back to twice its floor", Duration::from_secs(5), |s| s.max_active() <= cap);
    let lane = c.admin_i64("SELECT max_active::bigint FROM gatekeeper.classes WHERE class = 'long'");
    // From 5 s after the switch, sessions on a CPU stay within twice the
    // floor, and the long lane's cap on top, which may hold what the limit
    // gave up.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(switched.elapsed()));
    let mut seen = vec![];
    while switched.elapsed() < Duration::from_secs(10) {
        seen.push(c.app_computing());
        std::thread::sleep(Duration::from_millis(50));
    }
    seen.sort_unstable();
    let median = seen[seen.len() / 2];
    let most = *seen.last().unwrap();
    assert!(median <= cap, "median {median} sessions computing, cap {cap}: {seen:?}");
    assert!(most <= cap + lane, "{most} sessions computing, cap {cap} + lane {lane}: {seen:?}");
    stop_loops(storm, &stop_cpu);
    c.assert_quiet();
}

/// A limit that wait-bound work raised above every client must come down
/// when the same clients turn to short CPU-bound transactions, though none
/// of them queues and none computes long: before, nothing brought it down,
/// and the gate gated nothing for as long as the clients stayed fewer.
#[test]
fn a_limit_above_every_client_comes_down_when_they_turn_to_cpu_work() {
    let c = Cluster::start(&[("max_connections", "150")]);
    c.create_burn();
    let floor = c.status().max_active();
    let clients = 2 * floor + 4;
    let stop = Arc::new(AtomicBool::new(false));
    let loops = start_loops(&c, "sleep", 60, WAIT_BOUND, &stop);
    c.wait_status_for("wait-bound work grows the limit past the clients to come", Duration::from_secs(30), |s| {
        s.max_active() > clients + 4
    });
    stop_loops(loops, &stop);
    // Statements of 20 ms of CPU each, far below stall_timeout: the CPUs
    // are full, and every client runs at once under the grown limit.
    let stop_cpu = Arc::new(AtomicBool::new(false));
    let storm = start_loops(&c, "cpu", clients as usize, "SELECT burn(0.02)", &stop_cpu);
    c.wait_status_for("the limit comes below the clients", Duration::from_secs(20), |s| s.max_active() < clients);
    stop_loops(storm, &stop_cpu);
    c.assert_quiet();
}

/// `status.cpu_idle` is measured while nothing is queued too: the worker
/// then samples once per `history_interval`, a window its decisions do not
/// use, but the gauge shows it. A session computing on one of the CPUs
/// brings it down; before, it stayed at its first value (1) until a queue.
#[test]
fn cpu_idle_is_measured_with_nothing_queued() {
    // At the default history_interval (1 s) the quiet windows run past
    // twice the meter's 200 ms.
    let c = Cluster::start(&[]);
    c.create_burn();
    let cpus = c.status().0["effective_cpus"].as_f64().unwrap_or(1.0).max(1.0);
    // Computing on every CPU the server may use, exempt (superusers), so
    // that nothing queues.
    let burners: Vec<Running> =
        (0..cpus.ceil() as usize).map(|k| c.superuser(&format!("burn{k}")).spawn("SELECT burn(6)")).collect();
    wait_until("cpu_idle falls while the CPUs compute", Duration::from_secs(5), || {
        let s = c.status();
        s.queued() == 0 && s.0["cpu_idle"].as_f64().is_some_and(|f| f < 0.5)
    });
    for b in burners {
        b.join_ok(Duration::from_secs(10));
    }
    c.assert_quiet();
}
