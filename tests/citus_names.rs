//! The `citus_internal` application name proves nothing by itself: Citus
//! tags its connections between nodes with `application_name =
//! 'citus_internal gpid=N'`, but any client can set that name. A client
//! that does is gated like any other unless its peer is one that
//! `pg_gatekeeper.citus_peers` trusts (by default the nodes in
//! `pg_dist_node`, of which there are none without Citus). No Citus is
//! needed for this; the Citus cluster test (scripts/citus.sh) covers
//! Citus's own connections.
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
    // Named as run_command_on_*'s connections are: gated from this peer too.
    let run_command = c.app("citus_run_command gpid=7");
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

    let third = run_command.spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_run_command gpid=7"), 3);
    assert_stays_queued(&c, &third, Duration::from_millis(300));

    h.ok("COMMIT");
    first.join_ok(Duration::from_secs(5));
    second.join_ok(Duration::from_secs(5));
    third.join_ok(Duration::from_secs(5));
    assert_eq!(c.status().int("waited_total"), 3);
    c.assert_quiet();
}

/// From a peer that `citus_peers` trusts (here `local`: the tests connect
/// over a Unix-domain socket), a session named as Citus's connections are
/// rides whatever it runs, a block or a statement outside one (as Citus's
/// shard tasks do), while the gate is full. Any other name is gated as
/// ever; and once a reload takes the peer off the list, the name is gated
/// too, in a session that rode before the reload as in a new one.
#[test]
fn a_session_named_as_citus_rides_only_from_a_trusted_peer() {
    let mut conf = CONF.to_vec();
    conf.push(("pg_gatekeeper.citus_peers", "local"));
    let c = Cluster::start(&conf);
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");

    let task = c.app("citus_internal gpid=10000000003").spawn("SELECT 1").join_ok(Duration::from_secs(5));
    assert!(task.elapsed < Duration::from_secs(2), "waited {:?}", task.elapsed);
    let block = c.app("citus_internal gpid=20000000003").spawn("BEGIN; SELECT 1; SELECT 2; COMMIT");
    let done = block.join_ok(Duration::from_secs(5));
    assert!(done.elapsed < Duration::from_secs(2), "waited {:?}", done.elapsed);
    let client = c.app("client").spawn("SELECT 1");
    assert_eq!(c.wait_queued("client"), 1);
    assert_stays_queued(&c, &client, Duration::from_millis(300));
    // A non-superuser's run_command_on_* connection renames itself once
    // connected, as Citus does: it does not ride, even from a trusted peer
    // (master_run_on_worker opens as many as its caller asks for).
    let mut run_command = c.app("citus_internal gpid=30000000003");
    run_command.ok("SET application_name TO 'citus_run_command gpid=30000000003'");
    run_command.name = "citus_run_command gpid=30000000003".to_string();
    let run_command = run_command.spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_run_command gpid=30000000003"), 2);
    assert_stays_queued(&c, &run_command, Duration::from_millis(300));
    // Its caller's SQL names it back as the executor's (RESET puts back
    // the start-up packet's name): gated still. Citus before 11.2 renamed
    // it without a global PID.
    let mut renamed = c.app("citus_internal gpid=40000000003");
    renamed.ok("SET application_name TO 'citus_run_command'");
    renamed.ok("RESET application_name");
    let renamed = renamed.spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_internal gpid=40000000003"), 3);
    assert_stays_queued(&c, &renamed, Duration::from_millis(300));

    // Opened while the peer is trusted, asked again after the reload.
    let mut before = c.app("citus_internal gpid=10000000004");
    before.ok("SELECT 1");
    c.set_conf(&[("pg_gatekeeper.citus_peers", "")]);
    let before = before.spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_internal gpid=10000000004"), 4);
    let after = c.app("citus_internal gpid=10000000005").spawn("SELECT 1");
    assert_eq!(c.wait_queued("citus_internal gpid=10000000005"), 5);
    assert_stays_queued(&c, &after, Duration::from_millis(300));

    h.ok("COMMIT");
    for r in [client, run_command, renamed, before, after] {
        r.join_ok(Duration::from_secs(5));
    }
    let s = c.status();
    assert_eq!((s.int("waited_total"), s.int("overflow_total")), (5, 0), "{:?}", s.0);
    assert!(c.log_text().contains("its peer (a Unix-domain socket) is not in pg_gatekeeper.citus_peers"));
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
