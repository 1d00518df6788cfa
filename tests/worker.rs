//! The background worker's duties (docs/DESIGN.md §6): lending the places of
//! idle holders, counting lock waiters as running, breaking deadlocks with
//! parked sessions, applying reloads, and surviving a crash restart; plus
//! the lost-client check of parked sessions, and the settings in force from
//! the first admission without it.
//!
//! Gated sessions are role `app`; the observer is the exempt superuser.
//! Every test ends with `assert_quiet`.
//! Also: long waits are logged (`log_min_wait`) and the history and the
//! wait percentiles record them.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_stays_queued, count_lines, wait_until, wait_until_or, Cluster, Running, Session, Wire, WireReply};

const PROMPT: Duration = Duration::from_secs(2);

/// Limit 1; idle holders may lend their place (automatic ticket ceiling).
const LIMIT_ONE: &[(&str, &str)] = &[("pg_gatekeeper.max_active", "1")];
/// Limit 1, and the progress guarantee out of the way: only lending admits
/// a session behind a holder that waits on its client.
const LENDING_ONLY: &[(&str, &str)] = &[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.progress_timeout", "1h")];
/// Limit 1, and the ticket ceiling switches lending off.
const ONE_TICKET: &[(&str, &str)] = &[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1")];

/// A gated session that opens a transaction and idles in it.
fn idle_in_transaction(c: &Cluster, name: &str) -> Session {
    let mut s = c.app(name);
    s.ok("BEGIN");
    s.ok("SELECT 1");
    s
}

/// Table `t` with one row (id 1), owned by `app` (so `app` may ALTER it).
fn create_t(c: &Cluster) {
    c.admin_exec(
        "CREATE TABLE t (id int PRIMARY KEY, v int);
         INSERT INTO t VALUES (1, 0);
         ALTER TABLE t OWNER TO app;",
    );
}

// -- 1. Idle holders lend their place ---------------------------------------------

#[test]
fn an_idle_holder_lends_its_place() {
    let c = Cluster::start(LENDING_ONLY);
    let mut a = idle_in_transaction(&c, "A");

    // A holds the only ticket but waits on its client: B gets in promptly.
    let d = c.app("B").spawn("SELECT 1").join_ok(PROMPT);
    assert!(d.elapsed < Duration::from_millis(1500), "B waited {:?}", d.elapsed);
    assert_eq!(c.activity_state("A").as_deref(), Some("idle in transaction"), "A has not committed");

    // While B holds a lent place too, tickets exceed max_active.
    let mut b = d.session;
    b.ok("BEGIN");
    b.ok("SELECT 1");
    let s = c.status();
    assert_eq!((s.max_active(), s.admitted()), (1, 2));
    assert!(s.tickets() > s.max_active(), "tickets {} with two holders", s.tickets());

    b.ok("COMMIT");
    a.ok("COMMIT");
    // Nobody holds the lent tickets now: once the recent demand (two holders)
    // is one to two seconds old, and at the worker's next wake-up (once a
    // second while nobody is queued), they are cut back to the limit.
    let t0 = Instant::now();
    wait_until("tickets decay back to max_active", Duration::from_secs(10), || c.status().tickets() == 1);
    assert!(t0.elapsed() >= Duration::from_millis(500), "cut after {:?}: the recent demand was ignored", t0.elapsed());
    c.assert_quiet();
}

/// Lending is judged on throughput (`lend_by_throughput`, docs/DESIGN.md
/// §10). A place lent to a session that ends no transaction raises nothing,
/// so the worker takes the step back and lends no further, however long
/// sessions queue; with the setting off, every place of a holder that
/// waits on its client is lent.
#[test]
fn lending_that_ends_no_transaction_is_not_extended() {
    // The progress guarantee would admit a queue's head over the limit
    // every second while no holder works: out of the way.
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.progress_timeout", "1h")]);
    let mut a = idle_in_transaction(&c, "A");
    let mut b = idle_in_transaction(&c, "B");
    // Four more that, once admitted, idle in their transactions too.
    let waiting: Vec<_> = (0..4).map(|k| c.app(&format!("W{k}")).spawn("BEGIN; SELECT 1")).collect();
    c.wait_status("four more queued or admitted", |s| s.admitted() + s.queued() == 6);

    // Eight throughput windows of 500 ms: each probe doubles the cap (to 4),
    // the places it lends end nothing, and it is taken back. The view shows
    // the cap and the probe. (Not compared with `tickets`: the view reads
    // the cap with a second function, and a sample may fall in between.)
    let t0 = Instant::now();
    let (mut most, mut probed_up, mut held_at_limit) = (0, false, false);
    while t0.elapsed() < Duration::from_secs(4) {
        let s = c.status();
        most = most.max(s.admitted());
        assert!(s.tickets() <= 4, "tickets {} with nothing ending", s.tickets());
        let cap = s.int("lend_cap");
        assert!((2..=4).contains(&cap), "lend_cap {cap} at a limit of 2: {}", s.0);
        probed_up |= cap == 4 && s.0["lend_probe"] == "up";
        held_at_limit |= cap == 2 && s.0["lend_probe"].is_null();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(most <= 4, "{most} admitted at a limit of 2 while nothing ended");
    assert!(c.status().queued() >= 2, "the queue was emptied");
    assert!(probed_up, "no probe up to a cap of 4 was seen in 4 s");
    assert!(held_at_limit, "the cap was never seen back at the limit between probes");

    // Off: the running-holder rule alone, and every idle holder lends.
    c.set_conf(&[("pg_gatekeeper.lend_by_throughput", "off")]);
    c.wait_status("every session admitted", |s| s.admitted() == 6 && s.queued() == 0);
    let s = c.status();
    assert!(s.0["lend_cap"].is_null() && s.0["lend_probe"].is_null(), "lending is not capped: {}", s.0);
    for w in waiting {
        let mut d = w.join_ok(PROMPT).session;
        d.ok("COMMIT");
    }
    a.ok("COMMIT");
    b.ok("COMMIT");
    c.assert_quiet();
}

/// A holder whose statement is active holds its place whatever its wait
/// event: Citus waits for its workers' results in `ClientRead`, and so does
/// a backend between a pipelined Execute and the client's Sync (the
/// statement stays active). Only a wait on its client outside a statement
/// (idle in transaction), or COPY FROM STDIN waiting for data, lends.
#[test]
fn a_holder_whose_statement_is_active_keeps_its_place_in_client_read() {
    // A wait on another server is no work here: the progress guarantee
    // would admit B after progress_timeout. Out of the way for this test.
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.progress_timeout", "1h")]);
    let mut a = Wire::connect(&c, "app", "A");
    a.send_execute_without_sync("SELECT 1");
    wait_until("A waits for its next message, its statement active", Duration::from_secs(5), || {
        c.activity_state("A").as_deref() == Some("active") && c.wait_event("A").1.as_deref() == Some("ClientRead")
    });
    assert_eq!(c.status().admitted(), 1);

    let b = c.app("B").spawn("SELECT 1");
    c.wait_queued("B");
    // Several samples of the worker (every 100 ms): A is running.
    assert_stays_queued(&c, &b, Duration::from_millis(1500));
    assert_eq!(c.status().tickets(), 1, "nothing was lent");

    assert!(matches!(a.sync(), WireReply::Value(Some(v)) if v == "1"));
    b.join_ok(PROMPT);
    c.assert_quiet();
}

#[test]
fn a_holder_waiting_for_copy_data_lends_its_place() {
    let c = Cluster::start(LENDING_ONLY);
    create_t(&c);
    let mut a = c.app("A");
    a.ok("BEGIN");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let a = a.spawn_with(move |client| {
        use std::io::Write;
        let mut w = client.copy_in("COPY t FROM STDIN")?;
        // Hold the COPY open, sending nothing, until told.
        rx.recv().ok();
        w.write_all(b"2\t2\n").expect("copy data");
        w.finish()?;
        client.batch_execute("COMMIT")
    });
    wait_until("A waits for COPY data", Duration::from_secs(5), || {
        c.activity_state("A").as_deref() == Some("active") && c.wait_event("A").1.as_deref() == Some("ClientRead")
    });

    let d = c.app("B").spawn("SELECT 1").join_ok(PROMPT);
    assert!(d.elapsed < Duration::from_millis(1500), "B waited {:?}", d.elapsed);
    tx.send(()).unwrap();
    a.join_ok(PROMPT);
    assert_eq!(c.admin_i64("SELECT count(*) FROM t"), 2);
    c.assert_quiet();
}

// -- 2. Lock waiters count as running -------------------------------------------------

#[test]
fn a_lock_waiter_counts_as_running() {
    // The progress guarantee out of the way: nobody works here (A idles, B
    // waits on a lock), and it would admit C over the limit after a second.
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.progress_timeout", "1h")]);
    create_t(&c);
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("UPDATE t SET v = v + 1 WHERE id = 1");

    // B is admitted on A's lent place, and then waits for A's row lock.
    let b = c.app("B").spawn("UPDATE t SET v = v + 1 WHERE id = 1");
    wait_until("B waits on A's row lock", PROMPT, || c.wait_event("B").0.as_deref() == Some("Lock"));
    assert_eq!(c.session("B").unwrap().state, "active");

    // B blocked on a lock still uses its place: C must not be lent one.
    let cc = c.app("C").spawn("SELECT 1");
    c.wait_queued("C");
    assert_stays_queued(&c, &cc, Duration::from_millis(500));
    let b_running: Option<bool> =
        c.admin_query("SELECT counts_as_running FROM gatekeeper.sessions WHERE application_name = 'B'", &[])[0].get(0);
    assert_eq!(b_running, Some(true));

    // A commits: B gets its lock and finishes; C gets in.
    a.ok("COMMIT");
    b.join_ok(PROMPT);
    cc.join_ok(PROMPT);
    assert_eq!(c.admin_i64("SELECT v::bigint FROM t WHERE id = 1"), 2);
    assert_eq!(c.status().int("overflow_total"), 0, "no deadlock to break here");
    c.assert_quiet();
}

// -- 3. Deadlock breaker --------------------------------------------------------------

/// Wait for the deadlock breaker's log line of an admission: the worker
/// wakes the session before it logs, so the line can follow the join.
fn wait_breaker_logged(c: &Cluster) {
    wait_until("the deadlock breaker's admission is logged", Duration::from_secs(5), || {
        c.log_text().contains("over the limit because process")
    });
}

/// B parks on `SELECT count(*) FROM t`, holding AccessShareLock on t from
/// parse analysis; A, the holder, then runs ALTER TABLE t, which waits on B.
/// Only the deadlock breaker can admit B (over the limit), and both must
/// finish within 2 s of the ALTER.
#[test]
fn deadlock_breaker_admits_a_parked_lock_holder_while_the_holder_is_busy() {
    // lock_timeout and queue_timeout stay 0, and the progress guarantee is
    // out of the way (A sleeps, which is no work to it): nothing else would
    // end the wait.
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.progress_timeout", "1h")]);
    create_t(&c);
    let a = idle_in_transaction(&c, "A");
    let overflow_before = c.status().int("overflow_total");

    // A is busy (sleeping) when B parks, so A's place is not lent to B. B
    // must take its lock before A's ALTER does: 2 s to connect and park.
    let a_run = a.spawn("SELECT pg_sleep(2); ALTER TABLE t ADD COLUMN c int");
    c.wait_for_event("A", "PgSleep");
    let alter_at = Instant::now() + Duration::from_secs(2); // at the latest
    let b_run = c.app("B").spawn("SELECT count(*) FROM t");
    c.wait_queued("B");
    assert!(Instant::now() < alter_at, "B parked only after A's sleep: the ALTER may have gone first");

    let deadline = alter_at + PROMPT;
    let b_done = b_run.join_ok(deadline.saturating_duration_since(Instant::now()));
    let mut a = a_run.join_ok(deadline.saturating_duration_since(Instant::now())).session;
    assert!(Instant::now() <= deadline, "not broken within 2 s of the ALTER");
    assert!(b_done.finished <= deadline);
    assert!(c.status().int("overflow_total") > overflow_before, "B was admitted over the limit");
    wait_breaker_logged(&c);

    a.ok("COMMIT");
    assert_eq!(
        c.admin_i64("SELECT count(*) FROM information_schema.columns WHERE table_name = 't' AND column_name = 'c'"),
        1
    );
    c.assert_quiet();
}

#[test]
fn deadlock_breaker_admits_a_parked_lock_holder_without_lending() {
    let c = Cluster::start(BREAKER_ONLY);
    create_t(&c);
    let a = idle_in_transaction(&c, "A");
    let overflow_before = c.status().int("overflow_total");

    // A idles, but lending is off: B stays parked, holding its table lock.
    let b_run = c.app("B").spawn("SELECT count(*) FROM t");
    c.wait_queued("B");
    assert_stays_queued(&c, &b_run, Duration::from_millis(300));

    let a_run = a.spawn("ALTER TABLE t ADD COLUMN c int");
    let deadline = Instant::now() + PROMPT;
    b_run.join_ok(deadline.saturating_duration_since(Instant::now()));
    let mut a = a_run.join_ok(deadline.saturating_duration_since(Instant::now())).session;
    assert!(c.status().int("overflow_total") > overflow_before, "B was admitted over the limit");
    wait_breaker_logged(&c);

    a.ok("COMMIT");
    c.assert_quiet();
}

/// Five waiters, exempt superusers, ask for the same lock in the same mode
/// while B, parked, holds it: the breaker asks the lock manager about one
/// waiter per lock and mode (`gatekeeper_core::breaker`, unit-tested there),
/// and whichever waiter it asks about, B blocks it: B is admitted, once.
#[test]
fn deadlock_breaker_finds_the_parked_holder_of_a_lock_many_wait_on() {
    let c = Cluster::start(BREAKER_ONLY);
    create_t(&c);
    let mut a = idle_in_transaction(&c, "A");
    let b_run = c.app("B").spawn("SELECT count(*) FROM t");
    c.wait_queued("B");
    let waiters: Vec<Running> =
        (0..5).map(|k| c.superuser(&format!("S{k}")).spawn("BEGIN; LOCK TABLE t; COMMIT")).collect();
    let deadline = Instant::now() + PROMPT;
    b_run.join_ok(deadline.saturating_duration_since(Instant::now()));
    for w in waiters {
        w.join_ok(deadline.saturating_duration_since(Instant::now()));
    }
    wait_breaker_logged(&c);
    assert_eq!(count_lines(&c.log_text(), "over the limit because process"), 1, "B, once");
    a.ok("COMMIT");
    c.assert_quiet();
}

/// The breaker's class may get no place while another class's holders
/// run: here three sessions of class `other` loop short statements, and
/// each place one frees goes back to `other` by the shares (it holds fewer
/// than `default`). A, of `default`, waits for the lock of B, parked in
/// `default`: only the breaker can admit B.
#[test]
fn deadlock_breaker_admits_a_blocker_whose_class_the_running_holders_do_not_serve() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.max_tickets", "2"),
        ("pg_gatekeeper.progress_timeout", "1h"),
        ("pg_gatekeeper.classes", "other"),
    ]);
    create_t(&c);
    c.admin_exec("CREATE ROLE oth LOGIN; ALTER ROLE oth SET pg_gatekeeper.class = 'other'");
    let a = idle_in_transaction(&c, "A");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let others: Vec<Running> =
        (0..3).map(|k| c.session_as("oth", &format!("O{k}")).looping("SELECT pg_sleep(0.02)", &stop)).collect();
    let overflow_before = c.status().int("overflow_total");
    let b_run = c.app("B").spawn("SELECT count(*) FROM t");
    c.wait_queued("B");
    let a_run = a.spawn("ALTER TABLE t ADD COLUMN c int");
    let deadline = Instant::now() + PROMPT;
    b_run.join_ok(deadline.saturating_duration_since(Instant::now()));
    let mut a = a_run.join_ok(deadline.saturating_duration_since(Instant::now())).session;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for o in others {
        o.join_ok(Duration::from_secs(10));
    }
    assert!(c.status().int("overflow_total") > overflow_before, "B was admitted over the limit");
    wait_breaker_logged(&c);
    a.ok("COMMIT");
    c.assert_quiet();
}

/// One ticket, and the progress guarantee out of the way: only the breaker
/// can admit over the limit.
const BREAKER_ONLY: &[(&str, &str)] =
    &[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1"), ("pg_gatekeeper.progress_timeout", "1h")];

/// Whether the session named `name` holds a granted lock on relation `rel`.
fn holds_lock_on(c: &Cluster, name: &str, rel: &str) -> bool {
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE relation = '{rel}'::regclass AND granted AND pid = {}",
        c.pid_of(name)
    );
    c.admin_i64(&sql) > 0
}

/// Explicit blocks: B's block parks at its first statement, which holds the
/// AccessShareLock on t that its parse analysis took (BEGIN took no place);
/// A, admitted in its own block, then runs ALTER TABLE t and waits on B.
#[test]
fn deadlock_breaker_admits_a_block_parked_at_its_first_statement() {
    let c = Cluster::start(BREAKER_ONLY);
    create_t(&c);
    let a = idle_in_transaction(&c, "A");
    let overflow_before = c.status().int("overflow_total");

    let b_run = c.app("B").spawn_with(|client| {
        client.batch_execute("BEGIN")?;
        client.batch_execute("SELECT count(*) FROM t")
    });
    c.wait_queued("B");
    assert!(holds_lock_on(&c, "B", "t"), "B parked without its parse-time lock");

    let a_run = a.spawn("ALTER TABLE t ADD COLUMN c int");
    let mut b = b_run.join_ok(PROMPT).session;
    assert!(c.status().int("overflow_total") > overflow_before, "B was admitted over the limit");
    // A waits for B's lock until B's block ends.
    assert_eq!(c.wait_event("A").0.as_deref(), Some("Lock"));
    b.ok("COMMIT");
    let mut a = a_run.join_ok(PROMPT).session;
    a.ok("COMMIT");
    c.assert_quiet();
}

/// In REPEATABLE READ a parked first statement holds the transaction's
/// snapshot: CREATE INDEX CONCURRENTLY, admitted, waits for it (a lock on
/// B's virtual transaction id), and the breaker admits B.
#[test]
fn deadlock_breaker_admits_a_block_parked_holding_its_snapshot() {
    let c = Cluster::start(BREAKER_ONLY);
    create_t(&c);
    c.admin_exec("CREATE TABLE u (id int); GRANT SELECT ON u TO app; GRANT CREATE ON SCHEMA public TO app;");
    let overflow_before = c.status().int("overflow_total");
    // CIC starts (admitted, the only place) and waits at its first lock
    // while B parks; the observer's lock is the one it waits for.
    let mut blocker = c.superuser("blocker");
    blocker.ok("BEGIN; LOCK TABLE t IN SHARE MODE");
    let a_run = c.app("A").spawn("CREATE INDEX CONCURRENTLY t_v ON t (v)");
    c.wait_for_event("A", "relation");
    assert_eq!(c.status().admitted(), 1);

    let b_run = c.app("B").spawn_with(|client| {
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")?;
        client.batch_execute("SELECT count(*) FROM u")
    });
    c.wait_queued("B");
    blocker.ok("COMMIT");

    let mut b = b_run.join_ok(Duration::from_secs(5)).session;
    assert!(c.status().int("overflow_total") > overflow_before, "B was admitted over the limit");
    b.ok("COMMIT");
    a_run.join_ok(PROMPT);
    assert_eq!(c.admin_i64("SELECT count(*) FROM pg_index WHERE indexrelid = 't_v'::regclass AND indisvalid"), 1);
    c.assert_quiet();
}

/// Sessions `shared0`... that each hold advisory lock 777 in shared mode
/// and loop a statement, and then `exclusive`, admitted, waiting for the
/// lock in exclusive mode.
struct SharedLockLoops {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    loops: Vec<Running>,
    exclusive: Option<Running>,
}

impl SharedLockLoops {
    fn start(c: &Cluster, n: usize, sql: &str) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let loops = (0..n)
            .map(|k| {
                let mut s = c.app(&format!("shared{k}"));
                s.ok("SELECT pg_advisory_lock_shared(777)");
                s.looping(sql, &stop)
            })
            .collect();
        SharedLockLoops { stop, loops, exclusive: None }
    }

    fn wait_exclusive(&mut self, c: &Cluster) {
        self.exclusive = Some(c.app("exclusive").spawn("SELECT pg_advisory_lock(777)"));
        c.wait_for_event("exclusive", "advisory");
    }

    /// Stop the loops and release the lock: `exclusive` gets it.
    fn end(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in self.loops {
            r.join_ok(Duration::from_secs(10)).session.ok("SELECT pg_advisory_unlock_all()");
        }
        if let Some(e) = self.exclusive {
            e.join_ok(Duration::from_secs(5));
        }
    }
}

/// The breaker cannot be used to stay over the limit: sessions that hold a
/// session-level lock someone waits for, and loop short statements, park
/// between them holding the lock. While their queue moves they get in in
/// their turn; admitting them over the limit each time they parked (as the
/// breaker once did, 55 times in 8 s) breaks no cycle. A pause of the
/// whole machine longer than the breaker's 100 ms check looks to it like a
/// queue that stood still, so a loaded machine may give a few such
/// admissions in the 3 s; the rule this test guards against gives about 20.
#[test]
fn the_deadlock_breaker_leaves_a_moving_queue_alone() {
    /// Admissions over the limit a loaded machine's pauses may give.
    const PAUSES: i64 = 5;
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.max_tickets", "2")]);
    let mut lock = SharedLockLoops::start(&c, 8, "SELECT count(*) FROM generate_series(1, 100000)");
    let before = c.status().int("overflow_total");
    lock.wait_exclusive(&c);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let s = c.status();
        let over = s.int("overflow_total") - before;
        assert!(over <= PAUSES, "{over} admissions over the limit within {:?} while the queue moved", t0.elapsed());
        // The waiter and two places, and one place for each admission over
        // the limit so far.
        assert!(s.admitted() <= 3 + over, "{} admitted at max_active 2, {over} over the limit", s.admitted());
        std::thread::sleep(Duration::from_millis(5));
    }
    let overflow = c.status().int("overflow_total") - before;
    lock.end();
    assert!(overflow <= PAUSES, "{overflow} admissions over the limit while the queue moved");
    c.assert_quiet();
}

/// The same sessions looping statements longer than the breaker's check
/// (0.25 s sleeps): their queue stands still between admissions, and the
/// breaker admits the parked ones over the limit. A session admitted over
/// the limit again within 10 s of its previous such admission needs a
/// standstill twice as long as the one before (200 ms, 400 ms, ...), so
/// after its first admission or two each gets in in its turn. Before, it
/// was admitted over the limit whenever it parked (`OVERFLOW_CEILING` fails
/// that).
#[test]
fn the_deadlock_breaker_backs_off_from_blockers_whose_admissions_end_nothing() {
    const LOOPERS: i64 = 6;
    /// Two admissions each, and as many again for a loaded machine's pauses.
    const OVERFLOW_CEILING: i64 = 4 * LOOPERS;
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.max_tickets", "2")]);
    let mut lock = SharedLockLoops::start(&c, LOOPERS as usize, "SELECT pg_sleep(0.25)");
    let before = c.status().int("overflow_total");
    lock.wait_exclusive(&c);
    wait_until("a first admission over the limit", PROMPT, || c.status().int("overflow_total") > before);
    let t0 = Instant::now();
    let mut over = 0;
    while t0.elapsed() < Duration::from_secs(5) {
        over = c.status().int("overflow_total") - before;
        assert!(over <= OVERFLOW_CEILING, "{over} admissions over the limit within {:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    lock.end();
    eprintln!("{over} admissions over the limit in 5 s");
    c.assert_quiet();
}

// -- 4. Lost client -------------------------------------------------------------------

#[test]
fn a_parked_session_whose_client_dies_is_ended() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        // On Linux the parked backend watches its socket, so a hang-up is
        // noticed at once, not at the next poll: an hour-long interval must
        // not delay it.
        ("pg_gatekeeper.client_check_interval", "1h"),
        // Nor may the progress guarantee admit the parked session first.
        ("pg_gatekeeper.progress_timeout", "1h"),
    ]);
    let mut h = idle_in_transaction(&c, "holder");

    // A psql process of its own, so that we can kill the client outright.
    let mut psql = Command::new("psql")
        .args(["-X", "-h", c.dir.to_str().unwrap(), "-p", &c.port.to_string(), "-U", "app", "-d", "postgres"])
        .args(["-c", "SELECT 1"])
        .env("PGAPPNAME", "lost")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    c.wait_queued("lost");
    let pid = c.pid_of("lost");

    psql.kill().unwrap(); // SIGKILL
    psql.wait().unwrap();
    let killed = Instant::now();
    // At once, not at the hour-long poll: 5 s is room for a loaded machine.
    wait_until("the lost client's backend exits", Duration::from_secs(5), || {
        c.admin_i64(&format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}")) == 0
    });
    assert!(killed.elapsed() < Duration::from_secs(5));

    let s = c.status();
    assert_eq!(s.int("clients_lost_total"), 1);
    assert_eq!(s.int("queue_exits_total"), 0, "counted once, as a lost client");
    assert_eq!((s.queued(), s.admitted()), (0, 1));
    // Ended as PostgreSQL ends a backend whose client is gone (08006).
    let line = format!("[{pid}] lost FATAL:  connection to client lost");
    wait_until("the backend's FATAL is logged", Duration::from_secs(5), || c.log_text().contains(&line));

    h.ok("COMMIT");
    c.assert_quiet();
}

// -- 5. Reload ----------------------------------------------------------------------

#[test]
fn raising_max_active_by_reload_admits_parked_sessions_at_once() {
    let c = Cluster::start(ONE_TICKET);
    let mut h = idle_in_transaction(&c, "holder");
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2").spawn("SELECT 1");
    c.wait_queued("w2");

    let t0 = Instant::now();
    c.set_conf(&[("pg_gatekeeper.max_active", "3")]);
    let d1 = w1.join_ok(Duration::from_secs(5));
    let d2 = w2.join_ok(Duration::from_secs(5));
    // At once, not when the holder (which never commits meanwhile) ends:
    // the bound covers the reload steps of set_conf too.
    let took = d1.finished.max(d2.finished) - t0;
    assert!(took < Duration::from_secs(5), "admitted {took:?} after the reload");
    let s = c.status();
    assert_eq!((s.max_active(), s.admitted(), s.queued()), (3, 1, 0));

    h.ok("COMMIT");
    c.assert_quiet();
}

/// A bad value written into postgresql.conf by hand (ALTER SYSTEM checks
/// its value first) is refused at the reload: PostgreSQL logs it and keeps
/// the old value, in the backends and in the worker, which runs on; the
/// file's good changes apply.
#[test]
fn a_bad_value_in_the_configuration_file_keeps_the_old_one() {
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.classes", "reports (max_active = 1)")]);
    wait_until("the worker runs", Duration::from_secs(10), || c.worker_pid().is_some());
    let worker = c.worker_pid();
    let conf = c.dir.join("data/postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("pg_gatekeeper.classes = 'reports (max_active = x)'\npg_gatekeeper.max_active = 3\n");
    std::fs::write(&conf, text).unwrap();
    c.admin_exec("SELECT pg_reload_conf()");
    wait_until("the worker applies the good change", Duration::from_secs(10), || c.status().max_active() == 3);
    wait_until("the bad value is logged", Duration::from_secs(5), || {
        c.log_text().contains("invalid value for parameter \"pg_gatekeeper.classes\"")
    });
    let classes: String = c.admin_query("SHOW pg_gatekeeper.classes", &[])[0].get(0);
    assert_eq!(classes, "reports (max_active = 1)");
    let cap: i64 = c.admin_i64("SELECT max_active::bigint FROM gatekeeper.classes WHERE class = 'reports'");
    assert_eq!(cap, 1, "the class keeps its cap");
    // A new session reads the file too, and keeps the old value as well.
    let mut s = c.app("fresh");
    let seen: String = s.client.query_one("SHOW pg_gatekeeper.classes", &[]).unwrap().get(0);
    assert_eq!(seen, "reports (max_active = 1)");
    s.ok("SELECT 1");
    assert_eq!(c.worker_pid(), worker, "the worker ran on");
    c.assert_quiet();
}

// -- 6. Crash restart ----------------------------------------------------------------

#[test]
fn the_gate_starts_clean_after_a_crash_restart() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.history_interval", "50ms"),
        // The parked sessions stay parked until the crash.
        ("pg_gatekeeper.progress_timeout", "1h"),
    ]);
    let _h = idle_in_transaction(&c, "holder");
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2").spawn("SELECT 1");
    c.wait_queued("w2");

    // SIGKILL the holder's backend: the postmaster ends every backend and
    // reinitialises shared memory.
    Cluster::kill(c.pid_of("holder"), "KILL");
    assert!(w1.join(Duration::from_secs(10)).result.is_err());
    assert!(w2.join(Duration::from_secs(10)).result.is_err());
    c.reconnect_admin(Duration::from_secs(20));

    let s = c.status();
    assert_eq!((s.admitted(), s.queued(), s.int("admitted_total")), (0, 0, 0), "{:?}", s.0);
    // The worker is back: listed again, and recording history samples.
    wait_until("the worker is back", Duration::from_secs(10), || c.worker_count() == 1);
    let last_sample =
        || c.admin_query("SELECT max(sample_time)::text FROM gatekeeper.history", &[])[0].get::<_, Option<String>>(0);
    let first = last_sample();
    wait_until("the worker records history again", Duration::from_secs(10), || {
        let now = last_sample();
        now.is_some() && now != first
    });

    // Parking and hand-off work again.
    let mut h = idle_in_transaction(&c, "holder2");
    let w3 = c.app("w3").spawn("SELECT 1");
    c.wait_queued("w3");
    h.ok("COMMIT");
    w3.join_ok(PROMPT);
    c.assert_quiet();
}

/// A parked session whose postmaster dies ends with PostgreSQL's own
/// FATAL for it (57P01, as `secure_read` reports it to a session waiting
/// for its client), on either sleep: on the client socket (the default) and
/// on the latch alone (`client_check_interval = 0`). Read with psql, since
/// libpq reads what the server sent before it closed.
#[test]
fn a_parked_session_ends_with_57p01_when_the_postmaster_dies() {
    /// A dead postmaster's segment (its id) and a backend that may have
    /// outlived it: removed and killed when dropped, also on a failure.
    struct Cleanup(Option<String>, i32);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            // Still a postgres process: not a number reused by another.
            let cmd = std::fs::read(format!("/proc/{}/cmdline", self.1)).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).starts_with("postgres") {
                let _ = Command::new("kill").args(["-KILL", &self.1.to_string()]).status();
            }
            if let Some(shmid) = &self.0 {
                let _ = Command::new("ipcrm").args(["-m", shmid]).status();
            }
        }
    }
    for interval in ["0", "1s"] {
        let mut settings = ONE_TICKET.to_vec();
        settings.push(("pg_gatekeeper.client_check_interval", interval));
        let c = Cluster::start(&settings);
        let _h = idle_in_transaction(&c, "holder");
        let waiter = Command::new("psql")
            .args(["-X", "-h", c.dir.to_str().unwrap(), "-p", &c.port.to_string(), "-U", "app", "-d", "postgres"])
            .args(["-v", "VERBOSITY=verbose", "-c", "SELECT 1"])
            .env("PGAPPNAME", "waiter")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn psql");
        c.wait_queued("waiter");
        let pid_file = std::fs::read_to_string(c.data_dir().join("postmaster.pid")).unwrap();
        let postmaster: i32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
        // The postmaster would have removed its System V segment at its next
        // start; it is marked for removal (it goes when the last backend
        // leaves) whatever happens, and the waiter's backend, which this
        // test expects gone, is killed if it is not.
        let waiter_pid = c.pid_of("waiter");
        let _cleanup =
            Cleanup(pid_file.lines().nth(6).and_then(|l| l.split_whitespace().nth(1)).map(str::to_string), waiter_pid);
        Cluster::kill(postmaster, "KILL");
        let mut waiter = waiter;
        let gone = Instant::now();
        while waiter.try_wait().unwrap().is_none() {
            if gone.elapsed() > Duration::from_secs(10) {
                let _ = waiter.kill();
                panic!("client_check_interval = {interval}: the parked session outlived its postmaster by 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = waiter.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("FATAL:  57P01: terminating connection due to unexpected postmaster exit"),
            "client_check_interval = {interval}: psql said: {stderr}"
        );
    }
}

/// With no worker (no background worker slot), nothing but start-up applies
/// postgresql.conf's limit and classes: the gate must have them before the
/// first admission, at start and after a crash restart.
#[test]
fn the_first_admission_sees_the_configured_limit_and_classes() {
    let c = Cluster::start(&[
        ("max_worker_processes", "0"),
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.max_tickets", "2"),
        ("pg_gatekeeper.classes", "reports (max_active = 1)"),
    ]);
    c.admin_exec("CREATE ROLE rep LOGIN; ALTER ROLE rep SET pg_gatekeeper.class = 'reports';");
    for round in ["start", "crash restart"] {
        assert_eq!(c.worker_count(), 0, "{round}: a worker runs");
        let s = c.status();
        assert_eq!((s.max_active(), s.tickets(), s.int("admitted_total")), (2, 2, 0), "{round}: {:?}", s.0);
        let cap = c.admin_query("SELECT max_active FROM gatekeeper.classes WHERE class = 'reports'", &[]);
        assert_eq!(cap.first().map(|r| r.get::<_, Option<i32>>(0)), Some(Some(1)), "{round}: class reports");

        // The first two admissions take the two places; the third waits.
        let mut a = idle_in_transaction(&c, "a");
        let mut b = idle_in_transaction(&c, "b");
        let w = c.app("w").spawn("SELECT 1");
        c.wait_queued("w");
        a.ok("COMMIT");
        w.join_ok(PROMPT);
        b.ok("COMMIT");
        // The class's cap of 1, with a place free in the gate.
        let mut r1 = c.session_as("rep", "r1");
        r1.ok("BEGIN");
        r1.ok("SELECT 1");
        let r2 = c.session_as("rep", "r2").spawn("SELECT 1");
        c.wait_queued("r2");
        r1.ok("COMMIT");
        r2.join_ok(PROMPT);
        c.assert_quiet();

        if round == "start" {
            // SIGKILL a backend: the postmaster reinitialises shared memory.
            let _victim = idle_in_transaction(&c, "victim");
            c.crash_restart(c.pid_of("victim"), Duration::from_secs(20));
        }
    }
}

// -- 7. The worker is visible -----------------------------------------------------------

#[test]
fn the_worker_shows_in_pg_stat_activity() {
    let c = Cluster::start(&[]);
    wait_until("one pg_gatekeeper worker runs", Duration::from_secs(5), || c.worker_count() == 1);
    c.assert_quiet();
}

// -- 8. Long waits are logged and recorded ---------------------------------------------

#[test]
fn long_waits_are_logged_and_recorded_in_history() {
    let mut settings = ONE_TICKET.to_vec();
    settings.extend([("pg_gatekeeper.log_min_wait", "100ms"), ("pg_gatekeeper.history_interval", "50ms")]);
    let c = Cluster::start(&settings);
    let mut h = idle_in_transaction(&c, "holder");
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");
    let pid = c.pid_of("waiter");
    // Keep the waiter parked past log_min_wait; the wait is the workload.
    c.admin_exec("SELECT pg_sleep(0.3)");
    h.ok("COMMIT");
    w.join_ok(PROMPT);

    wait_until("the long wait is logged", Duration::from_secs(5), || {
        c.log_tail(200).contains(&format!("pg_gatekeeper: process {pid} admitted after waiting"))
    });
    let s = c.status();
    assert!(s.int("waited_total") == 1, "{:?}", s.0);
    let p99 = c.admin_query("SELECT wait_p99_ms, wait_max_ms FROM gatekeeper.status", &[]);
    let (p99, max): (f64, f64) = (p99[0].get(0), p99[0].get(1));
    assert!(max >= 300.0 && p99 <= max && p99 >= 250.0, "p99 {p99}, max {max}");
    wait_until("a history sample records the wait", Duration::from_secs(5), || {
        c.admin_i64("SELECT count(*) FROM gatekeeper.history WHERE wait_p99_ms >= 250") >= 1
    });
    c.assert_quiet();
}

/// The history's cadence follows its setting: no sample at the worker's
/// start (one a few microseconds in would divide what it admitted by about
/// nothing), and a shorter `history_interval` takes effect at the reload,
/// not when the old interval would have ended. A reset is seen by its time:
/// the sample after it counts from it even when more was admitted since
/// the reset than before it.
#[test]
fn history_follows_a_shortened_interval_at_once_and_counts_from_a_reset() {
    let c = Cluster::start(&[("pg_gatekeeper.history_interval", "1h")]);
    wait_until("one pg_gatekeeper worker runs", Duration::from_secs(5), || c.worker_count() == 1);
    let rows = || c.admin_i64("SELECT count(*) FROM gatekeeper.history");
    assert_eq!(rows(), 0, "a sample at the worker's start");
    let mut a = c.app("a");
    for _ in 0..3 {
        a.ok("SELECT 1");
    }
    c.set_conf(&[("pg_gatekeeper.history_interval", "100ms")]);
    wait_until("a sample soon after the reload", Duration::from_secs(5), || rows() >= 1);
    // Reset, then admit more than before it; the first sample after the
    // reset must count those 20 admissions, all of them. A sample of the
    // 100 ms cadence may still land while they run (the worker applies the
    // return to 1h a moment later): then try again.
    for _ in 0..5 {
        c.set_conf(&[("pg_gatekeeper.history_interval", "1h")]);
        let before = rows();
        c.admin_exec("SELECT gatekeeper.reset()");
        for _ in 0..20 {
            a.ok("SELECT 1");
        }
        let done = c.admin_query("SELECT clock_timestamp()::text", &[])[0].get::<_, String>(0);
        c.set_conf(&[("pg_gatekeeper.history_interval", "1s")]);
        wait_until("a sample after the reset", Duration::from_secs(10), || rows() > before);
        let r = &c.admin_query(
            "WITH h AS (SELECT sample_time, admissions_per_sec,
                               lag(sample_time) OVER (ORDER BY sample_time) AS previous
                          FROM gatekeeper.history)
             SELECT h.sample_time > $1::text::timestamptz,
                    round(h.admissions_per_sec * extract(epoch FROM h.sample_time - h.previous))::bigint
               FROM h, gatekeeper.status s
              WHERE h.sample_time > s.stats_reset ORDER BY h.sample_time LIMIT 1",
            &[&done],
        )[0];
        if r.get::<_, bool>(0) {
            assert_eq!(r.get::<_, i64>(1), 20, "the first sample after the reset counts its admissions");
            c.assert_quiet();
            return;
        }
    }
    panic!("every try had a sample while the admissions after the reset ran");
}

/// The history counts each kind of gated session: idle ones (counted in
/// the gate's header), holders idle in transaction or running (walked in the
/// holders' list), and the queue. Exempt sessions are not counted.
#[test]
fn history_counts_idle_holding_and_queued_sessions() {
    let mut settings = ONE_TICKET.to_vec();
    settings.push(("pg_gatekeeper.history_interval", "50ms"));
    let c = Cluster::start(&settings);
    let sample = "SELECT count(*) FROM gatekeeper.history WHERE sample_time > $1::text::timestamptz \
                  AND idle = $2 AND idle_in_transaction = $3 AND running = $4 AND queued = $5 AND admitted = $6";
    let seen = |since: &str, counts: [i32; 5]| {
        let [idle, in_xact, running, queued, admitted] = counts;
        let rows = c.admin_query(sample, &[&since, &idle, &in_xact, &running, &queued, &admitted]);
        rows[0].get::<_, i64>(0) >= 1
    };
    let last = || {
        let r = c.admin_query(
            "SELECT format(E'\\nlast sample: idle %s, in transaction %s, running %s, queued %s, admitted %s',
                          idle, idle_in_transaction, running, queued, admitted)
               FROM gatekeeper.history ORDER BY sample_time DESC LIMIT 1",
            &[],
        );
        r.first().map_or_else(String::new, |r| r.get(0))
    };
    // A sample taken from now on with these counts: idle, in transaction,
    // running, queued, admitted.
    let wait_for_sample = |desc: &str, counts: [i32; 5]| {
        let since = c.admin_query("SELECT now()::text", &[])[0].get::<_, String>(0);
        wait_until_or(desc, Duration::from_secs(5), || seen(&since, counts), last);
    };
    let mut idle: Vec<Session> = ["idle1", "idle2"].iter().map(|n| c.app(n)).collect();
    for s in idle.iter_mut() {
        s.ok("SELECT 1");
    }
    let mut h = idle_in_transaction(&c, "holder");
    let w = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");
    wait_for_sample("a sample with 2 idle, 1 idle in transaction, 1 queued", [2, 1, 0, 1, 1]);
    h.ok("COMMIT");
    let _waiter = w.join_ok(PROMPT);
    drop(idle.remove(0));
    // idle2, the holder and the waiter (still connected), all idle now.
    wait_for_sample("a sample with 3 idle and nobody admitted", [3, 0, 0, 0, 0]);
    c.assert_quiet();
}

// -- 9. The worker comes back, and the gate stays safe while it is away ------------------

#[test]
fn a_terminated_worker_comes_back_within_about_a_second() {
    let c = Cluster::start(&[]);
    wait_until("the worker runs", Duration::from_secs(5), || c.worker_pid().is_some());
    for round in 0..2 {
        let old = c.worker_pid().unwrap();
        // Round 0 ends the worker alone; round 1 ends every other session,
        // the routine way a DBA would.
        let victims = if round == 0 { format!("pid = {old}") } else { "pid <> pg_backend_pid()".to_string() };
        c.admin_exec(&format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {victims}"));
        let t0 = Instant::now();
        // Alone, it is back after its 1 s restart interval. Ended together
        // with the logical replication launcher (5 s restart interval),
        // PostgreSQL 15's postmaster can miss the exits: it computes its
        // sleep, then unblocks signals, then calls select(), so an exit
        // handled in between leaves it asleep for the sleep computed
        // before, at most 60 s (ServerLoop, DetermineSleepTime). Observed:
        // 4 to 5 s (woken by the launcher's restart), and once more than
        // 10 s. Only the return is required then.
        let bound = if round == 0 { Duration::from_millis(2500) } else { Duration::from_secs(75) };
        wait_until("a new worker runs", bound.max(Duration::from_secs(10)), || {
            c.worker_pid().is_some_and(|p| p != old)
        });
        assert!(t0.elapsed() < bound, "round {round}: back after {:?}", t0.elapsed());
    }
    // Its duties work again: a reload applies, and an idle holder lends.
    c.set_conf(&[("pg_gatekeeper.max_active", "1")]);
    let mut a = idle_in_transaction(&c, "A");
    c.app("B").spawn("SELECT 1").join_ok(PROMPT);
    a.ok("COMMIT");
    c.assert_quiet();
}

/// A cancel is not a reason to end: the worker runs no query, and a
/// restart would forget the deadlock breaker's and the progress
/// guarantee's watches (a DBA's "cancel every query" may reach it).
#[test]
fn a_cancelled_worker_keeps_running() {
    let c = Cluster::start(&[]);
    wait_until("the worker runs", Duration::from_secs(5), || c.worker_pid().is_some());
    let pid = c.worker_pid().unwrap();
    c.admin_exec(&format!("SELECT pg_cancel_backend({pid})"));
    // Ended, it would be back under another pid after its 1 s restart
    // interval.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        assert_eq!(c.worker_pid(), Some(pid), "the worker was replaced after {:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = c.log_text();
    assert!(!log.contains(&format!("(PID {pid}) exited")), "the worker took the cancel:\n{log}");
    c.assert_quiet();
}

#[test]
fn a_reload_applies_while_the_worker_is_away() {
    let c = Cluster::start(LIMIT_ONE);
    // Hold the worker back: stop it and let the postmaster restart it only
    // after the reload has been applied by a backend.
    c.admin_exec("ALTER SYSTEM SET pg_gatekeeper.max_active = 5");
    wait_until("the worker runs", Duration::from_secs(5), || c.worker_pid().is_some());
    let pid = c.worker_pid().expect("the worker runs");
    let stopped = Cluster::stop_process(pid);
    c.admin_exec("SELECT pg_reload_conf()");
    // A backend that reloaded applies the new limit at its next transaction
    // (the gated one's, or the observer's own reading of the status).
    let mut s = c.app("probe");
    wait_until("a backend applies max_active = 5", Duration::from_secs(5), || {
        s.ok("SELECT 1");
        c.status().max_active() == 5
    });
    drop(stopped);
    c.assert_quiet();
}

/// A limit lowered by a reload binds at once, the worker away: the tickets
/// come down with it, so a place freed above the new limit goes to nobody.
/// (Before, only the worker's controller brought the tickets down: without
/// it, each release went on admitting under the old limit.)
#[test]
fn a_lowered_limit_binds_while_the_worker_is_away() {
    // The parked sessions' own guarantee must not admit while this watches.
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "4"), ("pg_gatekeeper.progress_timeout", "60s")]);
    let mut holders: Vec<Session> = (0..4).map(|k| idle_in_transaction(&c, &format!("H{k}"))).collect();
    // Nobody queued: nothing is lent.
    c.wait_status("4 holders on 4 tickets", |s| s.admitted() == 4 && s.tickets() == 4);
    wait_until("the worker runs", Duration::from_secs(5), || c.worker_pid().is_some());
    let pid = c.worker_pid().expect("the worker runs");
    let stopped = Cluster::stop_process(pid);
    c.admin_exec("ALTER SYSTEM SET pg_gatekeeper.max_active = 1");
    c.admin_exec("SELECT pg_reload_conf()");
    // The observer's reading of the status applies the reload.
    let s = c.wait_status("the reload applied", |s| s.max_active() == 1);
    assert_eq!(s.tickets(), 1, "the tickets stayed above the lowered limit");
    let w = c.app("W").spawn("SELECT 1");
    c.wait_queued("W");
    for (k, h) in holders.iter_mut().enumerate().take(3) {
        h.ok("COMMIT");
        let s = c.status();
        assert_eq!((s.admitted(), s.queued()), (3 - k as i64, 1), "a place freed above the limit was handed on");
    }
    holders[3].ok("COMMIT");
    w.join_ok(PROMPT);
    drop(stopped);
    c.assert_quiet();
}

/// A class defined while every class entry is taken (a dropped class still
/// serves a session) has its sessions admitted as with no class, and the
/// server log says so once per process: not again at each of the worker's
/// passes, every 10 s. The class gets its entry at the worker's first pass
/// after the dropped class's session is gone.
#[test]
fn a_class_with_no_entry_free_is_logged_once_and_gets_one_later() {
    let defs = |from: u32, to: u32| (from..=to).map(|k| format!("c{k} (weight = 1)")).collect::<Vec<_>>().join(", ");
    let c = Cluster::start(&[("pg_gatekeeper.classes", &defs(1, 14))]);
    c.admin_exec(
        "CREATE ROLE r1 LOGIN; ALTER ROLE r1 SET pg_gatekeeper.class = 'c1';
         CREATE ROLE r15 LOGIN; ALTER ROLE r15 SET pg_gatekeeper.class = 'c15';",
    );
    let mut old = c.session_as("r1", "old");
    old.ok("BEGIN");
    old.ok("SELECT 1");
    // c1 dropped and c15 defined: c1 keeps its entry while `old` holds a place.
    c.set_conf(&[("pg_gatekeeper.classes", &defs(2, 15))]);
    let line = "pg_gatekeeper: class \"c15\" has no entry free yet";
    wait_until("the reload is applied and logged", Duration::from_secs(5), || count_lines(&c.log_text(), line) >= 1);
    let mut new = c.session_as("r15", "new");
    new.ok("SELECT 1");
    let logged = count_lines(&c.log_text(), line);
    // The worker applies the settings again every 10 s: past one such pass.
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(count_lines(&c.log_text(), line), logged, "logged again at the worker's pass");
    let classes = || -> Vec<String> {
        c.admin_query("SELECT class::text FROM gatekeeper.classes", &[]).iter().map(|r| r.get(0)).collect()
    };
    assert!(!classes().contains(&"c15".to_string()));
    // A route to it is refused as such, not as a class that is not defined.
    let e = c.admin_try("SELECT gatekeeper.route_shape(4242, 'c15')").expect_err("a route to a class with no entry");
    let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!((db.code().code(), db.message()), ("55000", "class \"c15\" has no entry free yet"), "{db:?}");
    assert!(db.hint().is_some(), "{db:?}");
    old.ok("COMMIT");
    wait_until("c15 has its entry", Duration::from_secs(15), || classes().contains(&"c15".to_string()));
    // `old`'s last class, c1, is gone, and its entry is c15's now: the view
    // names no class for it, not c15.
    let class_of = |name: &str| -> Option<String> {
        c.admin_query("SELECT class::text FROM gatekeeper.sessions WHERE application_name = $1", &[&name])[0].get(0)
    };
    assert_eq!(class_of("old"), None);
    c.admin_exec("SELECT gatekeeper.route_shape(4242, 'c15'), gatekeeper.unroute_shape(4242)");
    assert!(!classes().contains(&"c1".to_string()), "c1 is gone");
    new.ok("SELECT 1");
    assert_eq!(count_lines(&c.log_text(), line), logged);
    c.assert_quiet();
}

/// A backend reads a reload at its next command but applies it only at its
/// next admission, which a lock wait in parse analysis (before the gate) can
/// put off past a newer reload: that backend must not bring the older
/// settings back.
#[test]
fn a_backend_does_not_bring_back_a_superseded_reload() {
    let c = Cluster::start(LIMIT_ONE);
    c.admin_exec("CREATE TABLE superseded (x int); GRANT SELECT ON superseded TO PUBLIC");
    let mut a = c.app("late");
    a.ok("SELECT 1");
    c.set_conf(&[("pg_gatekeeper.max_active", "3")]);
    // SHOW needs no admission: the backend reads the reload, applies nothing.
    wait_until("the backend read max_active = 3", Duration::from_secs(5), || {
        let v: String = a.client.query_one("SHOW pg_gatekeeper.max_active", &[]).unwrap().get(0);
        v == "3"
    });
    let mut locker = c.superuser("locker");
    locker.ok("BEGIN; LOCK TABLE superseded IN ACCESS EXCLUSIVE MODE");
    let waiting = a.spawn("SELECT count(*) FROM superseded");
    c.wait_for_event("late", "relation");
    c.set_conf(&[("pg_gatekeeper.max_active", "5")]);
    locker.ok("COMMIT");
    waiting.join_ok(Duration::from_secs(10));
    // The worker puts the settings in force back within its next pass (up
    // to 10 s): read at once, before it can.
    assert_eq!(c.status().max_active(), 5, "the backend's admission re-applied the older reload");
    c.assert_quiet();
}
