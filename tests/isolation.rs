//! Workload isolation: stall relief and classes. Long statements, lock
//! pile-ups and a busy class must not stall everyone else.
//!
//! Gated sessions are role `app` (and `rep`, a role whose class is set with
//! ALTER ROLE); the observer is the exempt superuser. Each test ends with
//! `assert_quiet`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{sqlstate, wait_until, Cluster, Running};

/// The stall timeout these tests use, and the slack they allow on top: a
/// sample, a wake-up and a round trip, on two CPUs that eight holders keep
/// busy. Without relief (or the lane) the wait is the holders' 5 s, or
/// for ever behind a lock.
const STALL_MS: u64 = 500;
const SLACK: Duration = Duration::from_millis(1500);

fn stall_conf() -> Vec<(&'static str, &'static str)> {
    vec![("pg_gatekeeper.max_active", "8"), ("pg_gatekeeper.stall_timeout", "500ms"), ("max_connections", "80")]
}

/// Count the sessions named with `prefix` in state `state`.
fn count_in(c: &Cluster, prefix: &str, state: &str) -> usize {
    c.sessions()
        .iter()
        .filter(|s| s.application_name.as_deref().is_some_and(|n| n.starts_with(prefix)) && s.state == state)
        .count()
}

/// One column of a class's row in `gatekeeper.classes`.
fn class_i64(c: &Cluster, class: &str, col: &str) -> i64 {
    let sql = format!("SELECT {col}::bigint FROM gatekeeper.classes WHERE class = $1");
    c.admin_query(&sql, &[&class])[0].get(0)
}

/// How the eight long holders give a place to the short query.
#[derive(PartialEq)]
enum Way {
    /// Stall relief: they wait (a sleep), so they stop counting.
    Relief,
    /// The long lane: they compute, so they are never relieved; up to the
    /// lane's cap (half the CPUs) move into it and stop taking a ticket.
    Lane,
}

/// Eight holders run `sql` (five seconds each); a ninth session's short
/// query gets in within the stall timeout, plus slack, of asking.
fn eight_long_statements_do_not_hold_back_a_short_one(sql: &str, way: Way) {
    let c = Cluster::start(&stall_conf());
    let long: Vec<Running> = (0..8).map(|k| c.app(&format!("long{k}")).spawn(sql)).collect();
    wait_until("eight long statements are admitted", Duration::from_secs(5), || count_in(&c, "long", "active") == 8);
    let d = c.app("short").spawn("SELECT count(*) FROM pg_class").join_ok(Duration::from_secs(5));
    let bound = Duration::from_millis(STALL_MS) + SLACK;
    assert!(d.elapsed <= bound, "the short query took {:?} (bound {bound:?})", d.elapsed);
    let s = c.status();
    if way == Way::Relief {
        assert!(s.int("stalls_total") >= 1, "{:?}", s.0);
        assert!(s.int("admitted") <= 16, "stall relief admits at most max_active more: {:?}", s.0);
    } else {
        assert_eq!(s.int("stalls_total"), 0, "computing holders are never relieved: {:?}", s.0);
        let cap = class_i64(&c, "long", "max_active");
        assert!(class_i64(&c, "long", "admitted") >= 1, "a computing holder moved into the lane");
        assert!(s.int("admitted") <= 8 + cap, "the lane admits at most its cap more: {:?}", s.0);
    }
    for r in long {
        r.join_ok(Duration::from_secs(30));
    }
    c.assert_quiet();
}

#[test]
fn sleeping_statements_stall_and_give_their_place() {
    eight_long_statements_do_not_hold_back_a_short_one("SELECT pg_sleep(5)", Way::Relief);
}

#[test]
fn cpu_bound_statements_move_into_the_long_lane_and_give_their_place() {
    eight_long_statements_do_not_hold_back_a_short_one(
        "DO $$BEGIN WHILE clock_timestamp() < statement_timestamp() + interval '5 s' LOOP END LOOP; END$$",
        Way::Lane,
    );
}

#[test]
fn a_lock_pile_up_does_not_hold_back_unrelated_work() {
    let c = Cluster::start(&stall_conf());
    c.admin_exec(
        "CREATE TABLE hot (id int PRIMARY KEY, v int); INSERT INTO hot VALUES (1, 0); GRANT ALL ON hot TO app;",
    );
    // A session outside the gate (a superuser's migration) holds the row.
    let mut owner = c.superuser("owner");
    owner.ok("BEGIN; UPDATE hot SET v = v + 1 WHERE id = 1");
    let blocked: Vec<Running> =
        (0..8).map(|k| c.app(&format!("blocked{k}")).spawn("UPDATE hot SET v = v + 1 WHERE id = 1")).collect();
    wait_until("eight updates wait on the row lock", Duration::from_secs(5), || {
        c.admin_i64(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'blocked%' AND wait_event_type = 'Lock'",
        ) == 8
    });
    let d = c.app("unrelated").spawn("SELECT count(*) FROM pg_class").join_ok(Duration::from_secs(5));
    let bound = Duration::from_millis(STALL_MS) + SLACK;
    assert!(d.elapsed <= bound, "the unrelated query took {:?} (bound {bound:?})", d.elapsed);
    let stalled: i64 = c.admin_i64("SELECT count(*) FROM gatekeeper.sessions WHERE stalled");
    assert!(stalled >= 1, "the lock waiters show as stalled");
    owner.ok("COMMIT");
    for r in blocked {
        r.join_ok(Duration::from_secs(10));
    }
    c.assert_quiet();
}

/// `rep` sessions are in class `reports`, set per role as a DBA would.
fn classes_cluster(classes: &str, extra: &[(&'static str, &'static str)]) -> Cluster {
    let mut conf = vec![("pg_gatekeeper.classes", classes), ("max_connections", "80")];
    conf.extend_from_slice(extra);
    let c = Cluster::start(&conf);
    c.admin_exec("CREATE ROLE rep LOGIN; ALTER ROLE rep SET pg_gatekeeper.class = 'reports';");
    c
}

/// Sessions held back only by their class's cap are not sessions a ticket
/// could admit: they must not make the worker lend (which once raised the
/// tickets to the ceiling within 2 s and let any role past the limit).
#[test]
fn sessions_waiting_on_their_class_cap_do_not_make_the_gate_lend() {
    let c = classes_cluster("reports (max_active = 1)", &[("pg_gatekeeper.max_active", "2")]);
    c.create_burn();
    let rep = |k: usize| c.session_as("rep", &format!("rep{k}"));
    let held = rep(0).spawn("SELECT burn(4.0)");
    wait_until("rep0 holds the class's place", Duration::from_secs(5), || class_i64(&c, "reports", "admitted") == 1);
    let waiting: Vec<Running> = (1..3).map(|k| rep(k).spawn("SELECT 1")).collect();
    wait_until("two reports wait on the cap", Duration::from_secs(5), || class_i64(&c, "reports", "queued") == 2);
    // The worker samples every 5 ms while they wait: watch the tickets for
    // 2 s, while rep0 computes.
    let t0 = Instant::now();
    let mut samples = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        assert!(!held.is_finished(), "rep0 ended before the watch did");
        let s = c.status();
        assert_eq!(s.tickets(), 2, "tickets lent for sessions only their class's cap holds back");
        samples += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(samples >= 10, "only {samples} readings in 2 s");
    held.join_ok(Duration::from_secs(30));
    for r in waiting {
        r.join_ok(Duration::from_secs(10));
    }
    c.assert_quiet();
}

#[test]
fn a_capped_class_never_passes_its_cap_and_others_get_in() {
    let c = classes_cluster("reports (max_active = 2)", &[("pg_gatekeeper.max_active", "8")]);
    let stop = Arc::new(AtomicBool::new(false));
    let reports: Vec<Running> =
        (0..20).map(|k| c.session_as("rep", &format!("rep{k}")).looping("SELECT pg_sleep(0.3)", &stop)).collect();
    wait_until("reports queue behind their cap", Duration::from_secs(5), || class_i64(&c, "reports", "queued") >= 10);
    let mut most = 0;
    let t0 = Instant::now();
    let mut short = Duration::ZERO;
    while t0.elapsed() < Duration::from_secs(3) {
        most = most.max(class_i64(&c, "reports", "admitted"));
        if short == Duration::ZERO && t0.elapsed() > Duration::from_secs(1) {
            short = c.app("oltp").spawn("SELECT 1").join_ok(Duration::from_secs(5)).elapsed;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for r in reports {
        r.join_ok(Duration::from_secs(10));
    }
    assert!(most <= 2, "{most} reports admitted at once under a cap of 2");
    assert!(most == 2, "the cap was never reached: the test did not load the class");
    // In turn behind the queued reports (about 18, two at a time, 0.3 s
    // each) it would wait over 2 s; 1 s leaves room for a loaded machine's
    // pauses.
    assert!(short <= Duration::from_secs(1), "a default-class session waited {short:?}");
    c.assert_quiet();
}

#[test]
fn weights_split_admissions_between_saturated_classes() {
    let c = classes_cluster(
        "reports (weight = 1), oltp (weight = 3)",
        &[("pg_gatekeeper.max_active", "4"), ("pg_gatekeeper.max_tickets", "4")],
    );
    c.admin_exec("CREATE ROLE ol LOGIN; ALTER ROLE ol SET pg_gatekeeper.class = 'oltp';");
    let stop = Arc::new(AtomicBool::new(false));
    let mut all = vec![];
    for (role, n) in [("rep", 12), ("ol", 12)] {
        for k in 0..n {
            let name = format!("{role}{k}");
            all.push(c.session_as(role, &name).looping("SELECT pg_sleep(0.02)", &stop));
        }
    }
    wait_until("both classes queue", Duration::from_secs(5), || {
        class_i64(&c, "reports", "queued") > 0 && class_i64(&c, "oltp", "queued") > 0
    });
    let before = (class_i64(&c, "reports", "admitted_total"), class_i64(&c, "oltp", "admitted_total"));
    std::thread::sleep(Duration::from_secs(10));
    let after = (class_i64(&c, "reports", "admitted_total"), class_i64(&c, "oltp", "admitted_total"));
    stop.store(true, Ordering::Relaxed);
    for r in all {
        r.join_ok(Duration::from_secs(10));
    }
    let (rep, ol) = ((after.0 - before.0) as f64, (after.1 - before.1) as f64);
    let ratio = ol / rep;
    assert!((3.0 * 0.85..=3.0 * 1.15).contains(&ratio), "oltp:reports = {ol}:{rep} = {ratio:.2}, want 3 ± 15 %");
    c.assert_quiet();
}

#[test]
fn a_reserve_lets_its_class_in_while_another_saturates_the_gate() {
    let c = classes_cluster(
        "reports (reserve = 2)",
        &[("pg_gatekeeper.max_active", "8"), ("pg_gatekeeper.max_tickets", "8")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<Running> =
        (0..30).map(|k| c.app(&format!("load{k}")).looping("SELECT pg_sleep(0.2)", &stop)).collect();
    wait_until("the default class saturates the gate", Duration::from_secs(5), || c.status().queued() >= 15);
    let mut worst = Duration::ZERO;
    for k in 0..10 {
        let name = format!("rep{k}");
        let s = c.session_as("rep", &name);
        worst = worst.max(s.spawn("SELECT 1").join_ok(Duration::from_secs(5)).elapsed);
    }
    stop.store(true, Ordering::Relaxed);
    for r in load {
        r.join_ok(Duration::from_secs(10));
    }
    // A reserve wins the next place freed: at most one holder's run (0.2 s)
    // and a wake-up. In turn behind the ~22 queued it would wait ~0.55 s.
    assert!(worst <= Duration::from_millis(350), "a reserved class's session waited {worst:?}");
    c.assert_quiet();
}

#[test]
fn a_class_timeout_and_queue_limit_name_the_class() {
    let c = classes_cluster(
        "reports (max_active = 1, queue_timeout = 3s, max_queued = 1)",
        // The holder idles: the progress guarantee must not admit the
        // waiter before its timeout.
        &[("pg_gatekeeper.max_active", "4"), ("pg_gatekeeper.progress_timeout", "1h")],
    );
    let mut holder = c.session_as("rep", "holder");
    holder.ok("BEGIN; SELECT 1");
    // Connected first: the waiter leaves the queue 3 s after it parks, time
    // enough for the third to be turned away meanwhile.
    let mut third = c.session_as("rep", "third");
    let waiter = c.session_as("rep", "waiter").spawn("SELECT 2");
    wait_until("the waiter is queued", Duration::from_secs(5), || class_i64(&c, "reports", "queued") == 1);
    let full = third.exec("SELECT 3");
    assert_eq!(sqlstate(&full).as_deref(), Some("53400"), "{full:?}");
    let detail = full.unwrap_err().as_db_error().and_then(|e| e.detail().map(str::to_string)).unwrap_or_default();
    assert!(detail.contains("class \"reports\""), "53400 DETAIL: {detail}");
    let timed_out = waiter.join(Duration::from_secs(10));
    assert_eq!(sqlstate(&timed_out.result).as_deref(), Some("53000"), "{:?}", timed_out.result);
    let e = timed_out.result.unwrap_err();
    let detail = e.as_db_error().and_then(|e| e.detail()).unwrap_or_default().to_string();
    assert!(detail.contains("queue_timeout of class \"reports\" = 3000 ms"), "53000 DETAIL: {detail}");
    holder.ok("COMMIT");
    c.assert_quiet();
}
