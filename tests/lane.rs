//! Query shapes and the long lane (docs/DESIGN.md §15): a shape enters the
//! lane when it ran long and leaves when it runs short; the lane takes no
//! ticket and is capped while short work waits; computing holders are
//! never relieved; dry-run and hand routing; an explicit class wins.
//!
//! Gated sessions are role `app`; the observer is the exempt superuser.
//! `burn(s)` computes for `s` seconds: every call of it with a decimal
//! constant is one shape, whatever its value (query ids ignore constants,
//! not their types: `burn(0)` would be another shape).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_stays_queued, wait_until, Cluster, Running};

fn start(extra: &[(&'static str, &'static str)]) -> Cluster {
    let mut conf = vec![("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.stall_timeout", "200ms")];
    conf.extend_from_slice(extra);
    let c = Cluster::start(&conf);
    c.create_burn();
    c
}

/// The shape of `SELECT burn(...)` as the view shows it:
/// (lane, runs, long_runs, routed_total). It is `app`'s only shape.
fn burn_shape(c: &Cluster) -> Option<(String, i64, i64, i64)> {
    c.admin_query(
        "SELECT lane, runs, long_runs, routed_total FROM gatekeeper.shapes WHERE userid = 'app'::regrole",
        &[],
    )
    .first()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// A class's `admitted_total`.
fn class_admitted(c: &Cluster, class: &str) -> i64 {
    c.admin_query("SELECT admitted_total FROM gatekeeper.classes WHERE class = $1", &[&class])[0].get(0)
}

/// The query id of `SELECT burn($1)`, from the shapes view.
fn burn_queryid(c: &Cluster) -> i64 {
    c.admin_i64("SELECT queryid FROM gatekeeper.shapes WHERE userid = 'app'::regrole")
}

/// Run `SELECT burn(secs)` once as `app`.
fn burn_once(c: &Cluster, secs: f64) {
    c.app("once").ok(&format!("SELECT burn({secs:.1})"));
}

#[test]
fn a_shape_enters_the_lane_when_it_runs_long_and_leaves_when_it_runs_short() {
    let c = start(&[]);
    // Long by its own CPU clock, with nobody queued (no sampling needed).
    burn_once(&c, 0.8);
    let (lane, runs, long_runs, routed) = burn_shape(&c).expect("the shape is recorded");
    assert_eq!((lane.as_str(), runs, long_runs, routed), ("long", 1, 1, 0));
    assert!(c.log_text().contains("ran long; its transactions are admitted in the long lane"));
    // Its next transaction is admitted in the lane, even a short one.
    let before = class_admitted(&c, "long");
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "long"), before + 1);
    assert_eq!(burn_shape(&c).unwrap().3, 1, "routed_total counts it");
    // Three short runs in a row take it out.
    burn_once(&c, 0.0);
    assert_eq!(burn_shape(&c).unwrap().0, "long");
    burn_once(&c, 0.0);
    assert_eq!(burn_shape(&c).unwrap().0, "short");
    assert!(c.log_text().contains("it leaves the long lane"));
    let before = class_admitted(&c, "long");
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "long"), before, "a short shape stays in its class");
    c.assert_quiet();
}

#[test]
fn the_lane_takes_no_ticket_and_is_capped_while_short_work_waits() {
    let c = start(&[("pg_gatekeeper.classes", "long (max_active = 1)")]);
    burn_once(&c, 0.8);
    // Two long transactions: with nothing else queued, the lane may use as
    // many places as there are tickets.
    let long: Vec<Running> = (0..2).map(|k| c.app(&format!("long{k}")).spawn("SELECT burn(4.0)")).collect();
    wait_until("two long holders in the lane", Duration::from_secs(5), || {
        c.admin_i64("SELECT admitted::bigint FROM gatekeeper.classes WHERE class = 'long'") == 2
    });
    // Short work still finds both tickets free.
    let short: Vec<Running> = (0..2).map(|k| c.app(&format!("short{k}")).spawn("SELECT pg_sleep(3)")).collect();
    wait_until("two short holders", Duration::from_secs(5), || {
        c.admin_i64("SELECT admitted::bigint FROM gatekeeper.classes WHERE class = 'default'") == 2
    });
    // A third short one waits for a ticket; while it does, the lane holds to
    // its cap: a third long one waits too, though the lane has no ticket
    // to take.
    let short3 = c.app("short3").spawn("SELECT pg_sleep(0)");
    c.wait_queued("short3");
    let long3 = c.app("long3").spawn("SELECT burn(0.0)");
    c.wait_queued("long3");
    assert_stays_queued(&c, &long3, Duration::from_millis(500));
    short3.join_ok(Duration::from_secs(10));
    long3.join_ok(Duration::from_secs(15));
    for r in long.into_iter().chain(short) {
        r.join_ok(Duration::from_secs(20));
    }
    c.assert_quiet();
}

/// Twelve sessions compute for 2 s each, from their admission, with
/// `max_active = 4` and a lane capped at 1. With the lane on, computing
/// holders are never relieved, so at most 4 + 1 compute at once; with it
/// off, relief lets up to 8 in. Each session reports when its computing
/// began and ended (`clock_timestamp()`, after admission and before the
/// release at commit), and the result is the most intervals that overlap:
/// what the server really ran at once, without sampling a view that also
/// shows sessions on their way out.
fn cpu_storm(lane: &'static str) -> Storm {
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "4"),
        ("pg_gatekeeper.stall_timeout", "200ms"),
        ("pg_gatekeeper.classes", "long (max_active = 1)"),
        ("pg_gatekeeper.long_lane", lane),
    ]);
    c.admin_exec(
        "CREATE FUNCTION burn_span(d float8, OUT began float8, OUT ended float8) LANGUAGE plpgsql AS $$
           DECLARE t0 timestamptz := clock_timestamp();
           BEGIN
             WHILE clock_timestamp() < t0 + d * interval '1 s' LOOP END LOOP;
             began := extract(epoch FROM t0);
             ended := extract(epoch FROM clock_timestamp());
           END $$;
         GRANT EXECUTE ON FUNCTION burn_span(float8) TO app;",
    );
    let spans = Arc::new(Mutex::new(Vec::new()));
    // One shape, not known yet when they all ask: the worker decides.
    let storm: Vec<Running> = (0..12)
        .map(|k| {
            let spans = Arc::clone(&spans);
            c.app(&format!("storm{k}")).spawn_with(move |client| {
                let row = client.query_one("SELECT began, ended FROM burn_span(2.0)", &[])?;
                spans.lock().unwrap().push((row.get::<_, f64>(0), row.get::<_, f64>(1)));
                Ok(())
            })
        })
        .collect();
    // What the gate did meanwhile, for the failure message: the most
    // tickets and stalled holders the status view showed.
    let (mut tickets, mut stalled) = (0, 0);
    wait_until("the storm ends", Duration::from_secs(60), || {
        let s = c.status();
        tickets = tickets.max(s.tickets());
        stalled = stalled.max(s.int("stalled"));
        storm.iter().all(Running::is_finished)
    });
    for r in storm {
        r.join_ok(Duration::from_secs(1));
    }
    c.assert_quiet();
    let s = c.status();
    let spans = spans.lock().unwrap();
    assert_eq!(spans.len(), 12);
    Storm {
        most: most_at_once(&spans),
        stalls: s.int("stalls_total"),
        seen: format!(
            "most tickets {tickets}, most stalled {stalled}, overflow_total {}, stalls_total {}, admitted_total {}",
            s.int("overflow_total"),
            s.int("stalls_total"),
            s.int("admitted_total")
        ),
    }
}

/// What [`cpu_storm`] found: the most sessions that computed at once, and
/// what the status view showed meanwhile.
struct Storm {
    most: usize,
    /// Holders found stalled (`stalls_total`): each was relieved.
    stalls: i64,
    seen: String,
}

/// The most of `spans` (began, ended) that overlap at one instant; one that
/// ends as another begins does not overlap it.
fn most_at_once(spans: &[(f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = spans.iter().flat_map(|&(b, e)| [(b, 1), (e, -1)]).collect();
    // At equal times, ends (-1) come before beginnings (+1).
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn computing_holders_stay_within_the_limit_and_the_lane_cap() {
    let Storm { most, stalls, seen } = cpu_storm("on");
    // A holder that waits past stall_timeout (200 ms) is relieved, as
    // designed, and lets one more in: on a loaded machine one of the twelve
    // may wait that long (once seen: 6 at once, with one stall). Computing
    // holders never are: relieved, most of the twelve would be.
    assert!(stalls <= 2, "{stalls} holders were relieved: computing holders were; {seen}");
    assert!(most as i64 <= 5 + stalls, "{most} sessions computed at once (limit 4, lane cap 1); {seen}");
    assert!(most >= 4, "only {most} sessions computed at once: the limit was not used; {seen}");
}

#[test]
fn without_the_lane_stall_relief_lets_computing_past_the_limit() {
    // The measure above can fail: with the lane off, relieved computing
    // holders give their places away.
    let Storm { most, seen, .. } = cpu_storm("off");
    assert!(most > 5, "only {most} sessions computed at once with the lane off; {seen}");
}

#[test]
fn a_statement_after_a_clients_think_time_runs_from_its_own_start() {
    // One place and no lending, so that a waiter keeps the worker sampling
    // (every 5 ms) while the holder thinks; no progress guarantee meanwhile.
    let c = start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.progress_timeout", "60s"),
    ]);
    // Immutable, so the planner runs it: 50 ms of computing before any
    // hook of ours sees the statement, a quarter of stall_timeout (200 ms),
    // so that a busy CPU cannot stretch it past.
    c.admin_exec(
        "CREATE FUNCTION plan_burn(d float8) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
           DECLARE t0 timestamptz := clock_timestamp();
           BEGIN
             WHILE clock_timestamp() < t0 + d * interval '1 s' LOOP END LOOP;
             RETURN 1;
           END $$;
         GRANT EXECUTE ON FUNCTION plan_burn(float8) TO app;",
    );
    let mut a = c.app("a");
    a.ok("BEGIN");
    a.ok("SELECT now() IS NOT NULL");
    let b = c.app("b").spawn("SELECT 2");
    c.wait_queued("b");
    // The client thinks for longer than stall_timeout: the input under
    // test, not a wait for state.
    std::thread::sleep(Duration::from_millis(800));
    a.ok("SELECT plan_burn(0.05)");
    a.ok("COMMIT");
    b.join_ok(Duration::from_secs(10));
    // Measured from the last statement, the planning would have read as
    // 850 ms of computing, and the transaction's shape would be long.
    let long: i64 = c.admin_i64("SELECT coalesce(sum(long_runs), 0)::bigint FROM gatekeeper.shapes");
    assert_eq!(long, 0, "a short statement after think time ran long: {}", c.log_tail(20));
    c.assert_quiet();
}

#[test]
fn dry_run_learns_and_counts_but_routes_nothing() {
    let c = start(&[("pg_gatekeeper.long_lane", "dry_run")]);
    burn_once(&c, 0.8);
    assert!(c.log_text().contains("would be admitted in the long lane (long_lane = dry_run)"));
    burn_once(&c, 0.0);
    let (lane, _, _, routed) = burn_shape(&c).unwrap();
    assert_eq!((lane.as_str(), routed), ("long", 1), "counted as routed");
    assert_eq!(class_admitted(&c, "long"), 0, "but admitted in its own class");
    c.assert_quiet();
}

#[test]
fn a_route_by_hand_wins_over_the_lane_and_an_explicit_class_wins_over_both() {
    let c = start(&[("pg_gatekeeper.classes", "reports (max_active = 1), mine")]);
    burn_once(&c, 0.8);
    let q = burn_queryid(&c);
    c.admin_exec(&format!("SELECT gatekeeper.route_shape({q}, 'reports')"));
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "reports"), 1);
    assert_eq!(class_admitted(&c, "long"), 0);
    // A role with a class of its own keeps it.
    c.admin_exec("CREATE ROLE own LOGIN; GRANT EXECUTE ON FUNCTION burn(float8) TO own; ALTER ROLE own SET pg_gatekeeper.class = 'mine'");
    c.session_as("own", "own").ok("SELECT burn(0.0)");
    assert_eq!(class_admitted(&c, "mine"), 1);
    assert_eq!(class_admitted(&c, "reports"), 1);
    // Unrouted: back to the lane it learnt.
    assert!(c.admin_query(&format!("SELECT gatekeeper.unroute_shape({q})"), &[])[0].get::<_, bool>(0));
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "long"), 1);
    // A route for a while ends by itself (long enough for a session already
    // connected to use it on a loaded machine; its end is polled for).
    let mut once = c.app("once");
    c.admin_exec(&format!("SELECT gatekeeper.route_shape({q}, 'reports', '3 s')"));
    once.ok("SELECT burn(0.0)");
    assert_eq!(class_admitted(&c, "reports"), 2);
    wait_until("the route ends by itself", Duration::from_secs(10), || {
        c.admin_i64(&format!("SELECT count(*) FROM gatekeeper.shapes WHERE queryid = {q} AND userid IS NULL")) == 0
    });
    once.ok("SELECT burn(0.0)");
    assert_eq!(class_admitted(&c, "reports"), 2);
    // A route to a class removed since is no route: the lane the role
    // learnt decides again, not `default`.
    burn_once(&c, 0.8);
    c.admin_exec(&format!("SELECT gatekeeper.route_shape({q}, 'reports')"));
    c.set_conf(&[("pg_gatekeeper.classes", "mine")]);
    wait_until("reports is no class any more", Duration::from_secs(5), || {
        c.admin_i64("SELECT count(*) FROM gatekeeper.classes WHERE class = 'reports'") == 0
    });
    let long = class_admitted(&c, "long");
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "long"), long + 1, "the removed class's route sent it elsewhere");
    c.assert_quiet();
}

/// What a role's runs teach moves only that role's transactions: another
/// role running the same query id long cannot send it into the lane. A
/// route by hand is one row for every role.
#[test]
fn another_roles_long_runs_leave_a_shape_out_of_the_lane() {
    let c = start(&[]);
    c.admin_exec("CREATE ROLE other LOGIN; GRANT EXECUTE ON FUNCTION burn(float8) TO other");
    let lane_of = |role: &str| -> Vec<String> {
        c.admin_query("SELECT lane FROM gatekeeper.shapes WHERE userid = $1::text::regrole", &[&role])
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    c.session_as("other", "other").ok("SELECT burn(0.8)");
    assert_eq!(lane_of("other"), ["long"]);
    // app's transaction of the same query id stays in its class.
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "long"), 0);
    assert_eq!(lane_of("app"), ["short"]);
    assert_eq!(c.admin_i64("SELECT count(DISTINCT queryid) FROM gatekeeper.shapes"), 1, "one query id");
    // other's own next one goes to the lane.
    c.session_as("other", "other").ok("SELECT burn(0.0)");
    assert_eq!(class_admitted(&c, "long"), 1);
    // A route holds for both, as a row of its own that app sees without
    // its query id.
    let q = burn_queryid(&c);
    c.admin_exec(&format!("SELECT gatekeeper.route_shape({q}, 'default')"));
    let route = c.admin_query("SELECT lane, routed_to FROM gatekeeper.shapes WHERE userid IS NULL", &[]);
    assert_eq!(route.len(), 1);
    assert_eq!(
        (route[0].get::<_, Option<String>>(0), route[0].get::<_, Option<String>>(1)),
        (None, Some("default".into()))
    );
    c.session_as("other", "other").ok("SELECT burn(0.0)");
    assert_eq!(class_admitted(&c, "long"), 1, "routed to default");
    let hidden: i64 = c
        .app("look")
        .client
        .query_one(
            "SELECT count(*) FROM gatekeeper.shapes WHERE userid IS NULL AND queryid IS NULL AND routed_to = 'default'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(hidden, 1);
    c.assert_quiet();
}

/// A route to `default` keeps a query out of the lane while it runs too,
/// and so does a session's own class `default`: the worker does not move a
/// holder whose class was chosen for it, and the session queued behind it
/// waits for it. Without either, the same holder is moved (the control).
#[test]
fn a_holder_routed_to_default_is_not_moved_into_the_lane() {
    let c = start(&[("pg_gatekeeper.max_active", "1")]);
    let class_of = |name: &str| -> Option<String> {
        c.admin_query("SELECT class FROM gatekeeper.sessions WHERE application_name = $1", &[&name])
            .first()
            .and_then(|r| r.get(0))
    };
    let burn = |secs: f64| {
        let burner = c.app("burner").spawn(&format!("SELECT burn({secs:.1})"));
        wait_until("the burner is admitted", Duration::from_secs(10), || {
            c.session("burner").is_some_and(|s| s.state == "active")
        });
        burner
    };
    // Control: its first run, unknown, is admitted in default and moved.
    let burner = burn(3.0);
    wait_until("the worker moves the burner into the lane", Duration::from_secs(10), || {
        class_of("burner").as_deref() == Some("long")
    });
    burner.join_ok(Duration::from_secs(10));
    // Pinned: it stays in default while it computes, and the waiter waits.
    let stays_in_default = |why: &str| {
        let burner = burn(1.5);
        let waiter = c.app("waiter").spawn("SELECT 1");
        wait_until("the waiter queues", Duration::from_secs(10), || {
            c.session("waiter").is_some_and(|s| s.state == "queued")
        });
        // One read of the slots per poll: while the burner holds its place,
        // it is in default and the waiter queued.
        let mut polls = 0;
        loop {
            let rows: std::collections::HashMap<String, (String, Option<String>)> = c
                .admin_query(
                    "SELECT application_name, state, class FROM gatekeeper.sessions
                      WHERE application_name IN ('burner', 'waiter')",
                    &[],
                )
                .iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2))))
                .collect();
            let Some((state, class)) = rows.get("burner").filter(|(state, _)| state == "active") else {
                break;
            };
            assert_eq!(class.as_deref(), Some("default"), "{why}: the holder was moved ({state})");
            assert_eq!(
                rows.get("waiter").map(|w| w.0.as_str()),
                Some("queued"),
                "{why}: the waiter got in while the holder computed"
            );
            polls += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(polls >= 10, "{why}: the holder was watched for only {polls} polls");
        burner.join_ok(Duration::from_secs(1));
        waiter.join_ok(Duration::from_secs(10));
    };
    let q = burn_queryid(&c);
    c.admin_exec(&format!("SELECT gatekeeper.route_shape({q}, 'default')"));
    stays_in_default("routed to default");
    c.admin_exec(&format!("SELECT gatekeeper.unroute_shape({q})"));
    c.admin_exec("ALTER ROLE app SET pg_gatekeeper.class = 'default'");
    stays_in_default("its own class default");
    c.admin_exec("ALTER ROLE app RESET pg_gatekeeper.class");
    c.assert_quiet();
}

/// A route needs an entry of the shapes table: with every entry a query id
/// may use holding a route (one entry in all here), another route is
/// refused with 53400 and a hint; with `max_shapes = 0`, every route is.
#[test]
fn a_route_with_no_entry_free_is_refused_with_53400() {
    for (shapes, first_ok) in [("1", true), ("0", false)] {
        let c = start(&[("pg_gatekeeper.max_shapes", shapes)]);
        let mut admin = c.connect("postgres", "router");
        let first = admin.query_one("SELECT gatekeeper.route_shape(1, 'long')", &[]);
        assert_eq!(first.is_ok(), first_ok, "max_shapes = {shapes}: {first:?}");
        let e = admin.query_one("SELECT gatekeeper.route_shape(2, 'long')", &[]).expect_err("no room");
        let db = e.as_db_error().unwrap_or_else(|| panic!("max_shapes = {shapes}: {e:?}"));
        assert_eq!(db.code().code(), "53400", "max_shapes = {shapes}: {db:?}");
        assert!(db.hint().is_some(), "max_shapes = {shapes}: no hint: {db:?}");
        c.assert_quiet();
    }
}

/// The routes in force (`route_shape`) outlive a restart and a crash
/// restart: they are kept in a file in the data directory and read back when
/// shared memory is laid out. A route whose time ran out while the server
/// was down, and an ended one, do not come back; a file that is not a
/// routes file is ignored with a LOG line; a file that cannot be written is
/// a WARNING and leaves the route in force.
#[test]
fn routes_outlive_a_restart_and_a_crash_restart() {
    let c = start(&[("pg_gatekeeper.classes", "reports (max_active = 1)")]);
    burn_once(&c, 0.0);
    let q = burn_queryid(&c);
    c.admin_exec(&format!(
        "SELECT gatekeeper.route_shape({q}, 'reports'), gatekeeper.route_shape(77, 'long', '1 hour'),
                gatekeeper.route_shape(78, 'long', '1 s'), gatekeeper.route_shape(79, 'long')"
    ));
    assert!(c.admin_query("SELECT gatekeeper.unroute_shape(79)", &[])[0].get::<_, bool>(0));
    wait_until("the route of 78 ends", Duration::from_secs(10), || {
        c.admin_i64("SELECT count(*) FROM gatekeeper.shapes WHERE queryid = 78") == 0
    });
    let routes = || {
        c.admin_query(
            "SELECT queryid, routed_to, routed_until IS NOT NULL FROM gatekeeper.shapes
              WHERE routed_to IS NOT NULL ORDER BY queryid",
            &[],
        )
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1), r.get::<_, bool>(2)))
        .collect::<Vec<_>>()
    };
    let mut want = vec![(q, "reports".to_string(), false), (77, "long".to_string(), true)];
    want.sort();
    assert_eq!(routes(), want);

    let restart = || {
        let log = c.log_path();
        let out = c.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60", "-l", log.to_str().unwrap()]);
        assert!(out.status.success(), "pg_ctl restart: {}", String::from_utf8_lossy(&out.stderr));
        c.reconnect_admin(Duration::from_secs(30));
    };
    restart();
    assert_eq!(routes(), want, "after a restart");
    assert!(c.log_text().contains(
        "restored 2 query routes from file \"pg_gatekeeper_routes\"; skipped: 1 ended while the server was down"
    ));
    // The route sends the shape's transactions to its class again.
    burn_once(&c, 0.0);
    assert_eq!(class_admitted(&c, "reports"), 1);

    // A crash restart lays shared memory out again: the routes come back.
    let victim = c.app("victim");
    c.crash_restart(c.pid_of("victim"), Duration::from_secs(30));
    drop(victim);
    assert_eq!(routes(), want, "after a crash restart");

    // A file that cannot be written: a WARNING, and the route holds.
    let temp = c.data_dir().join("pg_gatekeeper_routes.tmp");
    std::fs::create_dir(&temp).unwrap();
    c.admin_exec("SELECT gatekeeper.route_shape(80, 'long')");
    std::fs::remove_dir(&temp).unwrap();
    assert!(c.log_text().contains("WARNING:  pg_gatekeeper: could not save the query routes to file"));
    assert_eq!(routes().len(), 3);

    // Fewer entries than routes: those that find no room are skipped, and
    // the file is kept aside, since the next write replaces it with the
    // routes in force; the start itself does not rewrite it.
    let file = c.data_dir().join("pg_gatekeeper_routes");
    let kept = c.data_dir().join("pg_gatekeeper_routes.skipped");
    c.admin_exec("SELECT gatekeeper.route_shape(80, 'long')"); // written this time
    let three = std::fs::read_to_string(&file).unwrap();
    c.admin_exec("ALTER SYSTEM SET pg_gatekeeper.max_shapes = 2");
    restart();
    c.assert_logged(
        "found no room under pg_gatekeeper.max_shapes; the file is kept as \"pg_gatekeeper_routes.skipped\"",
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), three);
    assert!(routes().len() < 3, "{:?}", routes());
    // The next start skips the same routes of the same file: its copy is
    // there already, and no second one is made.
    restart();
    c.assert_logged("max_shapes; the file is kept already, as \"pg_gatekeeper_routes.skipped\"");
    assert!(!c.data_dir().join("pg_gatekeeper_routes.skipped.1").exists());
    c.admin_exec("ALTER SYSTEM RESET pg_gatekeeper.max_shapes");
    restart();
    assert_eq!(routes().len(), 3, "the routes that found no room are gone from the file");

    // Not a routes file: ignored, and the server starts without routes. It
    // is kept aside too, beside the earlier copy, which holds the route
    // that found no room and is not replaced.
    std::fs::write(&file, "something else\n").unwrap();
    restart();
    c.assert_logged("ignoring file \"pg_gatekeeper_routes\": its first line is \"something else\", not \"pg_gatekeeper routes 1\"; the file is kept as \"pg_gatekeeper_routes.skipped.1\", beside earlier copies");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), three);
    assert_eq!(
        std::fs::read_to_string(c.data_dir().join("pg_gatekeeper_routes.skipped.1")).unwrap(),
        "something else\n"
    );
    assert_eq!(routes(), vec![]);

    // Larger than any routes file (a sparse one, read as zeros): not read
    // into the postmaster's memory, where an allocation that fails would
    // keep the server from starting; it starts without routes.
    let huge = gatekeeper_core::route_file::MAX_FILE_BYTES as u64 + 1;
    std::fs::File::create(&file).unwrap().set_len(huge).unwrap();
    restart();
    c.assert_logged("ignoring file \"pg_gatekeeper_routes\": it is larger than any routes file");
    assert_eq!(routes(), vec![]);
    c.assert_quiet();
}

/// A dropped database's routes do not come back. The backend that drops a
/// database forgets its routes, but a standby replaying the drop does not,
/// nor does a backend that died before its statement ended, nor the file
/// when its write failed: the next start would restore them, and a database
/// created later with the same OID would inherit them. The worker forgets
/// the routes of databases missing from `pg_database`, at its start and
/// every 10 s; the other databases' routes stay.
#[test]
fn a_dropped_databases_routes_do_not_come_back() {
    let c = start(&[]);
    c.admin_exec("CREATE DATABASE gone");
    let gone = c.admin_i64("SELECT oid::bigint FROM pg_database WHERE datname = 'gone'");
    let mut there = c.connect_db("postgres", "gone");
    there
        .batch_execute("CREATE EXTENSION pg_gatekeeper; SELECT gatekeeper.route_shape(4242, 'long')")
        .expect("a route in gone");
    drop(there);
    c.admin_exec("SELECT gatekeeper.route_shape(4243, 'long')");
    let file = c.data_dir().join("pg_gatekeeper_routes");
    let both = std::fs::read_to_string(&file).unwrap();
    assert!(both.contains(" 4242 ") && both.contains(" 4243 "), "{both}");
    // The drop forgets gone's route and rewrites the file; put the file
    // back as a failed write (or a crash before the forget) leaves it.
    wait_until("gone's session has ended", Duration::from_secs(10), || {
        c.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE datname = 'gone'") == 0
    });
    c.admin_exec("DROP DATABASE gone");
    assert!(!std::fs::read_to_string(&file).unwrap().contains(" 4242 "));
    std::fs::write(&file, &both).unwrap();

    let log = c.log_path();
    let out = c.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60", "-l", log.to_str().unwrap()]);
    assert!(out.status.success(), "pg_ctl restart: {}", String::from_utf8_lossy(&out.stderr));
    c.reconnect_admin(Duration::from_secs(30));
    c.assert_logged("restored 2 query routes from file \"pg_gatekeeper_routes\"");
    wait_until("the worker forgets the dropped database's route", Duration::from_secs(15), || {
        c.admin_i64(&format!("SELECT count(*) FROM gatekeeper.shapes WHERE dbid = {gone}")) == 0
    });
    c.assert_logged("forgot 1 query routes of databases that no longer exist");
    assert_eq!(
        c.admin_i64("SELECT count(*) FROM gatekeeper.shapes WHERE queryid = 4243 AND routed_to = 'long'"),
        1,
        "the other database's route stays"
    );
    assert!(!std::fs::read_to_string(&file).unwrap().contains(" 4242 "), "and the file no longer holds it");
    c.assert_quiet();
}

/// The worker's pass over `pg_database` never waits for its lock: queued
/// behind `VACUUM FULL pg_database`, itself queued behind a reader (a
/// `pg_dump`), it would stop sampling for as long, and no SIGTERM would end
/// that wait. It skips the pass and lists the databases at a later one.
#[test]
fn the_worker_does_not_wait_for_a_lock_on_pg_database() {
    let c = start(&[]);
    // A route: the worker's pass has something to forget, so it reads pg_database.
    c.admin_exec("SELECT gatekeeper.route_shape(4243, 'long')");
    let worker = c.worker_pid().expect("the worker runs");
    let mut reader = c.superuser("reader");
    reader.ok("BEGIN");
    reader.ok("SELECT count(*) FROM pg_database");
    let vacuum = c.superuser("vacuum").spawn("VACUUM FULL pg_database");
    // Read without pg_stat_activity, whose join to pg_database would queue
    // behind the VACUUM too.
    let waits = |filter: &str| -> Option<String> {
        c.admin_query(&format!("SELECT wait_event_type FROM pg_stat_get_activity(NULL) WHERE {filter}"), &[])
            .first()
            .and_then(|r| r.get(0))
    };
    wait_until("the VACUUM waits for its lock", Duration::from_secs(5), || {
        waits("application_name = 'vacuum'").as_deref() == Some("Lock")
    });
    // Past one of the worker's passes (every 10 s): it never queues.
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        let wait = waits(&format!("pid = {worker}"));
        assert_ne!(wait.as_deref(), Some("Lock"), "the worker waits for a lock on pg_database");
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.ok("COMMIT");
    vacuum.join_ok(Duration::from_secs(30));
    assert_eq!(c.worker_pid(), Some(worker), "the same worker");
    assert_eq!(c.admin_i64("SELECT count(*) FROM gatekeeper.shapes WHERE queryid = 4243"), 1, "the route stays");
    assert!(!c.log_text().contains("could not list the databases"), "{}", c.log_tail(5));
    c.assert_quiet();
}

/// A transaction's shape is learnt only once its first statement started:
/// a statement that fails its permission checks in a savepoint, rolled
/// back before long work, teaches nothing about a statement that never
/// ran. (Before this check, and before shapes were keyed by role, it sent
/// the owner's shape to the lane.)
#[test]
fn a_statement_that_never_started_teaches_its_shape_nothing() {
    let c = start(&[]);
    c.admin_exec("CREATE TABLE secret (x int); INSERT INTO secret VALUES (1)");
    let mut a = c.app("attacker");
    a.ok("BEGIN");
    a.ok("SAVEPOINT s");
    let denied = a.exec("SELECT count(*) FROM secret");
    assert_eq!(common::sqlstate(&denied).as_deref(), Some("42501"), "{denied:?}");
    a.ok("ROLLBACK TO s");
    // Long by its CPU clock, in the transaction admitted for the denied read.
    a.ok("SELECT burn(0.8)");
    a.ok("COMMIT");
    let long = c.admin_i64("SELECT count(*) FROM gatekeeper.shapes WHERE lane = 'long'");
    assert_eq!(
        long,
        0,
        "shapes: {:?}",
        c.admin_query("SELECT queryid, userid::regrole::text, lane FROM gatekeeper.shapes", &[])
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1), r.get::<_, String>(2)))
            .collect::<Vec<_>>()
    );
    // The same block with a statement that starts does teach it.
    a.ok("BEGIN");
    a.ok("SELECT burn(0.8)");
    a.ok("COMMIT");
    assert_eq!(burn_shape(&c).map(|s| s.0).as_deref(), Some("long"));
    c.assert_quiet();
}

/// A utility that ran long and then failed teaches its shape, as a planned
/// statement that fails after it started does (a CALL that hit
/// statement_timeout is the case that matters).
#[test]
fn a_utility_that_ran_long_and_failed_teaches_its_shape() {
    let c = start(&[]);
    c.admin_exec(
        "CREATE PROCEDURE burn_then_fail() LANGUAGE plpgsql AS $$ BEGIN PERFORM burn(0.8); RAISE EXCEPTION 'late'; END $$;
         GRANT EXECUTE ON PROCEDURE burn_then_fail() TO app;",
    );
    let failed = c.app("caller").exec("CALL burn_then_fail()");
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(burn_shape(&c).map(|s| (s.0, s.1)), Some(("long".to_string(), 1)));
    c.assert_quiet();
}
