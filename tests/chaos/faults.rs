//! The fault injector (cancels and terminates of "a" sessions, parked and
//! running) and the psql killers (clients SIGKILLed while parked or running).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::common::Cluster;
use crate::rng::Rng;
use crate::setup::{DEEP, HOT_ROWS};
use crate::shared::{Shared, Tally};

pub(crate) struct Seen {
    pid: i32,
    name: String,
    state: String,
    position: Option<i32>,
}

/// The sessions of the "a" drivers (named a000, a001, ...).
pub(crate) fn a_sessions(obs: &mut Client) -> Vec<Seen> {
    obs.query(
        "SELECT pid, application_name, state, queue_position FROM gatekeeper.sessions
         WHERE application_name ~ '^a[0-9]+$'",
        &[],
    )
    .map(|rows| {
        rows.iter().map(|r| Seen { pid: r.get(0), name: r.get(1), state: r.get(2), position: r.get(3) }).collect()
    })
    .unwrap_or_default()
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    CancelParkedToken,
    CancelParkedSql,
    CancelRunning,
    TerminateParked,
    TerminateRunning,
    TerminateAny,
}

pub(crate) const FAULTS: &[(u64, Fault)] = &[
    (30, Fault::CancelParkedToken),
    (10, Fault::CancelParkedSql),
    (15, Fault::CancelRunning),
    (20, Fault::TerminateParked),
    (15, Fault::TerminateRunning),
    (10, Fault::TerminateAny),
];

/// Cancels and terminates "a" sessions, parked and running.
pub(crate) fn inject_faults(c: &Cluster, sh: &Shared, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut obs = c.connect("postgres", "chaos-faults");
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(rng.range(5, 30)));
        let seen = a_sessions(&mut obs);
        let parked: Vec<&Seen> = seen.iter().filter(|s| s.state == "queued" && s.position >= Some(DEEP)).collect();
        let running: Vec<&Seen> =
            seen.iter().filter(|s| s.state == "active" || s.state == "idle in transaction").collect();
        let fault = rng.weighted(FAULTS);
        let pool: Vec<&Seen> = match fault {
            Fault::CancelParkedToken | Fault::CancelParkedSql | Fault::TerminateParked => parked,
            Fault::CancelRunning | Fault::TerminateRunning => running,
            Fault::TerminateAny => seen.iter().collect(),
        };
        if pool.is_empty() {
            continue;
        }
        let target = *rng.pick(&pool);
        let kind = format!("{fault:?}");
        match fault {
            Fault::CancelParkedToken | Fault::CancelRunning => {
                let token = sh.tokens.lock().unwrap().get(&target.name).cloned();
                if let Some(token) = token {
                    if token.cancel_query(NoTls).is_ok() {
                        t.bump(&kind);
                    }
                }
            }
            Fault::CancelParkedSql => {
                if let Ok(r) = obs.query_one("SELECT pg_cancel_backend($1)", &[&target.pid]) {
                    if r.get::<_, bool>(0) {
                        t.bump(&kind);
                    }
                }
            }
            Fault::TerminateParked | Fault::TerminateRunning | Fault::TerminateAny => {
                if let Ok(r) = obs.query_one("SELECT pg_terminate_backend($1)", &[&target.pid]) {
                    if r.get::<_, bool>(0) {
                        t.bump(&kind);
                        t.bump("terminated");
                    }
                }
            }
        }
    }
    t
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum PsqlEnd {
    KillParked,
    KillRunning,
    Finish,
}

/// Runs psql clients one after another and SIGKILLs most of them: while
/// their backend is parked (deep in the queue, so that it is still parked
/// when the backend's client check runs), or while it runs or idles in a
/// transaction; a fifth are left to finish.
pub(crate) fn psql_killer(c: &Cluster, sh: &Shared, id: usize, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut obs = c.connect("postgres", &format!("chaos-psql-observer-{id}"));
    let mut n = 0;
    while !sh.stop.load(Ordering::Relaxed) {
        n += 1;
        let name = format!("psql-{id}-{n}");
        let row = rng.range(1, HOT_ROWS);
        let sleep = rng.range(10, 60);
        let scripts: [Vec<String>; 3] = [
            vec![format!("SELECT pg_sleep({sleep} / 1000.0)")],
            vec![
                "BEGIN".into(),
                format!("UPDATE hot SET v = v + 1 WHERE id = {row}"),
                format!("SELECT pg_sleep({sleep} / 1000.0)"),
                "COMMIT".into(),
            ],
            vec![format!("UPDATE hot SET v = v + 1 WHERE id = {row}"), "SELECT count(*) FROM log_t".into()],
        ];
        let script = rng.pick(&scripts);
        let cmds: Vec<&str> = script.iter().map(String::as_str).collect();
        let end = rng.weighted(&[(50, PsqlEnd::KillParked), (30, PsqlEnd::KillRunning), (20, PsqlEnd::Finish)]);
        let mut child = c.psql("app", &name, &cmds);
        t.bump("psql started");
        let start = Instant::now();
        let mut killed = false;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                t.bump("psql finished");
                break;
            }
            let limit = match end {
                PsqlEnd::Finish => Duration::from_secs(120),
                _ => Duration::from_secs(3),
            };
            if start.elapsed() > limit || sh.stop.load(Ordering::Relaxed) {
                let _ = child.kill();
                t.bump("psql killed otherwise");
                killed = true;
                break;
            }
            let state = obs
                .query("SELECT state, queue_position FROM gatekeeper.sessions WHERE application_name = $1", &[&name])
                .ok()
                .and_then(|rows| rows.first().map(|r| (r.get::<_, String>(0), r.get::<_, Option<i32>>(1))));
            let hit = match (end, &state) {
                (PsqlEnd::KillParked, Some((s, pos))) => s == "queued" && *pos >= Some(DEEP),
                (PsqlEnd::KillRunning, Some((s, _))) => s == "active" || s == "idle in transaction",
                _ => false,
            };
            if hit {
                let _ = child.kill(); // SIGKILL
                t.bump(if matches!(end, PsqlEnd::KillParked) { "psql killed parked" } else { "psql killed running" });
                killed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if killed {
            t.bump("psql killed");
        }
        let _ = child.wait();
    }
    t
}
