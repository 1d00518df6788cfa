//! The `citus_internal` application name proves nothing: Citus
//! tags its connections between nodes with `application_name =
//! 'citus_internal gpid=N'`, but any client can set that name. A client
//! that does is gated like any other, and so is one that also calls a
//! function named like Citus's `assign_distributed_transaction_id` that is
//! not the `citus` extension's. No Citus is needed for this; the Citus
//! cluster test (scripts/citus.sh) covers Citus's own connections.
//!
//! One place, no lending (`max_active = 1`, `max_tickets = 1`) and the
//! progress guarantee pushed out of the way (`progress_timeout = 1h`), so
//! that a parked session stays parked while the holder idles.
//! Gated sessions are role `app`; the observer is the exempt superuser.

mod common;

use std::time::Duration;

use common::{assert_stays_queued, Cluster};

const CONF: &[(&str, &str)] =
    &[("pg_gatekeeper.max_active", "1"), ("pg_gatekeeper.max_tickets", "1"), ("pg_gatekeeper.progress_timeout", "1h")];

#[test]
fn a_client_named_citus_internal_is_gated_like_any_client() {
    let c = Cluster::start(CONF);
    // Named at connection time (a startup parameter, as Citus does it).
    let at_startup = c.app("citus_internal gpid=1");
    // Named by SET, before anyone holds the place (the SET is gated too).
    let mut by_set = c.app("spoofer");
    by_set.ok("SET application_name = 'citus_internal gpid=10000000002'");
    by_set.name = "citus_internal gpid=10000000002".to_string();

    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    assert_eq!(c.session("holder").unwrap().state, "idle in transaction");

    let first = at_startup.spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_internal gpid=1"), 1);
    let second = by_set.spawn("BEGIN; SELECT 1; COMMIT");
    assert_eq!(c.wait_queued("citus_internal gpid=10000000002"), 2);
    assert_stays_queued(&c, &first, Duration::from_millis(300));
    assert_stays_queued(&c, &second, Duration::from_millis(300));
    let s = c.status();
    assert_eq!(s.queued(), 2);
    assert_eq!(s.int("overflow_total"), 0, "nobody was admitted over the limit");

    h.ok("COMMIT");
    first.join_ok(Duration::from_secs(5));
    second.join_ok(Duration::from_secs(5));
    assert_eq!(c.status().int("waited_total"), 2);
    c.assert_quiet();
}

#[test]
fn a_lookalike_of_citus_transaction_id_assignment_is_gated() {
    let c = Cluster::start(CONF);
    c.admin_exec(
        "CREATE FUNCTION public.assign_distributed_transaction_id(int, bigint, timestamptz)
           RETURNS void LANGUAGE sql AS 'SELECT NULL::void'",
    );
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");

    // Citus's own opening of a distributed transaction on a worker, word for word.
    let spoof = c.app("citus_internal gpid=10000000003").spawn(
        "BEGIN TRANSACTION ISOLATION LEVEL READ COMMITTED;
         SELECT assign_distributed_transaction_id(1, 7, '2026-11-25 00:00:00+00');
         SELECT 1; COMMIT",
    );
    assert_eq!(c.wait_queued("citus_internal gpid=10000000003"), 1);
    assert_stays_queued(&c, &spoof, Duration::from_millis(300));
    h.ok("COMMIT");
    spoof.join_ok(Duration::from_secs(5));
    assert_eq!(c.status().int("overflow_total"), 0);
    c.assert_quiet();
}

/// Citus's own superuser connections between nodes (its maintenance daemon
/// and deadlock detector, named `citus_internal gpid=N` and the like) are
/// never gated, even with `exempt_superusers = off`: queued behind a full
/// gate, they would stop Citus's distributed deadlock detection. Any other
/// superuser session is gated then, and an ordinary role with that name is
/// gated as ever.
#[test]
fn citus_superuser_connections_pass_even_with_exempt_superusers_off() {
    let mut conf = CONF.to_vec();
    conf.push(("pg_gatekeeper.exempt_superusers", "off"));
    let c = Cluster::start(&conf);
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");

    let d = c.superuser("citus_internal gpid=10000000004").spawn("SELECT 1").join_ok(Duration::from_secs(5));
    assert!(d.elapsed < Duration::from_secs(2), "waited {:?}", d.elapsed);
    let d = c.superuser("citus_rebalancer gpid=10000000005").spawn("SELECT 1").join_ok(Duration::from_secs(5));
    assert!(d.elapsed < Duration::from_secs(2), "waited {:?}", d.elapsed);

    let other = c.superuser("migration").spawn("SELECT 1");
    assert_eq!(c.wait_queued("migration"), 1);
    assert_stays_queued(&c, &other, Duration::from_millis(300));
    h.ok("COMMIT");
    other.join_ok(Duration::from_secs(5));
    let s = c.status();
    assert_eq!((s.queued(), s.int("overflow_total")), (0, 0), "{:?}", s.0);
    // Not assert_quiet: with exempt_superusers off, the observer's own
    // queries outside the views take admissions too.
}
