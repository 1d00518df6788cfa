//! The progress guarantee (docs/DESIGN.md §13): the gate never waits
//! forever, even when a wait cycle runs through a client or a loopback
//! connection, where neither PostgreSQL's deadlock detector nor the gate's
//! deadlock breaker can see it. Each test here hung on a gate without the
//! guarantee; each waits with a bound, so that it fails instead.
//!
//! The bound stated in the docs: a parked session in a stuck scope is
//! admitted within `progress_timeout` (1 s by default) plus a few samples.
//! These tests allow `STUCK_BOUND` for it.
//!
//! Gated sessions are role `app`; the observer is the exempt superuser.

mod common;

use std::time::{Duration, Instant};

use common::{count_lines, wait_until, Cluster, Running, Session};

/// How long a parked query of a stuck scope may take, the progress timeout
/// (1 s) included, with room for a busy test machine.
const STUCK_BOUND: Duration = Duration::from_secs(6);

/// Table `t` with one row, readable by `app`.
fn create_t(c: &Cluster) {
    c.admin_exec(
        "CREATE TABLE t (id int PRIMARY KEY, v int);
         INSERT INTO t VALUES (1, 0);
         ALTER TABLE t OWNER TO app;",
    );
}

/// `n` sessions that each open a block (admitted at its first statement)
/// and then read `t`, which waits for `A`'s lock. Returns them once all wait
/// on it. (A first statement that read `t` would wait for the lock in parse
/// analysis, before it asks for an admission, and hold no place.)
fn lock_waiters(c: &Cluster, n: usize) -> Vec<Running> {
    let waiters: Vec<Running> =
        (0..n).map(|k| c.app(&format!("B{k}")).spawn("BEGIN; SELECT 1; SELECT count(*) FROM t; COMMIT")).collect();
    wait_until(&format!("{n} sessions wait on A's lock or in the queue"), Duration::from_secs(20), || {
        c.admin_i64(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'B%'
               AND (wait_event_type = 'Lock' OR wait_event = 'Extension')",
        ) == n as i64
    });
    waiters
}

/// The two-connection client of docs/DESIGN.md §13: A holds a table lock
/// and idles in its transaction while lock waiters fill the places; the
/// same client then needs a short query on a second connection C before
/// it commits A. C must get in, and everything then finishes.
fn a_client_waiting_on_its_own_parked_query_is_not_stranded(
    conf: &[(&str, &str)],
    waiters: impl Fn(&Cluster) -> usize,
) {
    let c = Cluster::start(conf);
    create_t(&c);
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("LOCK TABLE t");
    let n = waiters(&c);
    let bs = lock_waiters(&c, n);
    let overflow_before = c.status().int("overflow_total");

    // The client now needs C before it commits A.
    let t0 = Instant::now();
    let done = c.app("C").spawn("SELECT 1").join_ok(STUCK_BOUND);
    assert!(t0.elapsed() < STUCK_BOUND, "C took {:?}", t0.elapsed());
    assert!(c.status().int("overflow_total") > overflow_before, "C was admitted over the limit");
    // The worker logs an admission just after it wakes the session.
    wait_until("the admission is logged", Duration::from_secs(5), || {
        c.log_text().contains("over the limit: no holder worked")
    });
    drop(done);

    a.ok("COMMIT");
    for b in bs {
        b.join_ok(Duration::from_secs(20));
    }
    c.assert_quiet();
}

#[test]
fn two_connections_of_one_client_at_max_active_2() {
    let conf = [("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.stall_timeout", "500ms")];
    a_client_waiting_on_its_own_parked_query_is_not_stranded(&conf, |_| 4);
}

#[test]
fn two_connections_of_one_client_at_the_defaults_with_many_lock_waiters() {
    // The defaults: automatic limit, stall relief at 500 ms. Enough lock
    // waiters to hold every place even with stall relief (20 on 2 CPUs).
    let conf = [("pg_gatekeeper.stall_timeout", "500ms"), ("max_connections", "200")];
    a_client_waiting_on_its_own_parked_query_is_not_stranded(&conf, |c| {
        let limit = c.status().max_active() as usize;
        (2 * limit + 4).min(150)
    });
}

/// A cluster with no worker (no background worker slot for it) and one
/// place, which A holds, idle in its transaction.
fn workerless_with_a_holder() -> (Cluster, Session) {
    let c = Cluster::start(&[
        ("max_worker_processes", "0"),
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
    ]);
    assert_eq!(c.worker_count(), 0, "a worker runs");
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("SELECT 1");
    (c, a)
}

/// Without the worker (no background worker slot for it) the guarantee is
/// the parked sessions' own: the head of a queue that stood still admits
/// itself once the worker has not sampled for 10 s (or `progress_timeout`,
/// if longer), one session per 10 s and class. The client's cycle: A holds
/// the only place, idle in its transaction, while its client waits for C.
#[test]
fn without_the_worker_a_cycle_through_a_client_ends_after_the_bound() {
    let (c, mut a) = workerless_with_a_holder();
    let t0 = Instant::now();
    // One after the other, so that C is the head: two spawns race.
    let first = c.app("C").spawn("SELECT 1");
    assert_eq!(c.wait_queued("C"), 1);
    let second = c.app("D").spawn("SELECT 2");
    assert_eq!(c.wait_queued("D"), 2);
    // Not before the bound: until then C and D are parked behind A.
    common::assert_stays_queued(&c, &first, Duration::from_secs(5));
    first.join_ok(Duration::from_secs(20));
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(9), "C was admitted after {took:?}, before the bound");
    wait_until("the admission is logged", Duration::from_secs(5), || {
        c.log_text().contains("over the limit: the worker has not sampled since the server started")
    });
    // D is next, a bound after C (its watch starts when C goes in).
    assert_eq!(c.status().queued(), 1, "D went in with C");
    second.join_ok(Duration::from_secs(20));
    assert!(t0.elapsed() >= took + Duration::from_secs(9), "D was admitted {:?} after C", t0.elapsed() - took);
    assert_eq!(c.status().int("overflow_total"), 2);
    a.ok("COMMIT");
    c.assert_quiet();
}

/// Without the worker, nobody wakes the sessions behind a queue's head
/// when the head is admitted: each looks every second, so that its watch
/// counts from the admission it saw, not from its next ten-second look.
/// A hands its place to C at its COMMIT; C then holds it (a long query);
/// D, behind C, admits itself a bound after C went in, not two.
#[test]
fn without_the_worker_the_session_behind_the_head_sees_the_head_admitted() {
    let (c, mut a) = workerless_with_a_holder();
    let holder = c.app("C");
    let cancel_c = holder.cancel_token();
    let long = holder.spawn("SELECT pg_sleep(60)");
    c.wait_queued("C");
    let behind = c.app("D").spawn("SELECT 2");
    c.wait_queued("D");
    // A's place goes to C, the head; D, behind it, is not woken.
    a.ok("COMMIT");
    let handed = Instant::now();
    wait_until("C is admitted", Duration::from_secs(5), || c.status().queued() == 1);
    let d = behind.join_ok(Duration::from_secs(30));
    let after = d.finished - handed;
    assert!(after >= Duration::from_secs(9), "D was admitted {after:?} after C, before the bound");
    // A session that looked only every 10 s took up to two bounds.
    assert!(after < Duration::from_secs(15), "D was admitted {after:?} after C went in");
    assert_eq!(c.status().int("overflow_total"), 1);
    cancel_c.cancel_query(postgres::NoTls).expect("cancel C");
    let done = long.join(Duration::from_secs(10));
    assert_eq!(common::sqlstate(&done.result).as_deref(), Some("57014"), "C: {:?}", done.result);
    c.assert_quiet();
}

/// A dblink call into the same server from a class capped at 1: the
/// caller holds the class's only place while the session it opened waits
/// for that place. On PostgreSQL 15 and 16 the caller shows no wait event
/// (libpq's poll()), so only a probe of its CPU time tells it does no work.
#[test]
fn a_dblink_loopback_from_a_class_capped_at_1_returns() {
    let c = Cluster::start(&[("pg_gatekeeper.classes", "loop (max_active = 1)")]);
    c.admin_exec("CREATE EXTENSION dblink; ALTER ROLE app SET pg_gatekeeper.class = 'loop'");
    // dblink needs a password from a non-superuser, so the call runs in a
    // SECURITY DEFINER function; the inner session logs in as app.
    let connstr = format!("host={} port={} dbname=postgres user=app application_name=inner", c.dir.display(), c.port);
    c.admin_exec(&format!(
        "CREATE FUNCTION loopback() RETURNS int LANGUAGE sql SECURITY DEFINER
           AS $$ SELECT x FROM dblink('{connstr}', 'SELECT 41 + 1') AS r(x int) $$;
         GRANT EXECUTE ON FUNCTION loopback() TO app;"
    ));

    // Without the guarantee the call never returns, and dblink's wait for
    // its result does not see a cancel or statement_timeout before
    // PostgreSQL 17: the test waits in a thread of its own, with a bound.
    let call = c.app("outer").spawn_with(|client| {
        let x: i32 = client.query_one("SELECT loopback()", &[])?.get(0);
        assert_eq!(x, 42, "the loopback call's result");
        Ok(())
    });
    let done = call.join_ok(STUCK_BOUND);
    assert!(done.elapsed < STUCK_BOUND, "the loopback call took {:?}", done.elapsed);
    // The worker logs an admission just after it wakes the session.
    wait_until("the admission is logged", Duration::from_secs(5), || c.log_text().contains("over its class's cap"));
    c.assert_quiet();
}

/// PostgreSQL's isolation tester in miniature: 8 sessions deadlock on rows
/// in a ring, one step at a time, while the driver checks after each step
/// whether the session is blocked, through a ninth, gated connection. The
/// driver's own query needs a place while lock waiters and idle blocks hold
/// them all; PostgreSQL's deadlock detector then ends the ring as it would
/// without the gate: exactly one session fails with 40P01.
#[test]
fn a_ring_of_8_deadlocking_sessions_driven_from_a_ninth_connection() {
    const N: usize = 8;
    // Stall relief at its default, as in the isolation tests: stalled lock
    // waiters keep the worker sampling, so the tickets lent while the
    // sessions idled are taken back and the driver's polls park.
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.stall_timeout", "500ms"),
        ("deadlock_timeout", "200ms"),
    ]);
    c.admin_exec(&format!(
        "CREATE TABLE ring (id int PRIMARY KEY, v int);
         INSERT INTO ring SELECT g, 0 FROM generate_series(0, {}) g;
         ALTER TABLE ring OWNER TO app;",
        N - 1
    ));
    let mut driver = c.app("driver");
    // Without the guarantee the driver's poll never returns: fail instead.
    driver.ok("SET statement_timeout = '10s'");
    let mut sessions: Vec<Session> = (0..N).map(|k| c.app(&format!("s{k}"))).collect();
    let pids: Vec<i32> =
        sessions.iter_mut().map(|s| s.client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)).collect();
    let t0 = Instant::now();
    for (k, s) in sessions.iter_mut().enumerate() {
        s.ok(&format!("BEGIN; UPDATE ring SET v = v + 1 WHERE id = {k}"));
    }
    // Each step: send it, then poll (as the tester does) until it returns or
    // is seen blocked on a lock, from the driver's own gated connection.
    let mut running: Vec<Running> = vec![];
    for (k, s) in sessions.into_iter().enumerate() {
        let step = s.spawn(&format!("UPDATE ring SET v = v + 1 WHERE id = {}", (k + 1) % N));
        let step_t0 = Instant::now();
        loop {
            let waits: Option<String> = driver
                .client
                .query_one("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", &[&pids[k]])
                .unwrap()
                .get(0);
            if step.is_finished() || waits.as_deref() == Some("Lock") {
                break;
            }
            assert!(step_t0.elapsed() < Duration::from_secs(10), "step {k} neither returned nor blocked");
        }
        // Pace the steps as the tester's are on a busy machine: each blocked
        // session stalls before the next step, so the worker takes back the
        // tickets it lent while the sessions idled.
        if k + 1 < N {
            wait_until(&format!("s{k} is stalled"), Duration::from_secs(5), || {
                c.admin_i64(&format!(
                    "SELECT count(*) FROM gatekeeper.sessions WHERE application_name = 's{k}' AND stalled"
                )) == 1
            });
        }
        running.push(step);
    }
    // Finish each step as it returns: the victim's rollback lets the one
    // before it update, whose commit lets the one before that, and so on.
    let mut deadlocked = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running.is_empty() {
        assert!(Instant::now() < deadline, "{} steps never returned", running.len());
        let Some(k) = running.iter().position(|r| r.is_finished()) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let d = running.swap_remove(k).join(Duration::from_secs(1));
        let mut s = d.session;
        match common::sqlstate(&d.result).as_deref() {
            None => s.ok("COMMIT"),
            Some("40P01") => {
                deadlocked += 1;
                s.ok("ROLLBACK");
            }
            Some(code) => panic!("{}: SQLSTATE {code}: {:?}", s.name, d.result),
        }
    }
    assert_eq!(deadlocked, 1, "PostgreSQL's deadlock detector ends the ring once");
    // Each of the 8 steps' polls may wait up to one stuck-scope bound.
    assert!(t0.elapsed() < STUCK_BOUND * N as u32, "the ring took {:?}", t0.elapsed());
    assert_eq!(c.admin_i64("SELECT sum(v) FROM ring"), (2 * N - 2) as i64, "every other update committed");
    c.assert_quiet();
}

/// The bound: the guarantee admits one batch per quiet timeout, batches
/// doubling (1, 2, ... at most the limit) while the scope stays stuck. Two
/// sessions hold both places and sleep, with lending off; of the four
/// queued behind them, one gets in after a timeout and two more after
/// another.
#[test]
fn the_guarantee_admits_one_batch_per_quiet_timeout() {
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.max_tickets", "2")]);
    let sleepers: Vec<Running> = (0..2).map(|k| c.app(&format!("sleep{k}")).spawn("SELECT pg_sleep(8)")).collect();
    c.wait_status("two sleepers hold the places", |s| s.admitted() == 2);
    // Before the four connect: the guarantee's clock runs while they do.
    let t0 = Instant::now();
    let queued: Vec<Running> = (0..4).map(|k| c.app(&format!("q{k}")).spawn("SELECT pg_sleep(8)")).collect();
    c.wait_status("four queued", |s| s.queued() == 4);
    c.wait_status_for("a first session admitted over the limit", STUCK_BOUND, |s| s.admitted() >= 3);
    let first = t0.elapsed();
    assert_eq!(c.status().admitted(), 3, "the first batch is one session");
    c.wait_status_for("a second batch of two", STUCK_BOUND, |s| s.admitted() >= 5);
    let second = t0.elapsed();
    // The timeout is 1 s; the clock starts at the last admission, a little
    // before t0, or when the queue is first sampled, after it.
    assert!(first >= Duration::from_millis(700), "first batch after {first:?}");
    assert!(second > first);
    // Between the batches, the server's own clock: the guarantee logs each
    // admission (log_line_prefix %m), where a client's polls on a loaded
    // machine may see the first batch late and the second on time.
    wait_until("the three admissions are logged", Duration::from_secs(5), || {
        count_lines(&c.log_text(), "over the limit: no holder worked") >= 3
    });
    let log = c.log_text();
    let at: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("over the limit: no holder worked"))
        .take(3)
        .map(|l| {
            let hms: Vec<f64> = l[11..23].split(':').map(|x| x.parse().unwrap()).collect();
            hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]
        })
        .collect();
    assert_eq!(at.len(), 3, "the first three admissions by the guarantee:\n{log}");
    assert!(at[1] - at[0] >= 0.9, "second batch {:.3} s after the first:\n{log}", at[1] - at[0]);
    // One batch: its admissions together, batches at least 0.9 s apart.
    assert!(at[2] - at[1] < 0.5, "the second batch is one batch:\n{log}");
    assert!(c.status().int("overflow_total") >= 3);
    for r in sleepers.into_iter().chain(queued) {
        r.join_ok(Duration::from_secs(30));
    }
    c.assert_quiet();
}

/// Holders that compute never trigger the guarantee, however long their
/// statements: the queue waits for them as before.
#[test]
fn computing_holders_keep_the_queue_waiting() {
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1")]);
    c.admin_exec(
        "CREATE FUNCTION spin(secs float8) RETURNS void LANGUAGE plpgsql AS $$
         BEGIN WHILE clock_timestamp() < statement_timestamp() + make_interval(secs => secs) LOOP END LOOP; END $$",
    );
    let before = c.status().int("overflow_total");
    let busy = c.app("busy").spawn("SELECT spin(4)");
    c.wait_status("busy holds the place", |s| s.admitted() == 1);
    let waiting = c.app("waiting").spawn("SELECT 1");
    c.wait_queued("waiting");
    common::assert_stays_queued(&c, &waiting, Duration::from_millis(2500));
    busy.join_ok(Duration::from_secs(30));
    waiting.join_ok(Duration::from_secs(5));
    assert_eq!(c.status().int("overflow_total"), before, "nobody admitted over the limit");
    c.assert_quiet();
}

/// Transactions in the long lane take no place from the gate's queue, so a
/// stream of them does not move it: a session parked behind a holder that
/// does nothing is admitted by the guarantee all the same.
#[test]
fn a_stream_of_lane_transactions_does_not_hide_a_stuck_gate() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.classes", "long (max_active = 1)"),
    ]);
    // A shape routed into the lane: the only one `app` has run yet.
    let mut lane = c.app("lane");
    lane.ok("SELECT 'lane'::text");
    wait_until("the lane's shape is recorded", Duration::from_secs(5), || {
        c.admin_i64("SELECT count(*) FROM gatekeeper.shapes WHERE userid = 'app'::regrole") == 1
    });
    c.admin_exec(
        "SELECT gatekeeper.route_shape((SELECT queryid FROM gatekeeper.shapes WHERE userid = 'app'::regrole), 'long')",
    );
    // The only place, held by a transaction that idles.
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("SELECT 1");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = lane.looping("SELECT 'lane'::text", &stop);
    c.wait_status("the lane admits", |s| s.int("admitted_total") > 20);
    let before = c.status().int("overflow_total");
    let w = c.app("W").spawn("SELECT 2");
    w.join_ok(STUCK_BOUND);
    // W parked and the guarantee admitted it, over the limit: A still holds
    // the only place (a W let straight in would not count here).
    assert!(c.status().int("overflow_total") > before, "W got in without the guarantee");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    stream.join_ok(Duration::from_secs(10));
    a.ok("COMMIT");
    c.assert_quiet();
}

/// A client's second connection W, queued in its class while its first
/// connection A holds the class's place idle in transaction, and another
/// class keeps the gate busy with short transactions. Fair sharing gives
/// every free place to the busy class (A's idle place is its class's
/// share), and the busy class's admissions move the gate's scope: W waited
/// as long as the busy class ran. The class's own scope finds it stuck and
/// owes it the next free place, within the limit.
#[test]
fn a_class_waiting_on_its_own_queue_gets_in_while_another_keeps_the_gate_busy() {
    a_class_waiting_on_its_own_queue_gets_in_beside("busy");
}

/// The same beside a busy class capped at one place: whenever the
/// progress guarantee looks, that class is at its cap, so no other class
/// could take a free place at that moment; but the place its holder frees
/// puts it below its cap, and fair sharing gives that place back to it
/// every time. W waited as long as the busy class had a backlog (a place
/// was owed only while another class could take one at the very moment).
#[test]
fn a_class_waiting_on_its_own_queue_gets_in_beside_a_capped_class_with_a_backlog() {
    a_class_waiting_on_its_own_queue_gets_in_beside("busy (max_active = 1)");
}

fn a_class_waiting_on_its_own_queue_gets_in_beside(busy_class: &str) {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.max_tickets", "2"),
        ("pg_gatekeeper.classes", busy_class),
    ]);
    c.admin_exec("CREATE ROLE busy LOGIN; ALTER ROLE busy SET pg_gatekeeper.class = 'busy'");
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("SELECT 1");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Short sleeps: a queue that never empties on a loaded machine, and no
    // work (a sleep is not work), so only their admissions move the gate.
    let busy: Vec<Running> =
        (0..8).map(|k| c.session_as("busy", &format!("busy{k}")).looping("SELECT pg_sleep(0.01)", &stop)).collect();
    c.wait_status("the busy class queues", |s| s.queued() >= 1);
    let w = c.app("W").spawn("SELECT 2");
    // Fair sharing gives every free place to the busy class first.
    c.wait_queued("W");
    // W is owed a place ~1 s after it parks: 700 ms from its start, not
    // from when the poll saw it queued.
    common::assert_stays_queued(&c, &w, Duration::from_millis(700).saturating_sub(w.started.elapsed()));
    w.join_ok(STUCK_BOUND);
    wait_until("the place owed is logged", Duration::from_secs(5), || {
        c.log_text().contains("pg_gatekeeper: class default is owed a place")
    });
    assert_eq!(c.status().int("overflow_total"), 0, "within the limit");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in busy {
        r.join_ok(Duration::from_secs(10));
    }
    a.ok("COMMIT");
    c.assert_quiet();
}

/// A client's second connection W, queued in its class while its first
/// connection A holds a place with a table lock, idle in its transaction;
/// a heavy class holds the other place waiting on A's lock and queues more
/// sessions that would wait on it too. W parks first, so the gate's scope
/// and W's class's go quiet at the same sample and are found stuck
/// together, every progress timeout. The gate's batch went by fair share,
/// to the heavy class each time (a weight of 1000 against 1), and W's
/// class, stuck in the same sample, was not owed a place: W waited until
/// the heavy backlog had gone in, two sessions a timeout. A class stuck
/// with the gate is owed its place before the gate's batch, which serves
/// it first.
#[test]
fn a_class_stuck_together_with_the_gate_gets_the_gates_batch_first() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "2"),
        ("pg_gatekeeper.max_tickets", "2"),
        ("pg_gatekeeper.classes", "heavy (weight = 1000)"),
    ]);
    create_t(&c);
    c.admin_exec(
        "CREATE ROLE heavy LOGIN; ALTER ROLE heavy SET pg_gatekeeper.class = 'heavy';
         GRANT SELECT ON t TO heavy",
    );
    let mut a = c.app("A");
    a.ok("BEGIN");
    a.ok("LOCK TABLE t");
    // Admitted at its first statement, then waits on A's lock.
    let reader = "BEGIN; SELECT 1; SELECT count(*) FROM t; COMMIT";
    let h0 = c.session_as("heavy", "H0").spawn(reader);
    wait_until("H0 waits on A's lock", Duration::from_secs(20), || {
        c.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'H0' AND wait_event_type = 'Lock'")
            == 1
    });
    let t0 = Instant::now();
    let w = c.app("W").spawn("SELECT 2");
    c.wait_queued("W");
    let backlog: Vec<Running> = (1..=24).map(|k| c.session_as("heavy", &format!("H{k}")).spawn(reader)).collect();
    c.wait_status("the heavy backlog queues", |s| s.queued() >= 20);
    w.join_ok(STUCK_BOUND);
    // A timeout or two, and the backlog's connections. Two heavy sessions
    // a timeout took 12 s and more.
    assert!(t0.elapsed() < Duration::from_secs(8), "W took {:?}", t0.elapsed());
    wait_until("the place owed is logged", Duration::from_secs(5), || {
        c.log_text().contains("pg_gatekeeper: class default is owed a place")
    });
    a.ok("COMMIT");
    for r in std::iter::once(h0).chain(backlog) {
        r.join_ok(Duration::from_secs(60));
    }
    c.assert_quiet();
}
