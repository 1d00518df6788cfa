//! The size of the run, its seed, and the schema the sessions work on.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::Cluster;

pub(crate) struct Size {
    pub(crate) long: bool,
    /// Sessions of role `app` (fault targets).
    pub(crate) a_sessions: usize,
    /// Sessions of role `app_to` (queue timeouts, no faults).
    pub(crate) t_sessions: usize,
    /// Threads that each run one psql client at a time.
    pub(crate) psql_drivers: usize,
    /// Stop once the postgres clients completed this many transactions.
    pub(crate) xacts: u64,
    /// Give up (and fail) if the target is not reached by then.
    pub(crate) max_wall: Duration,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub(crate) fn size() -> Size {
    let long = std::env::var("GATEKEEPER_CHAOS_LONG").is_ok_and(|v| v == "1");
    let sessions = env_u64("GATEKEEPER_CHAOS_SESSIONS").unwrap_or(if long { 240 } else { 200 }) as usize;
    let xacts = env_u64("GATEKEEPER_CHAOS_XACTS").unwrap_or(if long { 200_000 } else { 20_000 });
    let t_sessions = (sessions / 4).max(1);
    Size {
        long,
        a_sessions: sessions - t_sessions,
        t_sessions,
        psql_drivers: if long { 8 } else { 4 },
        xacts,
        max_wall: Duration::from_secs(if long { 3600 } else { 600 }),
    }
}

pub(crate) fn seed() -> u64 {
    env_u64("GATEKEEPER_CHAOS_SEED").unwrap_or_else(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)
    })
}

/// Rows in table `hot`.
pub(crate) const HOT_ROWS: u64 = 50;

/// Queue position from which a session counts as deep in the queue: it is
/// then very likely still parked when a signal (or the 10 ms lost-client
/// check after a SIGKILL of its client) reaches it, tens of hand-offs later.
pub(crate) const DEEP: i32 = 10;

pub(crate) const CLIENT_CHECK_INTERVAL: &str = "10ms";

pub(crate) fn setup_schema(c: &Cluster) {
    c.admin_exec(&format!(
        "CREATE ROLE app_to LOGIN;
         CREATE ROLE chaos_watch LOGIN IN ROLE pg_monitor;
         ALTER ROLE app_to SET pg_gatekeeper.queue_timeout = '200ms';
         CREATE TABLE hot (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
         INSERT INTO hot SELECT g, 0 FROM generate_series(1, {HOT_ROWS}) g;
         CREATE TABLE log_t (id bigserial PRIMARY KEY, n int, at timestamptz DEFAULT clock_timestamp());
         CREATE PROCEDURE bump(a int, b int) LANGUAGE plpgsql AS $$
         BEGIN
           UPDATE hot SET v = v + 1 WHERE id = a;
           COMMIT;
           UPDATE hot SET v = v + 1 WHERE id = b;
           COMMIT;
         END $$;
         ALTER TABLE hot OWNER TO app;
         ALTER TABLE log_t OWNER TO app;
         ALTER PROCEDURE bump(int, int) OWNER TO app;
         GRANT ALL ON hot, log_t, log_t_id_seq TO app_to;
         GRANT EXECUTE ON PROCEDURE bump(int, int) TO app_to;"
    ));
}
