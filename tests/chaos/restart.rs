//! Crash and restart: `pg_ctl restart -m fast` and `DROP EXTENSION` /
//! `CREATE EXTENSION` with parked and running sessions.

use std::time::{Duration, Instant};

use crate::common::{count_lines, crash_lines, sqlstate, wait_until, Cluster};

const TWO_TICKETS: &[(&str, &str)] = &[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.max_tickets", "2")];

/// `pg_ctl restart -m fast` while one session runs, one idles in its
/// transaction and two are parked (one at a block's first statement): the
/// shutdown does not wait for the parked sessions, the server comes back
/// with a clean gate, the worker returns, and parking works again.
#[test]
fn pg_ctl_restart_fast_with_parked_sessions() {
    let c = Cluster::start(TWO_TICKETS);
    let runner = c.app("running").spawn("SELECT pg_sleep(60)");
    c.wait_for_event("running", "PgSleep");
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2").spawn("BEGIN; SELECT 2; COMMIT");
    c.wait_queued("w2");
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (2, 2), "{:?}", s.0);

    let log = c.log_path();
    let t0 = Instant::now();
    let out = c.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60", "-l", log.to_str().unwrap()]);
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "pg_ctl restart failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.log_tail(30)
    );
    assert!(took < Duration::from_secs(15), "the fast restart took {took:?}");

    // Every old session was ended by the shutdown.
    for r in [runner, w1, w2] {
        let name = r.name.clone();
        let d = r.join(Duration::from_secs(10));
        assert!(d.result.is_err(), "{name} survived the restart");
    }
    assert!(h.exec("SELECT 1").is_err(), "the holder survived the restart");
    c.reconnect_admin(Duration::from_secs(20));

    // A clean gate: the shared memory was created anew.
    let s = c.status();
    assert_eq!((s.admitted(), s.queued(), s.int("admitted_total"), s.tickets()), (0, 0, 0, 2), "{:?}", s.0);
    wait_until("the worker is back", Duration::from_secs(10), || c.worker_count() == 1);

    // The shutdown was clean (a shutdown checkpoint, no crash recovery).
    let text = c.log_text();
    assert_eq!(count_lines(&text, "database system is shut down"), 1, "{}", c.log_tail(40));
    assert_eq!(count_lines(&text, "was not properly shut down"), 0, "{}", c.log_tail(40));
    let crashes = crash_lines(&text);
    assert!(crashes.is_empty(), "{crashes:#?}");

    // Parking and hand-off work again.
    let mut h1 = c.app("holder1");
    h1.ok("BEGIN");
    h1.ok("SELECT 1");
    let mut h2 = c.app("holder2");
    h2.ok("BEGIN");
    h2.ok("SELECT 1");
    let w3 = c.app("w3").spawn("SELECT 3");
    c.wait_queued("w3");
    h1.ok("COMMIT");
    w3.join_ok(Duration::from_secs(10));
    h2.ok("COMMIT");
    let s = c.status();
    assert_eq!((s.int("admitted_total"), s.int("waited_total")), (3, 1), "{:?}", s.0);
    c.assert_quiet();
}

/// The gate lives in shared memory, independent of the SQL objects:
/// `DROP EXTENSION` while sessions run, idle in a transaction and are
/// parked (in a block and in an implicit transaction) breaks nothing;
/// parked sessions are still admitted in order and new ones still park; after `CREATE
/// EXTENSION` the views show the live state and the totals kept counting.
#[test]
fn drop_and_create_extension_while_sessions_are_parked() {
    let c = Cluster::start(TWO_TICKETS);
    c.admin_exec("CREATE TABLE arrivals (id serial, name text); GRANT ALL ON arrivals, arrivals_id_seq TO app;");
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    let runner = c.app("running").spawn("SELECT pg_sleep(1.5)");
    c.wait_for_event("running", "PgSleep");
    let w1 = c.app("w1").spawn("BEGIN; INSERT INTO arrivals (name) VALUES ('w1')");
    assert_eq!(c.wait_queued("w1"), 1);
    let w2 = c.app("w2").spawn("INSERT INTO arrivals (name) VALUES ('w2')");
    assert_eq!(c.wait_queued("w2"), 2);
    let before = c.status();
    assert_eq!((before.admitted(), before.queued()), (2, 2), "{:?}", before.0);

    let t0 = Instant::now();
    c.admin_exec("DROP EXTENSION pg_gatekeeper");
    assert!(t0.elapsed() < Duration::from_secs(10), "DROP EXTENSION took {:?}", t0.elapsed());
    let e = c.admin_try("SELECT * FROM gatekeeper.status");
    assert_eq!(sqlstate(&e).as_deref(), Some("42P01"), "{e:?}");
    // Still parked, in the Extension wait.
    for name in ["w1", "w2"] {
        assert_eq!(c.wait_event(name), (Some("Extension".into()), Some("Extension".into())), "{name}");
    }

    // The runner ends: its place goes to the head of the queue (w1), which
    // then idles in its transaction; w2 stays parked.
    runner.join_ok(Duration::from_secs(10));
    let mut w1 = w1.join_ok(Duration::from_secs(10)).session;
    assert_eq!(c.activity_state("w1").as_deref(), Some("idle in transaction"));
    assert_eq!(c.wait_event("w2").0.as_deref(), Some("Extension"), "w2 still parked");
    // A newcomer parks too, without the SQL objects.
    let w3 = c.app("w3").spawn("INSERT INTO arrivals (name) VALUES ('w3')");
    c.wait_for_event("w3", "Extension");

    c.admin_exec("CREATE EXTENSION pg_gatekeeper");
    // The views work again and show the live state; the totals survived.
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (2, 2), "{:?}", s.0);
    assert!(s.int("admitted_total") > before.int("admitted_total"), "{:?}", s.0);
    assert_eq!(c.session("w2").unwrap().queue_position, Some(1));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(2));
    assert_eq!(c.session("holder").unwrap().state, "idle in transaction");
    assert!(c.admin_i64("SELECT count(*) FROM gatekeeper.history") > 0, "history survived");
    c.admin_exec("SELECT gatekeeper.reset()");
    assert_eq!(c.status().int("admitted_total"), 0);

    h.ok("COMMIT");
    // The order of the ids in `arrivals` shows the order of admission.
    w2.join_ok(Duration::from_secs(10));
    w3.join_ok(Duration::from_secs(10));
    w1.ok("INSERT INTO arrivals (name) VALUES ('w1 again'); COMMIT");
    let crashes = crash_lines(&c.log_text());
    assert!(crashes.is_empty(), "{crashes:#?}");
    let names: Vec<String> =
        c.admin_query("SELECT name FROM arrivals ORDER BY id", &[]).iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["w1", "w2", "w3", "w1 again"]);
    let s = c.status();
    assert_eq!((s.int("admitted_total"), s.int("waited_total")), (2, 2), "{:?}", s.0);
    c.assert_quiet();
}
