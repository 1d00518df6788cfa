//! Defects these tests found, kept as regression tests.

use std::time::{Duration, Instant};

use crate::common::Cluster;

/// Park between transactions, never inside one (docs/DESIGN.md §4); and the core's
/// `Gate::set_exempt`: a change of exemption "only takes effect between
/// transactions". A transaction that began while its role was exempt holds
/// no admission; if a reload makes the role gated before it ends, its next
/// statement must still run at once. Instead `gate::admit()` re-decides
/// exemption (`session::is_exempt`) at that statement and parks the session
/// in the middle of its transaction, holding its row locks and snapshot
/// (and, with a queue_timeout, the wait would abort the transaction).
#[test]
fn a_transaction_begun_exempt_is_not_parked_when_a_reload_gates_it() {
    let c = Cluster::start(&[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1")]);
    c.admin_exec(
        "CREATE ROLE app_to LOGIN;
         CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0);
         GRANT ALL ON t TO app, app_to;",
    );
    c.set_conf(&[("pg_gatekeeper.exempt_roles", "app")]);
    let mut x = c.app("x");
    x.ok("BEGIN");
    x.ok("UPDATE t SET v = v + 1 WHERE id = 1");
    assert_eq!(c.session("x").unwrap().state, "exempt");
    // A gated holder takes the only place (lending is off).
    let mut h = c.session_as("app_to", "holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");

    // app is gated again; x is still inside the transaction it began exempt.
    c.set_conf(&[("pg_gatekeeper.exempt_roles", "")]);
    let r = x.spawn("SELECT v FROM t");
    let mut parked = false;
    let deadline = Instant::now() + Duration::from_secs(2);
    while !r.is_finished() && Instant::now() < deadline {
        parked |= c.session("x").is_some_and(|s| s.state == "queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!parked && r.is_finished(), "x was parked in the middle of its transaction (parked: {parked})");
    let mut x = r.join_ok(Duration::from_secs(1)).session;
    x.ok("COMMIT");
    h.ok("COMMIT");
    c.assert_quiet();
}
