//! The limits thread: reloads of the gate's settings, terminations of the
//! worker, and reads of the views by a member of pg_monitor.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::common::Cluster;
use crate::rng::Rng;
use crate::shared::{Shared, Tally};

/// Changes the limits and reloads, every 0.3-1.5 s.
pub(crate) fn change_limits(c: &Cluster, sh: &Shared, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut adm = c.connect("postgres", "chaos-limits");
    let mut watch = c.connect("chaos_watch", "chaos-watch");
    let mut slowest = Duration::ZERO;
    let set = |adm: &mut Client, k: &str, v: String| {
        adm.batch_execute(&format!("ALTER SYSTEM SET {k} = '{v}'")).unwrap_or_else(|e| panic!("{k} = {v}: {e}"));
    };
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        let max_active = rng.range(1, 4);
        set(&mut adm, "pg_gatekeeper.max_active", max_active.to_string());
        let tickets = match rng.range(0, 9) {
            0..=4 => 0,          // automatic ceiling: lending on
            5..=7 => max_active, // no lending
            _ => max_active * 2,
        };
        set(&mut adm, "pg_gatekeeper.max_tickets", tickets.to_string());
        let max_queued = if rng.chance(60) { 0 } else { rng.range(5, 120) };
        set(&mut adm, "pg_gatekeeper.max_queued", max_queued.to_string());
        if rng.chance(20) {
            set(&mut adm, "pg_gatekeeper.sample_interval", rng.range(1, 20).to_string());
        }
        if rng.chance(25) {
            // Stall relief off, quick, or at its default.
            let v = ["0", "100ms", "500ms"][rng.range(0, 2) as usize];
            set(&mut adm, "pg_gatekeeper.stall_timeout", v.to_string());
        }
        if rng.chance(8) {
            // The routine way a DBA ends sessions reaches the worker too: it
            // must come back, and the gate stay exact while it is away.
            let n: i64 = adm
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                      WHERE backend_type = 'pg_gatekeeper worker'",
                    &[],
                )
                .map(|r| r.get(0))
                .unwrap_or(0);
            if n > 0 {
                t.bump("worker terminations");
            }
        }
        // A member of pg_monitor reads the views of a full gate at once;
        // queries over the views by gated roles are gated (the sessions'
        // own load does not include them: they would only be more of it).
        // "At once" is the server's account, not a wall-clock bound: on a
        // 2-CPU machine that the sessions' ungated work (connections,
        // rejections, parse and plan) keeps saturated, a backend that never
        // waits on the gate can still wait seconds for a CPU. The watch
        // session must never have been admitted or parked, so it never
        // queued.
        let t0 = Instant::now();
        watch
            .batch_execute(
                "SELECT * FROM gatekeeper.status; SELECT count(*) FROM gatekeeper.sessions;
                 SELECT count(*) FROM gatekeeper.classes s JOIN gatekeeper.wait_histogram h ON true",
            )
            .unwrap_or_else(|e| panic!("monitoring read: {e}"));
        slowest = slowest.max(t0.elapsed());
        let own = watch
            .query_one(
                "SELECT state, coalesce(transactions_admitted, 0), coalesce(times_parked, 0)
                   FROM gatekeeper.sessions WHERE pid = pg_backend_pid()",
                &[],
            )
            .unwrap_or_else(|e| panic!("monitoring read of its own row: {e}"));
        let (state, admitted, parked): (String, i64, i64) = (own.get(0), own.get(1), own.get(2));
        if admitted != 0 || parked != 0 {
            sh.violations.lock().unwrap().push(format!(
                "the pg_monitor session went through the gate: state {state}, {admitted} admitted, parked {parked} times"
            ));
        }
        t.bump("monitoring reads");
        if rng.chance(15) {
            // Applies to app_to's next connections.
            let ms = rng.range(20, 1500);
            adm.batch_execute(&format!("ALTER ROLE app_to SET pg_gatekeeper.queue_timeout = '{ms}ms'")).unwrap();
            t.bump("queue_timeout changes");
        }
        adm.batch_execute("SELECT pg_reload_conf()").unwrap();
        t.bump("reloads");
    }
    // A calm configuration for the end of the run.
    set(&mut adm, "pg_gatekeeper.max_active", "3".into());
    set(&mut adm, "pg_gatekeeper.max_tickets", "0".into());
    set(&mut adm, "pg_gatekeeper.max_queued", "0".into());
    set(&mut adm, "pg_gatekeeper.stall_timeout", "500ms".into());
    adm.batch_execute("SELECT pg_reload_conf()").unwrap();
    println!("chaos: slowest monitoring read {slowest:?} (CPU wait included)");
    t
}
