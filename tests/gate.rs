//! Admission through the gate (docs/DESIGN.md §4, §5), with real sessions.
//!
//! Most tests run with one ticket and lending switched off
//! (`max_active = 1`, `max_tickets = 1`): a holder that opened a transaction
//! keeps the only place even while it idles, so the tests control exactly
//! when the gate is full. Gated sessions are role `app`; the observer is the
//! exempt superuser. Every test ends with `assert_quiet`.

mod common;

use std::time::{Duration, Instant};

use common::{assert_stays_queued, sqlstate, wait_until, Cluster, Running, Session, Wire, WireReply};

/// One place, and idle holders never lend it; the progress guarantee out
/// of the way (the holders here idle on purpose, which it would take for a
/// stuck queue and move after a second, hiding a lost hand-off).
const ONE_TICKET: &[(&str, &str)] =
    &[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1"), ("pg_gatekeeper.progress_timeout", "1h")];

const SHORT: Duration = Duration::from_millis(300);
const PROMPT: Duration = Duration::from_secs(2);

fn conf<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    ONE_TICKET.iter().chain(extra).copied().collect()
}

/// A gated session that opens a transaction and idles in it, holding the
/// only place (admission is taken at the block's first statement).
fn holder(c: &Cluster) -> Session {
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    assert_eq!(c.session("holder").unwrap().state, "idle in transaction");
    h
}

fn names(c: &Cluster, sql: &str) -> Vec<String> {
    c.admin_query(sql, &[]).iter().map(|r| r.get(0)).collect()
}

// -- 1. FIFO ------------------------------------------------------------------

/// Park A, B and C in that order behind a holder, let `before` run, end the
/// holder's transaction and return the order in which the three ran. Each
/// insert runs, and takes its id and its time, only once admitted: the two
/// orders must agree.
fn served_order(c: &Cluster, before: impl FnOnce(&Cluster)) -> Vec<String> {
    c.admin_exec(
        "CREATE TABLE arrivals (id serial, name text, at timestamptz);
         GRANT ALL ON arrivals, arrivals_id_seq TO app;",
    );
    let mut h = holder(c);
    // Each joins the tail of the queue.
    let mut parked = vec![];
    for (i, name) in ["A", "B", "C"].into_iter().enumerate() {
        let sql = format!("INSERT INTO arrivals (name, at) VALUES ('{name}', clock_timestamp())");
        parked.push(c.app(name).spawn(&sql));
        assert_eq!(c.wait_queued(name), i as i32 + 1, "{name} joins at the tail");
    }
    before(c);
    h.ok("COMMIT");
    for r in parked {
        r.join_ok(PROMPT);
    }
    let order = names(c, "SELECT name FROM arrivals ORDER BY id");
    assert_eq!(names(c, "SELECT name FROM arrivals ORDER BY at"), order);
    order
}

#[test]
fn parked_sessions_are_admitted_in_arrival_order() {
    let c = Cluster::start(ONE_TICKET);
    let order = served_order(&c, |c| {
        let positions: Vec<_> = ["A", "B", "C"].iter().map(|n| c.session(n).unwrap().queue_position).collect();
        assert_eq!(positions, [Some(1), Some(2), Some(3)]);
    });
    assert_eq!(order, ["A", "B", "C"]);
    assert_eq!(c.status().int("waited_total"), 3);
    c.assert_quiet();
}

// -- 1b. The warm hand-off ------------------------------------------------------

#[test]
fn the_warm_hand_off_serves_the_newest_waiter_first() {
    // A bound no wait here comes near: each freed place goes to the newest.
    let c = Cluster::start(&conf(&[("pg_gatekeeper.warm_hand_off", "1h")]));
    assert_eq!(served_order(&c, |_| {}), ["C", "B", "A"]);
    assert_eq!(c.status().int("waited_total"), 3);
    c.assert_quiet();
}

#[test]
fn the_warm_hand_off_serves_the_oldest_once_it_has_waited_the_bound() {
    let c = Cluster::start(&conf(&[("pg_gatekeeper.warm_hand_off", "200ms")]));
    let order = served_order(&c, |c| {
        // Until even the newest has waited past the bound.
        wait_until("C has waited 300 ms", PROMPT, || {
            let w = c.admin_query("SELECT wait_ms FROM gatekeeper.sessions WHERE application_name = 'C'", &[]);
            w.first().and_then(|r| r.get::<_, Option<f64>>(0)).is_some_and(|ms| ms >= 300.0)
        });
    });
    assert_eq!(order, ["A", "B", "C"]);
    c.assert_quiet();
}

// -- 2. Hand-off at transaction end ---------------------------------------------

/// The holder ends its transaction with `end`; the parked session must be
/// admitted then, and not before.
fn hand_off(end: impl FnOnce(&Cluster, &mut Session, &Running)) {
    let c = Cluster::start(ONE_TICKET);
    let mut h = holder(&c);
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");
    assert_stays_queued(&c, &w, SHORT);
    end(&c, &mut h, &w);
    w.join_ok(PROMPT);
    h.ok("SELECT 1"); // the holder's session is fine, and no longer admitted
    c.assert_quiet();
}

#[test]
fn commit_hands_the_place_to_the_queue() {
    hand_off(|_, h, _| h.ok("COMMIT"));
}

#[test]
fn rollback_hands_the_place_to_the_queue() {
    hand_off(|_, h, _| h.ok("ROLLBACK"));
}

#[test]
fn an_error_in_the_block_hands_the_place_over_before_rollback() {
    hand_off(|c, h, w| {
        let r = h.exec("SELECT 1/0");
        assert_eq!(sqlstate(&r).as_deref(), Some("22012"));
        // The waiter gets in while the holder still sits in its aborted block.
        common::wait_until("the waiter's statement returns after the holder's error", PROMPT, || w.is_finished());
        assert_eq!(c.activity_state("holder").as_deref(), Some("idle in transaction (aborted)"));
        assert_eq!(c.session("holder").unwrap().state, "idle");
        h.ok("ROLLBACK");
    });
}

// -- 3, 4. queue_timeout --------------------------------------------------------

#[test]
fn queue_timeout_fails_a_parked_statement_with_53000_and_the_session_survives() {
    let c = Cluster::start(&conf(&[("pg_gatekeeper.queue_timeout", "500ms")]));
    let mut h = holder(&c);

    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");
    let d = w.join(Duration::from_secs(5));
    assert_eq!(sqlstate(&d.result).as_deref(), Some("53000"), "{:?}", d.result);
    let msg = d.result.as_ref().unwrap_err().as_db_error().unwrap().message().to_string();
    assert!(msg.contains("pg_gatekeeper"), "{msg}");
    assert!(
        d.elapsed >= Duration::from_millis(480) && d.elapsed < Duration::from_millis(3000),
        "timed out after {:?}, expected about 500 ms",
        d.elapsed
    );
    let s = c.status();
    assert_eq!((s.int("queue_timeouts_total"), s.queued(), s.admitted()), (1, 0, 1));

    // The session is still usable once there is room.
    h.ok("COMMIT");
    let mut w = d.session;
    w.ok("SELECT 1");
    c.assert_quiet();
}

// -- 5. max_queued --------------------------------------------------------------

#[test]
fn a_full_queue_rejects_newcomers_at_once_with_53400() {
    // queue_timeout is only a safety net: were the newcomer parked, it would
    // fail with 53000 after 5 s instead of hanging the test.
    let c = Cluster::start(&conf(&[("pg_gatekeeper.max_queued", "2"), ("pg_gatekeeper.queue_timeout", "5s")]));
    let mut h = holder(&c);
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2").spawn("SELECT 1");
    c.wait_queued("w2");

    let mut w3 = c.app("w3");
    let t0 = Instant::now();
    let r = w3.exec("SELECT 1");
    let took = t0.elapsed();
    assert_eq!(sqlstate(&r).as_deref(), Some("53400"), "{r:?}");
    // Parked, it would fail only at its 5 s queue_timeout.
    assert!(took < Duration::from_secs(2), "rejection took {took:?}");
    let msg = r.as_ref().unwrap_err().as_db_error().unwrap().message().to_string();
    assert!(msg.contains("pg_gatekeeper"), "{msg}");
    let s = c.status();
    assert_eq!((s.int("rejected_total"), s.queued(), s.int("queue_timeouts_total")), (1, 2, 0));

    h.ok("COMMIT");
    w1.join_ok(PROMPT);
    w2.join_ok(PROMPT);
    w3.ok("SELECT 1");
    c.assert_quiet();
}

// -- 6. Cancel and terminate while parked ---------------------------------------

#[test]
fn cancelling_parked_sessions_keeps_the_counts_exact() {
    let c = Cluster::start(ONE_TICKET);
    let mut h = holder(&c);
    let before = c.status();
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2");
    let w2_cancel = w2.cancel_token();
    let w2 = w2.spawn("SELECT 1");
    c.wait_queued("w2");
    let w3 = c.app("w3").spawn("SELECT 1");
    c.wait_queued("w3");

    // Cancel w2 (middle of the queue) through the protocol's cancel request.
    w2_cancel.cancel_query(postgres::NoTls).unwrap();
    let d2 = w2.join(PROMPT);
    assert_eq!(sqlstate(&d2.result).as_deref(), Some("57014"), "{:?}", d2.result);
    let s = c.status();
    assert_eq!((s.queued(), s.int("queue_cancels_total")), (2, 1));
    assert_eq!(c.session("w1").unwrap().queue_position, Some(1));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(2));

    // Cancel w1 (the head) with pg_cancel_backend.
    let pid = c.pid_of("w1");
    c.admin_query("SELECT pg_cancel_backend($1)", &[&pid]);
    let d1 = w1.join(PROMPT);
    assert_eq!(sqlstate(&d1.result).as_deref(), Some("57014"), "{:?}", d1.result);
    let s = c.status();
    assert_eq!((s.queued(), s.int("queue_cancels_total")), (1, 2));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(1));

    // The one left in the queue still gets the place.
    h.ok("COMMIT");
    w3.join_ok(PROMPT);
    let s = c.status();
    assert_eq!(s.int("admitted_total") - before.int("admitted_total"), 1, "only w3 was admitted");
    assert_eq!(s.int("waited_total") - before.int("waited_total"), 1);
    // Cancelled sessions are usable.
    let (mut s1, mut s2) = (d1.session, d2.session);
    s1.ok("SELECT 1");
    s2.ok("SELECT 1");
    c.assert_quiet();
}

#[test]
fn terminating_parked_sessions_keeps_the_counts_exact() {
    let c = Cluster::start(ONE_TICKET);
    let mut h = holder(&c);
    let mut parked = vec![];
    for name in ["w1", "w2", "w3"] {
        parked.push(c.app(name).spawn("SELECT 1"));
        c.wait_queued(name);
    }
    let w3 = parked.pop().unwrap();
    let w2 = parked.pop().unwrap();
    let w1 = parked.pop().unwrap();

    // Terminate w2, in the middle of the queue: its backend exits (FATAL).
    let pid = c.pid_of("w2");
    c.admin_query("SELECT pg_terminate_backend($1)", &[&pid]);
    let d2 = w2.join(PROMPT);
    assert!(d2.result.is_err(), "a terminated session's statement fails");
    common::wait_until("w2's backend is gone", PROMPT, || c.session("w2").is_none());
    let s = c.status();
    assert_eq!((s.queued(), s.int("queue_exits_total"), s.admitted()), (2, 1, 1));
    assert_eq!(c.session("w1").unwrap().queue_position, Some(1));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(2));

    // Terminate the head too, then let the last one in.
    let pid = c.pid_of("w1");
    c.admin_query("SELECT pg_terminate_backend($1)", &[&pid]);
    assert!(w1.join(PROMPT).result.is_err());
    common::wait_until("w1's backend is gone", PROMPT, || c.session("w1").is_none());
    let s = c.status();
    assert_eq!((s.queued(), s.int("queue_exits_total")), (1, 2));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(1));

    h.ok("COMMIT");
    w3.join_ok(PROMPT);
    c.assert_quiet();
}

// -- 7. Exempt superuser --------------------------------------------------------

#[test]
fn an_exempt_superuser_is_never_parked() {
    let c = Cluster::start(ONE_TICKET);
    c.admin_exec("CREATE TABLE t (id int); INSERT INTO t VALUES (1);");
    let mut h = holder(&c);
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");

    // The gate is full and someone is queued; a superuser walks past both.
    let su = c.superuser("su");
    let d = su
        .spawn("SELECT count(*) FROM t; BEGIN; UPDATE t SET id = id + 1; SELECT 1; COMMIT; INSERT INTO t VALUES (2);")
        .join_ok(PROMPT);
    assert!(d.elapsed < Duration::from_secs(1), "the superuser took {:?}", d.elapsed);
    assert_eq!(c.session("su").unwrap().state, "exempt");
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (1, 1), "the superuser took no place");
    assert_eq!(c.session("waiter").unwrap().queue_position, Some(1));

    h.ok("COMMIT");
    w.join_ok(PROMPT);
    c.assert_quiet();
}

/// A role made superuser, or granted an exempt role, is exempt in its open
/// sessions from the next reload, and gated again once that is undone: any
/// reload decides exemption again, not only one that changes the exemption
/// settings (before, such a session kept its first verdict until it
/// reconnected).
#[test]
fn exemption_follows_role_changes_at_the_next_reload() {
    // No exemption setting in a configuration file: a reload assigns those
    // it finds there, and an assignment decided exemption again before.
    let c = Cluster::start(ONE_TICKET);
    c.admin_exec("CREATE ROLE boss LOGIN; CREATE ROLE ops NOLOGIN");
    let mut boss = c.session_as("boss", "boss");
    boss.ok("SELECT 1");
    assert_eq!(c.session("boss").map(|s| s.state).as_deref(), Some("idle"));
    let mut state_after_reload = |change: &str, want: &str| {
        // boss's own load time: each backend stamps its own reads.
        let before: String = boss.client.query_one("SELECT pg_conf_load_time()::text", &[]).unwrap().get(0);
        c.admin_exec(&format!("{change}; SELECT pg_reload_conf()"));
        wait_until(&format!("after {change} and a reload, boss shows {want}"), Duration::from_secs(5), || {
            let loaded: String = boss.client.query_one("SELECT pg_conf_load_time()::text", &[]).unwrap().get(0);
            loaded != before && c.session("boss").map(|s| s.state).as_deref() == Some(want)
        });
    };
    state_after_reload("ALTER ROLE boss SUPERUSER", "exempt");
    state_after_reload("ALTER ROLE boss NOSUPERUSER", "idle");
    // An exempt role's grant and revoke. Set by ALTER SYSTEM, exempt_roles
    // is in a file, which every reload assigns: this half passed before
    // the fix too, and checks the membership lookups, not the fix.
    c.set_conf(&[("pg_gatekeeper.exempt_roles", "ops")]);
    state_after_reload("GRANT ops TO boss", "exempt");
    state_after_reload("REVOKE ops FROM boss", "idle");
    drop(boss);
    c.assert_quiet();
}

/// `pg_gatekeeper.enabled` per role and per database, as README shows it:
/// a role or database set off walks past a full gate; with the server-wide
/// setting off, a role set on is still gated.
#[test]
fn enabled_per_role_and_per_database() {
    let c = Cluster::start(ONE_TICKET);
    c.admin_exec("CREATE ROLE batch LOGIN; ALTER ROLE batch SET pg_gatekeeper.enabled = off;");
    c.admin_exec("CREATE DATABASE offdb");
    c.admin_exec("ALTER DATABASE offdb SET pg_gatekeeper.enabled = off");
    let mut h = holder(&c);
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");
    // The gate is full and someone waits; the role and the database set off
    // walk past both and take no place.
    c.session_as("batch", "batch").spawn("BEGIN; SELECT 1; COMMIT").join_ok(PROMPT);
    let mut off = postgres::Config::new()
        .host_path(&c.dir)
        .port(c.port)
        .user("app")
        .dbname("offdb")
        .application_name("offdb")
        // Fail, not hang, if a regression gates it behind the full gate.
        .options("-c statement_timeout=5000")
        .connect(postgres::NoTls)
        .expect("connect to offdb");
    off.batch_execute("BEGIN; SELECT 1; COMMIT").expect("offdb runs");
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (1, 1), "{:?}", s.0);
    h.ok("COMMIT");
    w.join_ok(PROMPT);
    drop((off, h));
    wait_until("the first holder has gone", Duration::from_secs(5), || c.session("holder").is_none());

    // Off for the server, on for one role: that role is still gated.
    c.admin_exec("ALTER ROLE app SET pg_gatekeeper.enabled = on");
    c.set_conf(&[("pg_gatekeeper.enabled", "off")]);
    let mut h = holder(&c);
    let w = c.app("waiter2").spawn("SELECT 1");
    c.wait_queued("waiter2");
    assert_stays_queued(&c, &w, SHORT);
    h.ok("COMMIT");
    w.join_ok(PROMPT);
    c.assert_quiet();
}

// -- 8. Extended protocol and prepared statements -------------------------------

#[test]
fn extended_protocol_statements_are_gated() {
    let c = Cluster::start(ONE_TICKET);
    let mut h = holder(&c);
    // `query` with parameters goes through Parse/Bind/Execute.
    let w = c.app("waiter").spawn_with(|client| {
        let rows = client.query("SELECT $1::int + 1", &[&41i32])?;
        assert_eq!(rows[0].get::<_, i32>(0), 42);
        Ok(())
    });
    c.wait_queued("waiter");
    assert_stays_queued(&c, &w, SHORT);
    h.ok("COMMIT");
    w.join_ok(PROMPT);
    c.assert_quiet();
}

#[test]
fn every_execution_of_a_prepared_statement_is_gated() {
    let c = Cluster::start(ONE_TICKET);
    let mut w = c.app("waiter");
    // Prepared once, while the gate is open.
    let stmt = w.client.prepare("SELECT $1::int * 2").unwrap();
    // Later executions send only Bind/Execute. From the sixth on the plan
    // cache uses a generic plan and only ExecutorStart fires: still gated.
    for round in 1..=7i32 {
        let mut h = holder(&c);
        let st = stmt.clone();
        let r = w.spawn_with(move |client| {
            let rows = client.query(&st, &[&round])?;
            assert_eq!(rows[0].get::<_, i32>(0), 2 * round);
            Ok(())
        });
        c.wait_queued("waiter");
        h.ok("COMMIT");
        w = r.join_ok(PROMPT).session;
        drop(h);
        common::wait_until("the holder has gone", PROMPT, || c.session("holder").is_none());
    }
    c.assert_quiet();
}

// -- 9. Statements that never wait ------------------------------------------------

#[test]
fn set_show_and_monitoring_queries_never_wait() {
    // Were a probe parked, it would fail with 53000 rather than hang.
    let c = Cluster::start(&conf(&[("pg_gatekeeper.queue_timeout", "5s")]));
    let mut h = holder(&c);
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");

    let mut p = c.app("probe");
    for sql in ["SET work_mem = '8MB'", "SHOW work_mem", "RESET work_mem"] {
        let t0 = Instant::now();
        p.ok(sql);
        assert!(t0.elapsed() < Duration::from_secs(2), "{sql} took {:?}", t0.elapsed());
    }
    // A member of pg_monitor, neither superuser nor exempt, reads the views
    // of a full gate at once, through either protocol.
    c.admin_exec("CREATE ROLE watcher LOGIN IN ROLE pg_monitor");
    let mut m = c.session_as("watcher", "watcher");
    for sql in ["SELECT queued FROM gatekeeper.status", "SELECT * FROM gatekeeper.sessions"] {
        let t0 = Instant::now();
        m.ok(sql);
        assert!(t0.elapsed() < Duration::from_secs(2), "{sql} took {:?}", t0.elapsed());
    }
    let queued: i32 = m.client.query_one("SELECT queued FROM gatekeeper.status", &[]).unwrap().get(0);
    assert_eq!(queued, 1);
    assert_eq!(c.session("probe").unwrap().state, "idle");

    // Control: an ordinary statement from the probe does park, and so does
    // its read of a view: the free path is pg_monitor's.
    let p = p.spawn("SELECT queued FROM gatekeeper.status");
    assert_eq!(c.wait_queued("probe"), 2);

    h.ok("COMMIT");
    w.join_ok(PROMPT);
    p.join_ok(PROMPT);
    c.assert_quiet();
}

#[test]
fn a_monitor_ended_while_its_free_path_lookup_waits_exits_cleanly() {
    // The free path looks the extension's members up in pg_depend. A backend
    // terminated while that lookup waits on a lock ends through FATAL, which
    // unwinds nothing: the transaction callback on its way out must still
    // work, and PostgreSQL's own cleanup after it must release its locks.
    let c = Cluster::start(&conf(&[]));
    c.admin_exec("CREATE ROLE watcher LOGIN IN ROLE pg_monitor");
    let m = c.session_as("watcher", "watcher");
    // Before the lock: reading the gate's own views looks members up too.
    let pid = c.pid_of("watcher");
    let mut blocker = c.superuser("blocker");
    blocker.ok("BEGIN; LOCK TABLE pg_catalog.pg_depend IN ACCESS EXCLUSIVE MODE");
    let m = m.spawn("SELECT queued FROM gatekeeper.status");
    c.wait_for_event("watcher", "relation");
    c.admin_query("SELECT pg_terminate_backend($1)", &[&pid]);
    assert!(m.join(PROMPT).result.is_err(), "the terminated statement failed");
    blocker.ok("COMMIT");
    wait_until("the terminated backend is gone", PROMPT, || {
        c.admin_i64(&format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}")) == 0
    });
    // Its lock on the view, taken before the lookup, went with it.
    c.admin_exec(
        "SET lock_timeout = '2s'; BEGIN; LOCK TABLE gatekeeper.status IN ACCESS EXCLUSIVE MODE; ROLLBACK; \
         RESET lock_timeout",
    );
    let log = c.log_text();
    assert_eq!(common::count_lines(&log, "borrowed"), 0, "the exit path failed:\n{}", c.log_tail(30));
    assert!(common::crash_lines(&log).is_empty(), "{:?}", common::crash_lines(&log));
    c.assert_quiet();
}

// -- 10. "Done when": 10 sessions, limit 2 -----------------------------------------

#[test]
fn ten_sessions_never_run_more_than_two_sleeps_at_once() {
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2")]);
    const ROUNDS: usize = 3;
    // Each statement is its own round trip, so every holder is briefly idle
    // in transaction between its sleep and COMMIT (lending must not admit it).
    let running: Vec<_> = (0..10)
        .map(|i| {
            c.app(&format!("s{i}")).spawn_with(|client| {
                for _ in 0..ROUNDS {
                    client.batch_execute("BEGIN")?;
                    client.batch_execute("SELECT pg_sleep(0.3)")?;
                    client.batch_execute("COMMIT")?;
                }
                Ok(())
            })
        })
        .collect();

    let (mut max_sleeping, mut saw_queue) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running.iter().all(|r| r.is_finished()) {
        assert!(Instant::now() < deadline, "the sessions did not finish");
        let sleeping = c.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'");
        max_sleeping = max_sleeping.max(sleeping);
        saw_queue |= c.status().queued() > 0;
        std::thread::sleep(Duration::from_millis(5));
    }
    for r in running {
        r.join_ok(PROMPT);
    }
    assert!(max_sleeping <= 2, "{max_sleeping} sessions slept at once, limit 2");
    assert_eq!(max_sleeping, 2, "the limit was never reached: the test proves nothing");
    assert!(saw_queue, "nobody was ever queued");
    assert_eq!(c.status().int("admitted_total"), 10 * ROUNDS as i64);
    c.assert_quiet();
}

// -- 11. The runbook: the gate steps aside for the whole cluster at once ------------------

#[test]
fn the_runbook_makes_the_gate_step_aside_at_once() {
    runbook(true);
}

/// Without the worker, the reload reaches the gate through the DBA's own
/// session (exempt, and the only one left that runs): its check that
/// nobody is queued applies the runbook's limit.
#[test]
fn the_runbook_makes_the_gate_step_aside_without_the_worker() {
    runbook(false);
}

fn runbook(worker: bool) {
    // Two places: one held in class default, one in a class capped at one.
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.max_tickets", "2"),
        ("pg_gatekeeper.classes", "reporting (max_active = 1)"),
        // The holders idle: the progress guarantee must not let the
        // parked sessions in before the runbook does.
        ("pg_gatekeeper.progress_timeout", "1h"),
        ("max_worker_processes", if worker { "8" } else { "0" }),
    ]);
    if worker {
        wait_until("the worker runs", Duration::from_secs(5), || c.worker_count() == 1);
    } else {
        assert_eq!(c.worker_count(), 0, "a worker runs");
    }
    let mut h = holder(&c);
    c.admin_exec("CREATE ROLE rep LOGIN; ALTER ROLE rep SET pg_gatekeeper.class = 'reporting'");
    let reporting = |name: &str| c.session_as("rep", name);
    let mut r = reporting("reporter");
    r.ok("BEGIN; SELECT 1");
    let mut parked: Vec<Running> = (0..2).map(|k| c.app(&format!("p{k}")).spawn("SELECT 1")).collect();
    parked.extend((0..2).map(|k| reporting(&format!("r{k}")).spawn("SELECT 1")));
    wait_until("four sessions are parked", Duration::from_secs(5), || c.status().queued() == 4);
    // The README's runbook, as written there. Without its classes line the
    // reporting sessions would stay parked behind their class's cap.
    for sql in [
        "ALTER SYSTEM SET pg_gatekeeper.enabled = off",
        "ALTER SYSTEM SET pg_gatekeeper.max_active = 262143",
        "ALTER SYSTEM SET pg_gatekeeper.max_tickets = 0",
        "ALTER SYSTEM SET pg_gatekeeper.classes = ''",
        "SELECT pg_reload_conf()",
    ] {
        c.admin_exec(sql);
    }
    // The runbook's check.
    wait_until("nobody is queued", PROMPT, || c.status().queued() == 0);
    for p in parked {
        p.join_ok(PROMPT);
    }
    assert_eq!(c.status().queued(), 0);
    // New transactions skip the gate: a fresh session runs while the
    // holders still hold their places, and takes no admission.
    let mut n = c.app("new");
    wait_until("a new session's transaction takes no admission", Duration::from_secs(5), || {
        n.ok("BEGIN; SELECT 1");
        let admitted = c.status().admitted();
        n.ok("COMMIT");
        admitted == 2
    });
    // The views show it ungated (exempt), not as an idle gated session.
    n.ok("BEGIN; SELECT 1");
    assert_eq!(c.session("new").map(|s| s.state).as_deref(), Some("exempt"));
    n.ok("COMMIT");
    h.ok("COMMIT");
    r.ok("COMMIT");
    c.assert_quiet();
}

// -- 12. Work that no statement hook sees ---------------------------------------------

/// The first value of a wire reply, or a panic with the error.
fn value(r: WireReply) -> Option<String> {
    match r {
        WireReply::Value(v) => v,
        WireReply::Error { code, message } => panic!("{code}: {message}"),
    }
}

/// libpq's fastpath function call (`PQfn`, on which its large-object API
/// is built) runs a function with no statement around it, so no planner or
/// executor hook fires: it waits for an admission before the function runs.
/// The session ran a transaction before: the hook's shortcut for an
/// admitted transaction (`gk_settled`) must have ended with it.
#[test]
fn a_fastpath_function_call_is_gated() {
    let c = Cluster::start(ONE_TICKET);
    let lo_create = c.admin_i64("SELECT 'lo_create(oid)'::regprocedure::oid::bigint") as u32;
    let mut w = Wire::connect(&c, "app", "fastpath");
    assert_eq!(value(w.query("SELECT 1")).as_deref(), Some("1"));
    let mut h = holder(&c);
    let call = std::thread::spawn(move || w.call(lo_create, &["0"]));
    c.wait_queued("fastpath");
    assert_eq!(c.admin_i64("SELECT count(*) FROM pg_largeobject_metadata"), 0, "lo_create ran unadmitted");
    h.ok("COMMIT");
    wait_until("the fastpath call returns", PROMPT, || call.is_finished());
    let oid = value(call.join().unwrap()).expect("lo_create returns an OID");
    assert_eq!(c.admin_i64(&format!("SELECT count(*) FROM pg_largeobject_metadata WHERE oid = {oid}")), 1);
    c.assert_quiet();
}

/// At Bind, a named prepared statement's text parameters go through their
/// types' input functions before any hook of the execution fires; with an
/// array of a domain that runs the domain's CHECK. It waits for the
/// admission first.
#[test]
fn bind_parameters_are_converted_after_admission() {
    let c = Cluster::start(ONE_TICKET);
    c.admin_exec(
        "CREATE SEQUENCE checks; GRANT USAGE ON SEQUENCE checks TO app;
         CREATE DOMAIN counted AS int CHECK (VALUE > 0 AND nextval('checks') > 0);",
    );
    let checked = || c.admin_query("SELECT is_called FROM checks", &[])[0].get::<_, bool>(0);
    let mut w = Wire::connect(&c, "app", "binder");
    // Prepared while the gate is open.
    assert_eq!(value(w.parse("s", "SELECT $1::counted[]")), None);
    let mut h = holder(&c);
    let run = w.spawn_bind_execute("s", &["{1}"]);
    c.wait_queued("binder");
    assert!(!checked(), "the domain's CHECK ran before the admission");
    h.ok("COMMIT");
    wait_until("the execution returns", PROMPT, || run.is_finished());
    assert_eq!(value(run.join().unwrap().1).as_deref(), Some("{1}"));
    assert!(checked());
    c.assert_quiet();
}

/// A login event trigger (PostgreSQL 17+) runs before the backend's command
/// loop, where an error is a FATAL that refuses the connection: it passes
/// without an admission, so a gated role connects while the gate is full
/// (and would otherwise be refused by `queue_timeout`); its first statement
/// queues as usual.
#[test]
fn a_login_event_trigger_passes_and_the_sessions_first_statement_queues() {
    let c = Cluster::start(&conf(&[("pg_gatekeeper.queue_timeout", "1s")]));
    if c.admin_i64("SELECT current_setting('server_version_num')::bigint") < 170000 {
        return; // no login event triggers before PostgreSQL 17
    }
    c.admin_exec(
        "CREATE FUNCTION on_login() RETURNS event_trigger LANGUAGE plpgsql AS
           $$BEGIN PERFORM count(*) FROM pg_class; END$$;
         CREATE EVENT TRIGGER on_login ON login EXECUTE FUNCTION on_login();",
    );
    let mut h = holder(&c);
    let started = Instant::now();
    let waiter = c.try_connect("app", "waiter").expect("a gated role connects while the gate is full");
    assert!(started.elapsed() < Duration::from_secs(5), "the connection took {:?}", started.elapsed());
    let w = Session { name: "waiter".into(), client: waiter }.spawn("SELECT 1");
    c.wait_queued("waiter");
    h.ok("COMMIT");
    w.join_ok(PROMPT);
    c.admin_exec("DROP EVENT TRIGGER on_login");
    c.assert_quiet();
}

/// A parallel query's workers ride on their leader's admission: they are
/// background workers, never gated. At one place and no lending, with the
/// progress guarantee out of the way, a worker that parked behind its own
/// leader would never be admitted, and the query would never end.
#[test]
fn a_parallel_querys_workers_ride_on_the_leaders_admission() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.progress_timeout", "1h"),
        ("max_worker_processes", "8"),
        ("max_parallel_workers", "4"),
    ]);
    c.admin_exec(
        "CREATE TABLE big AS SELECT g AS id FROM generate_series(1, 200000) g;
         ANALYZE big;
         GRANT SELECT ON big TO app;",
    );
    let force = if c.admin_i64("SELECT current_setting('server_version_num')::bigint") < 160000 {
        "force_parallel_mode"
    } else {
        "debug_parallel_query"
    };
    let before = c.status();
    let mut s = c.app("leader");
    s.ok(&format!(
        "SET {force} = on; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
         SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2"
    ));
    let plan = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let out = plan.clone();
    let run = s.spawn_with(move |client| {
        let rows =
            client.simple_query("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM big")?;
        for m in rows {
            if let postgres::SimpleQueryMessage::Row(r) = m {
                let mut text = out.lock().unwrap();
                text.push_str(r.get(0).unwrap_or(""));
                text.push('\n');
            }
        }
        Ok(())
    });
    run.join_ok(Duration::from_secs(10));
    let plan = plan.lock().unwrap().clone();
    assert!(plan.contains("Workers Launched: 2"), "the query ran without its workers:\n{plan}");
    let after = c.status();
    assert_eq!(after.int("admitted_total") - before.int("admitted_total"), 1, "one admission, the leader's");
    assert_eq!(after.int("overflow_total"), before.int("overflow_total"), "nobody admitted over the limit");
    assert_eq!(after.int("waited_total"), before.int("waited_total"), "nobody waited");
    c.assert_quiet();
}
