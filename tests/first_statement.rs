//! Every transaction is admitted at its first statement that needs an
//! admission, explicit blocks included (docs/DESIGN.md §4): BEGIN takes no
//! place and never waits; the block's first gated statement parks, holding
//! what its parse analysis took, and raises the wait's error itself.
//!
//! One ticket and no lending, as in `gate.rs`; a holder idles in its block
//! with the only place. `queue_timeout` is a safety net only (a wait that
//! should end never hangs the test), except where a test sets its own.
//! Every test ends with `assert_quiet`.

mod common;

use std::time::{Duration, Instant};

use common::{sqlstate, wait_until, Cluster, Session, Wire, WireReply};
use postgres::SimpleQueryMessage;

/// The progress guarantee is out of the way: the holder idles on purpose.
const CONF: &[(&str, &str)] = &[
    ("pg_gatekeeper.max_active", "1"),
    ("pg_gatekeeper.max_tickets", "1"),
    ("pg_gatekeeper.queue_timeout", "5s"),
    ("pg_gatekeeper.progress_timeout", "1h"),
];

const PROMPT: Duration = Duration::from_secs(2);

/// Table `t` (one row) that `app` may read and write.
fn cluster() -> Cluster {
    let c = Cluster::start(CONF);
    c.admin_exec(
        "CREATE TABLE t (id int PRIMARY KEY);
         INSERT INTO t VALUES (1);
         GRANT ALL ON t TO app;",
    );
    c
}

/// A gated session whose block holds the only place.
fn holder(c: &Cluster) -> Session {
    let mut h = c.app("holder");
    h.ok("BEGIN; SELECT 1");
    assert_eq!(c.status().admitted(), 1);
    h
}

/// BEGIN returns at once, with the gate full, and takes no place.
fn begin(c: &Cluster, s: &mut Session, sql: &str) {
    let t0 = Instant::now();
    s.ok(sql);
    assert!(t0.elapsed() < Duration::from_secs(2), "{sql} waited {:?}", t0.elapsed());
    let st = c.status();
    assert_eq!((st.admitted(), st.queued()), (1, 0), "{sql} alone took or asked for a place");
}

/// The statement that the session named `name` runs now (pg_stat_activity).
fn current_query(c: &Cluster, name: &str) -> String {
    let rows = c.admin_query("SELECT query FROM pg_stat_activity WHERE application_name = $1", &[&name]);
    rows.first().map(|r| r.get(0)).unwrap_or_default()
}

/// Whether the session named `name` holds a lock on table `t`.
fn locks_t(c: &Cluster, name: &str) -> bool {
    c.admin_i64(&format!(
        "SELECT count(*) FROM pg_locks
          WHERE relation = 't'::regclass AND granted AND pid = {}",
        c.pid_of(name)
    )) > 0
}

#[test]
fn begin_takes_no_place_and_the_first_statement_parks_holding_its_locks() {
    let c = cluster();
    let mut h = holder(&c);
    let mut w = c.app("waiter");
    begin(&c, &mut w, "BEGIN");
    // Statements that need no admission run in the block meanwhile.
    w.ok("SET LOCAL work_mem = '8MB'; SAVEPOINT s; SHOW work_mem");
    assert_eq!(c.status().queued(), 0);

    let run = w.spawn("SELECT count(*) FROM t");
    c.wait_queued("waiter");
    assert_eq!(current_query(&c, "waiter"), "SELECT count(*) FROM t");
    assert!(locks_t(&c, "waiter"), "the parked statement holds its parse-time lock on t");
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    // Admitted for the rest of the block.
    assert_eq!(c.session("waiter").unwrap().state, "idle in transaction");
    w.ok("SELECT 2; COMMIT");
    c.assert_quiet();
}

/// The wait's error comes from the first statement, which aborts the block:
/// what follows fails with 25P02 until ROLLBACK.
#[test]
fn a_timed_out_first_statement_aborts_the_block() {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.queue_timeout", "300ms"),
        ("pg_gatekeeper.progress_timeout", "1h"),
    ]);
    let mut h = holder(&c);
    let mut w = c.app("waiter");
    begin(&c, &mut w, "START TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    let t0 = Instant::now();
    let r = w.exec("SELECT 1");
    assert!(t0.elapsed() >= Duration::from_millis(250), "the first statement did not wait: {:?}", t0.elapsed());
    assert_eq!(sqlstate(&r).as_deref(), Some("53000"), "{r:?}");
    let e = r.unwrap_err();
    let detail = e.as_db_error().and_then(|d| d.detail()).unwrap_or_default().to_string();
    assert!(detail.starts_with("Waited "), "DETAIL: {detail}");
    let r = w.exec("SELECT 2");
    assert_eq!(sqlstate(&r).as_deref(), Some("25P02"), "{r:?}");
    w.ok("ROLLBACK");
    let s = c.status();
    assert_eq!((s.int("queue_timeouts_total"), s.queued(), s.admitted()), (1, 0, 1));
    h.ok("COMMIT");
    w.ok("BEGIN; SELECT 1; COMMIT");
    c.assert_quiet();
}

/// Prepared statements, as `pgbench -M prepared` runs them: Parse once,
/// then Bind and Execute of the named statement in each block; and SQL's
/// PREPARE / EXECUTE.
#[test]
fn a_prepared_statement_first_in_a_block_parks() {
    let c = cluster();
    let mut w = c.app("waiter");
    // Prepared while the gate is open.
    let stmt = w.client.prepare("SELECT count(*) + $1 FROM t").unwrap();
    w.ok("PREPARE p(int) AS SELECT count(*) + $1 FROM t");
    let mut h = holder(&c);

    begin(&c, &mut w, "BEGIN");
    let run = w.spawn_with(move |client| {
        let rows = client.query(&stmt, &[&41i64])?;
        assert_eq!(rows[0].get::<_, i64>(0), 42);
        Ok(())
    });
    c.wait_queued("waiter");
    assert!(locks_t(&c, "waiter"));
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    w.ok("COMMIT");

    let mut h = holder(&c);
    begin(&c, &mut w, "BEGIN");
    let run = w.spawn("EXECUTE p(1)");
    c.wait_queued("waiter");
    assert_eq!(current_query(&c, "waiter"), "EXECUTE p(1)");
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    w.ok("COMMIT");
    c.assert_quiet();
}

/// A named statement executed over the extended protocol in a block opened
/// with the simple protocol.
#[test]
fn a_bound_named_statement_first_in_a_block_parks() {
    let c = cluster();
    let mut w = Wire::connect(&c, "app", "waiter");
    assert!(matches!(w.parse("s", "SELECT count(*) + $1::int FROM t"), WireReply::Value(None)));
    let mut h = holder(&c);
    let t0 = Instant::now();
    assert!(matches!(w.query("BEGIN"), WireReply::Value(None)));
    assert!(t0.elapsed() < Duration::from_secs(2), "BEGIN waited {:?}", t0.elapsed());
    assert_eq!(c.status().queued(), 0);
    let run = w.spawn_bind_execute("s", &["41"]);
    c.wait_queued("waiter");
    assert!(locks_t(&c, "waiter"));
    h.ok("COMMIT");
    wait_until("the execution returns", PROMPT, || run.is_finished());
    let (mut w, r) = run.join().unwrap();
    assert!(matches!(r, WireReply::Value(Some(ref v)) if v == "42"), "{r:?}");
    assert!(matches!(w.query("COMMIT"), WireReply::Value(None)));
    c.assert_quiet();
}

/// A pipeline sends the whole block before reading anything: BEGIN runs,
/// the first statement parks, and the rest follows once it is admitted. With
/// a timeout, the first statement's error skips the rest up to Sync and
/// leaves the block aborted.
#[test]
fn a_pipelined_block_parks_at_its_first_statement() {
    let c = cluster();
    let mut h = holder(&c);
    let mut w = Wire::connect(&c, "app", "waiter");
    let run = std::thread::spawn(move || {
        w.send_pipeline(&["BEGIN", "SELECT count(*) FROM t", "INSERT INTO t VALUES (2)", "COMMIT"]);
        let r = w.read_reply();
        (w, r)
    });
    c.wait_queued("waiter");
    assert_eq!(current_query(&c, "waiter"), "SELECT count(*) FROM t");
    assert!(locks_t(&c, "waiter"));
    h.ok("COMMIT");
    wait_until("the pipeline returns", PROMPT, || run.is_finished());
    let (_, r) = run.join().unwrap();
    assert!(matches!(r, WireReply::Value(Some(ref v)) if v == "1"), "{r:?}");
    assert_eq!(c.admin_i64("SELECT count(*) FROM t"), 2);

    // A short timeout for the next session of app alone.
    c.admin_exec("ALTER ROLE app SET pg_gatekeeper.queue_timeout = '300ms'");
    let mut h = holder(&c);
    let mut w = Wire::connect(&c, "app", "short");
    w.send_pipeline(&["BEGIN", "INSERT INTO t VALUES (3)", "COMMIT"]);
    match w.read_reply() {
        WireReply::Error { code, .. } => assert_eq!(code, "53000"),
        r => panic!("expected 53000, got {r:?}"),
    }
    // The client has the error before the backend reports its new state.
    wait_until("the block is aborted", PROMPT, || {
        c.activity_state("short").as_deref() == Some("idle in transaction (aborted)")
    });
    match w.query("SELECT 1") {
        WireReply::Error { code, .. } => assert_eq!(code, "25P02"),
        r => panic!("expected 25P02, got {r:?}"),
    }
    assert!(matches!(w.query("ROLLBACK"), WireReply::Value(None)));
    h.ok("COMMIT");
    assert_eq!(c.admin_i64("SELECT count(*) FROM t"), 2);
    c.assert_quiet();
}

/// DECLARE is the block's first gated statement; FETCH runs under its
/// admission.
#[test]
fn a_cursor_declared_first_in_a_block_parks() {
    let c = cluster();
    let mut h = holder(&c);
    let mut w = c.app("waiter");
    begin(&c, &mut w, "BEGIN");
    let run = w.spawn("DECLARE cur CURSOR FOR SELECT id FROM t");
    c.wait_queued("waiter");
    assert_eq!(current_query(&c, "waiter"), "DECLARE cur CURSOR FOR SELECT id FROM t");
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    let rows = w.client.query("FETCH 2 FROM cur", &[]).unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), [1]);
    assert_eq!(c.session("waiter").unwrap().state, "idle in transaction");
    w.ok("CLOSE cur; COMMIT");
    c.assert_quiet();
}

/// CALL is the block's first gated statement; the procedure runs under its
/// admission.
#[test]
fn a_procedure_called_first_in_a_block_parks() {
    let c = cluster();
    c.admin_exec(
        "CREATE PROCEDURE add_row(n int) LANGUAGE sql AS 'INSERT INTO t VALUES (n)';
         GRANT EXECUTE ON PROCEDURE add_row(int) TO app;",
    );
    let mut h = holder(&c);
    let mut w = c.app("waiter");
    begin(&c, &mut w, "BEGIN");
    let run = w.spawn("CALL add_row(5)");
    c.wait_queued("waiter");
    assert_eq!(c.admin_i64("SELECT count(*) FROM t"), 1, "the procedure ran unadmitted");
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    w.ok("COMMIT");
    assert_eq!(c.admin_i64("SELECT count(*) FROM t"), 2);
    c.assert_quiet();
}

/// A block that is idle after BEGIN holds no place, and COMMIT AND CHAIN of
/// such a block starts a chained block that is admitted at its first gated
/// statement in turn.
#[test]
fn an_idle_block_holds_no_place_and_its_chain_is_admitted_at_its_first_statement() {
    let c = cluster();
    let mut h = holder(&c);
    let mut w = c.app("waiter");
    begin(&c, &mut w, "BEGIN");
    begin(&c, &mut w, "COMMIT AND CHAIN");
    let run = w.spawn("SELECT 1");
    c.wait_queued("waiter");
    h.ok("COMMIT");
    let mut w = run.join_ok(PROMPT).session;
    // The admitted chained block passes its admission on to the next.
    w.ok("COMMIT AND CHAIN");
    assert_eq!(c.session("waiter").unwrap().state, "idle in transaction");
    assert_eq!(c.status().admitted(), 1);
    w.ok("SELECT 2; COMMIT");
    c.assert_quiet();
}

/// The oldest xmin the session named `name` holds (`pg_stat_activity`).
fn xmin_of(c: &Cluster, name: &str) -> Option<String> {
    let rows = c.admin_query("SELECT backend_xmin::text FROM pg_stat_activity WHERE application_name = $1", &[&name]);
    rows.first().and_then(|r| r.get(0))
}

/// A statement parked before planning in READ COMMITTED holds no snapshot
/// while it waits, over the simple and the extended protocol: it keeps its
/// parse-time lock, not the cleanup horizon, and once admitted it plans
/// with a fresh snapshot and sees what was committed while it waited.
/// REPEATABLE READ keeps its transaction snapshot through the wait and sees
/// nothing newer. A named statement with a parameter is planned afresh at
/// each of its first Binds: parked in the planner there, it holds no
/// snapshot either.
#[test]
fn a_statement_parked_before_planning_holds_no_snapshot_in_read_committed() {
    let c = cluster();
    let mut w = Wire::connect(&c, "app", "bound");
    assert!(matches!(w.parse("s", "SELECT count(*) + $1::int FROM t"), WireReply::Value(None)));
    let mut h = holder(&c);
    let simple = c.app("simple").spawn_with(|client| {
        let msgs = client.simple_query("SELECT count(*) FROM t")?;
        let n = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(n.as_deref(), Some("2"), "simple: the row committed during the wait is missing");
        Ok(())
    });
    c.wait_queued("simple");
    let extended = c.app("extended").spawn_with(|client| {
        let n: i64 = client.query_one("SELECT count(*) FROM t", &[])?.get(0);
        assert_eq!(n, 2, "extended: the row committed during the wait is missing");
        Ok(())
    });
    c.wait_queued("extended");
    let mut rr = c.app("repeatable");
    rr.ok("BEGIN ISOLATION LEVEL REPEATABLE READ");
    let repeatable = rr.spawn_with(|client| {
        let n: i64 = client.query_one("SELECT count(*) FROM t", &[])?.get(0);
        assert_eq!(n, 1, "repeatable: the transaction's snapshot must date from before its wait");
        client.batch_execute("COMMIT")
    });
    c.wait_queued("repeatable");
    let bound = w.spawn_bind_execute("s", &["40"]);
    c.wait_queued("bound");

    for name in ["simple", "extended", "bound"] {
        wait_until(&format!("{name} holds no xmin while parked"), PROMPT, || xmin_of(&c, name).is_none());
        assert!(locks_t(&c, name), "{name} keeps its parse-time lock on t");
    }
    assert!(xmin_of(&c, "repeatable").is_some(), "repeatable parked without its transaction's snapshot");
    c.admin_exec("INSERT INTO t VALUES (2)");
    h.ok("COMMIT");
    for r in [simple, extended, repeatable] {
        r.join_ok(PROMPT);
    }
    wait_until("the bound statement returns", PROMPT, || bound.is_finished());
    let (_, r) = bound.join().unwrap();
    assert!(matches!(r, WireReply::Value(Some(ref v)) if v == "42"), "bound: {r:?}");
    c.assert_quiet();
}

/// A Parse message or SQL PREPARE runs nothing, so it never parks, in a
/// block or outside one, with the gate full: the statement waits when it
/// runs. A client that prepares synchronously in the middle of a
/// transaction (`pgbench -M prepared` prepares each command at its first
/// use, with `PQprepare`) would otherwise stop on that wait, and with it
/// every connection it serves, idle in transaction with their places.
#[test]
fn a_parse_or_prepare_runs_nothing_and_never_parks() {
    let c = cluster();
    let mut h = holder(&c);
    let mut w = Wire::connect(&c, "app", "parse");
    let mut p = c.app("prepare");
    let t0 = Instant::now();
    let r = w.parse("u", "UPDATE t SET id = id WHERE id = $1");
    assert!(matches!(r, WireReply::Value(None)), "Parse outside a block: {r:?}");
    let r = w.query("BEGIN");
    assert!(matches!(r, WireReply::Value(None)), "BEGIN: {r:?}");
    let r = w.parse("s", "SELECT count(*) + $1::int FROM t");
    assert!(matches!(r, WireReply::Value(None)), "Parse in a block: {r:?}");
    p.ok("PREPARE outside AS SELECT count(*) FROM t");
    p.ok("BEGIN; PREPARE q AS UPDATE t SET id = id");
    assert!(t0.elapsed() < PROMPT, "preparing waited {:?}", t0.elapsed());
    let st = c.status();
    assert_eq!((st.admitted(), st.queued()), (1, 0), "only the holder has a place, and nobody queues");

    let bound = w.spawn_bind_execute("s", &["40"]);
    c.wait_queued("parse");
    let exec = p.spawn("EXECUTE q; COMMIT");
    c.wait_queued("prepare");
    h.ok("COMMIT");
    // First in the queue, the bound statement runs first; its block keeps
    // the place until it commits.
    wait_until("the bound statement returns", PROMPT, || bound.is_finished());
    let (mut w, r) = bound.join().unwrap();
    assert!(matches!(r, WireReply::Value(Some(ref v)) if v == "41"), "bound: {r:?}");
    let r = w.query("COMMIT");
    assert!(matches!(r, WireReply::Value(None)), "COMMIT: {r:?}");
    exec.join_ok(PROMPT);
    c.assert_quiet();
}

/// A prepared statement whose cached plan needs no planning is first
/// admitted at ExecutorStart. In READ COMMITTED it too waits without its
/// snapshot, at Bind (a SELECT: `PortalStart` starts it) and at Execute
/// (an UPDATE: `ProcessQuery` does), keeping its lock, and once admitted
/// sees what was committed during its wait. An UPDATE ... RETURNING, whose
/// portal holds its results with a snapshot of its own, keeps its
/// snapshot: run with a newer one, it would return a row (here with an
/// out-of-line value) newer than the snapshot its portal reads the results
/// with.
#[test]
fn a_cached_plan_parked_at_executor_start_holds_no_snapshot_in_read_committed() {
    let c = cluster();
    c.admin_exec(
        "CREATE TABLE doc (id int PRIMARY KEY, body text);
         ALTER TABLE doc ALTER body SET STORAGE EXTERNAL;
         GRANT ALL ON doc TO app;",
    );
    let prepared = |name: &str, sql: &str| {
        let mut w = Wire::connect(&c, "app", name);
        let r = w.query("SET plan_cache_mode = force_generic_plan");
        assert!(matches!(r, WireReply::Value(None)), "{name}: {r:?}");
        let r = w.parse("s", sql);
        assert!(matches!(r, WireReply::Value(None)), "{name}: {r:?}");
        // The first execution plans, and caches the generic plan.
        let r = w.bind_execute("s", &["0"]);
        assert!(!matches!(r, WireReply::Error { .. }), "{name}: {r:?}");
        w
    };
    let select = prepared("select", "SELECT count(*) + $1::int FROM t");
    let update = prepared("update", "UPDATE t SET id = id + 10 WHERE id = $1");
    let returning = prepared("returning", "UPDATE doc SET id = id WHERE id = $1 RETURNING body");
    let mut h = holder(&c);
    let select = select.spawn_bind_execute("s", &["40"]);
    c.wait_queued("select");
    let update = update.spawn_bind_execute("s", &["2"]);
    c.wait_queued("update");
    let returning = returning.spawn_bind_execute("s", &["1"]);
    c.wait_queued("returning");

    for name in ["select", "update"] {
        wait_until(&format!("{name} holds no xmin while parked"), PROMPT, || xmin_of(&c, name).is_none());
        assert!(locks_t(&c, name), "{name} keeps its lock on t");
    }
    assert!(xmin_of(&c, "returning").is_some(), "returning parked without the snapshot its portal needs");
    c.admin_exec("INSERT INTO t VALUES (2); INSERT INTO doc VALUES (1, repeat('x', 10000))");
    h.ok("COMMIT");
    let done = |r: std::thread::JoinHandle<(Wire, WireReply)>| {
        wait_until("the statement returns", PROMPT, || r.is_finished());
        r.join().unwrap().1
    };
    let r = done(select);
    assert!(matches!(r, WireReply::Value(Some(ref v)) if v == "42"), "select: {r:?}");
    let r = done(update);
    assert!(matches!(r, WireReply::Value(None)), "update: {r:?}");
    assert_eq!(
        c.admin_i64("SELECT count(*) FROM t WHERE id = 12"),
        1,
        "update: the row committed during the wait was missed"
    );
    let r = done(returning);
    let shown: String = format!("{r:?}").chars().take(60).collect();
    assert!(matches!(r, WireReply::Value(None)), "returning: the row committed during its wait: {shown}");
    c.assert_quiet();
}

/// A utility statement first admitted in ProcessUtility waits without the
/// snapshot its portal pushed for it, in READ COMMITTED: once admitted it
/// runs under a fresh one, as if it had arrived then (CREATE TABLE AS sees
/// the row committed during its wait), and a procedure that commits inside
/// runs through (its COMMIT counts the portal's snapshots).
#[test]
fn a_utility_statement_parked_in_process_utility_holds_no_snapshot_in_read_committed() {
    let c = cluster();
    c.admin_exec(
        "CREATE PROCEDURE twice() LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO t SELECT max(id) + 10 FROM t;
           COMMIT;
           INSERT INTO t SELECT max(id) + 10 FROM t;
         END $$;
         GRANT EXECUTE ON PROCEDURE twice() TO app;",
    );
    let mut h = holder(&c);
    let ctas = c.app("ctas").spawn_with(|client| {
        client.batch_execute("CREATE TEMP TABLE seen AS SELECT count(*) AS n FROM t")?;
        let n: i64 = client.query_one("SELECT n FROM seen", &[])?.get(0);
        assert_eq!(n, 2, "ctas: the row committed during the wait is missing");
        Ok(())
    });
    c.wait_queued("ctas");
    let call = c.app("call").spawn("CALL twice()");
    c.wait_queued("call");
    for name in ["ctas", "call"] {
        wait_until(&format!("{name} holds no xmin while parked"), PROMPT, || xmin_of(&c, name).is_none());
    }
    c.admin_exec("INSERT INTO t VALUES (2)");
    h.ok("COMMIT");
    ctas.join_ok(PROMPT);
    call.join_ok(PROMPT);
    let ids = c.admin_query("SELECT array_agg(id ORDER BY id)::text FROM t", &[]);
    let ids: String = ids[0].get(0);
    assert!(ids == "{1,2,12,22}" || ids == "{1,2,22,32}", "the procedure ran through: {ids}");
    c.assert_quiet();
}
