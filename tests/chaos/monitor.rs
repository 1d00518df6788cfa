//! The monitor: samples `gatekeeper.status` and checks the invariants that
//! hold at every instant.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Cluster, Status};
use crate::shared::Shared;

/// Maxima seen by the monitor.
#[derive(Default, Debug)]
pub(crate) struct Peaks {
    pub(crate) samples: u64,
    queued: i64,
    admitted: i64,
    tickets: i64,
    oldest_wait_ms: f64,
}

/// Checks, every 50 ms, what must hold at every instant. `gatekeeper.status`
/// copies the gate header under the lock, so `tickets`, `admitted` and
/// `queued` of one row are one consistent state.
pub(crate) fn monitor(c: &Cluster, sh: &Shared) -> Peaks {
    let mut p = Peaks::default();
    let mut obs = c.connect("postgres", "chaos-monitor");
    let mut parked_with_xid: HashMap<(i32, String), String> = HashMap::new();
    let violation = |msg: String| {
        let mut v = sh.violations.lock().unwrap();
        if v.len() < 50 {
            v.push(msg);
        }
    };
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        // A failing view is a finding, not a sample to skip: the checks
        // below would silently stop otherwise.
        let row = match obs.query_one("SELECT row_to_json(s)::text FROM gatekeeper.status s", &[]) {
            Ok(row) => row,
            Err(e) => {
                violation(format!("the monitor could not read gatekeeper.status: {e}"));
                continue;
            }
        };
        let s = Status(serde_json::from_str(&row.get::<_, String>(0)).unwrap());
        p.samples += 1;
        let (queued, admitted, tickets, limit) = (s.queued(), s.admitted(), s.tickets(), s.max_active());
        let ceiling = s.int("ticket_ceiling");
        p.queued = p.queued.max(queued);
        p.admitted = p.admitted.max(admitted);
        p.tickets = p.tickets.max(tickets);
        let oldest = s.0["oldest_wait_ms"].as_f64().unwrap_or(0.0);
        p.oldest_wait_ms = p.oldest_wait_ms.max(oldest);
        if queued > 0 && admitted < tickets {
            violation(format!("{queued} queued while only {admitted} of {tickets} tickets are held: {}", s.0));
        }
        if tickets < limit {
            violation(format!("tickets {tickets} below max_active {limit}: {}", s.0));
        }
        if tickets > ceiling.max(limit) {
            violation(format!("tickets {tickets} above the ceiling {ceiling}: {}", s.0));
        }
        if oldest > 60_000.0 {
            violation(format!("a session has waited {oldest} ms: {}", s.0));
        }
        // Parking happens at the first gated statement of a transaction,
        // explicit block or implicit, before anything is written: a parked session with a
        // transaction id was parked in the middle of its transaction. The
        // gate and pg_stat_activity are read at slightly different moments
        // (a session may commit and park in between), so only the same pid
        // and xid seen parked by two checks in a row count.
        if p.samples % 5 == 0 {
            let now: HashMap<(i32, String), String> = obs
                .query(
                    "SELECT g.pid, a.backend_xid::text, left(a.query, 80)
                     FROM gatekeeper.sessions g JOIN pg_stat_activity a USING (pid)
                     WHERE g.state = 'queued' AND a.backend_xid IS NOT NULL",
                    &[],
                )
                .map(|rows| {
                    rows.iter()
                        .map(|r| ((r.get(0), r.get(1)), r.get::<_, Option<String>>(2).unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_else(|e| {
                    violation(format!("the monitor could not read gatekeeper.sessions: {e}"));
                    HashMap::new()
                });
            for (key, query) in &now {
                if parked_with_xid.contains_key(key) {
                    violation(format!(
                        "pid {} is parked inside a transaction that holds xid {}: {query}",
                        key.0, key.1
                    ));
                }
            }
            parked_with_xid = now;
        }
    }
    p
}
