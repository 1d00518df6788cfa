//! Reliability under chaos, and crash/restart.
//!
//! Run:
//!   CARGO_TARGET_DIR=target/itest cargo test --test chaos -- --test-threads=1 --nocapture
//!
//! Environment (cargo test has no custom flags):
//! - `GATEKEEPER_CHAOS_LONG=1`: the big variant:
//!   240 sessions and 200,000 transactions instead of 200 and 20,000.
//! - `GATEKEEPER_CHAOS_SEED=<u64>`: replay a run. The seed is printed at the
//!   start of every run; it drives every random choice (each thread has its
//!   own generator derived from it). Thread interleaving is up to the OS, so
//!   a replay makes the same choices, not the same schedule.
//! - `GATEKEEPER_CHAOS_SESSIONS=<n>`, `GATEKEEPER_CHAOS_XACTS=<n>`: override
//!   the size (for development; CI uses the defaults).
//!
//! The chaos test (`chaos_keeps_the_gate_exact`) drives, at once:
//! - "a" sessions (role `app`, 3/4 of the sessions): explicit and implicit
//!   transactions, prepared statements, errors inside blocks then ROLLBACK,
//!   savepoints, explicit rollbacks, `statement_timeout` firing at BEGIN and
//!   on parked or running statements, client-side idling inside blocks (so
//!   that idle holders lend their places), LOCK TABLE behind parked lock
//!   holders (deadlock breaker), VACUUM/ANALYZE and a procedure that
//!   COMMITs. They are the targets of the fault injector: cancels (through
//!   `CancelToken` and `pg_cancel_backend`) and `pg_terminate_backend` of
//!   parked and of running sessions. Terminated sessions reconnect.
//! - "t" sessions (role `app_to`, 1/4): `ALTER ROLE app_to SET
//!   pg_gatekeeper.queue_timeout`, so their waits time out (53000). No fault
//!   is ever injected into them, which makes every queue timeout countable
//!   exactly on the client side (see the assertions).
//! - psql clients (role `app`), killed with SIGKILL while parked, while
//!   running, or left to finish: the lost-client check.
//! - a limits thread: `ALTER SYSTEM` of max_active (1-4), max_tickets,
//!   max_queued (rejections, 53400), sample_interval, stall_timeout, and
//!   the `app_to` queue timeout, each followed by `pg_reload_conf()`; it
//!   also terminates the worker now and then (it must come back) and reads
//!   the views as a member of pg_monitor (never made to wait).
//! - a monitor: samples `gatekeeper.status` every 50 ms and checks the
//!   invariants that hold at every instant (no free ticket while someone is
//!   queued; tickets within [max_active, ceiling]; no wait over 60 s), and
//!   that no parked session holds a transaction id (parked mid-transaction).
//!
//! Afterwards: every session ends its transaction, the gate is quiet, every
//! slot is free, the totals agree with the clients' own counts (see
//! `check_totals` for what is exact and what is a bound, and why), and the
//! server log has no crash.
//!
//! The restart tests: `pg_ctl restart -m fast` with parked and running
//! sessions, and `DROP EXTENSION` / `CREATE EXTENSION` while sessions are
//! parked and running. (SIGKILL of a backend with parked sessions is
//! `the_gate_starts_clean_after_a_crash_restart` in tests/worker.rs.)
//!
//! The last test reproduces a defect these tests found (a transaction begun
//! while exempt was parked mid-way after a reload made its role gated).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postgres::{CancelToken, Client, NoTls};

use common::{count_lines, crash_lines, sqlstate, wait_until, Cluster, Session, Status};

// ---------------------------------------------------------------------------
// A tiny PRNG (xorshift64*), seeded through splitmix64.

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// An independent generator for stream `n` of this seed.
    fn fork(seed: u64, n: u64) -> Rng {
        Rng::new(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }

    fn weighted<T: Copy>(&mut self, table: &[(u64, T)]) -> T {
        let total: u64 = table.iter().map(|(w, _)| w).sum();
        let mut r = self.next() % total;
        for (w, t) in table {
            if r < *w {
                return *t;
            }
            r -= w;
        }
        unreachable!()
    }
}

// ---------------------------------------------------------------------------
// Size of the run.

struct Size {
    long: bool,
    /// Sessions of role `app` (fault targets).
    a_sessions: usize,
    /// Sessions of role `app_to` (queue timeouts, no faults).
    t_sessions: usize,
    /// Threads that each run one psql client at a time.
    psql_drivers: usize,
    /// Stop once the postgres clients completed this many transactions.
    xacts: u64,
    /// Give up (and fail) if the target is not reached by then.
    max_wall: Duration,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn size() -> Size {
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

fn seed() -> u64 {
    env_u64("GATEKEEPER_CHAOS_SEED").unwrap_or_else(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)
    })
}

// ---------------------------------------------------------------------------
// What the threads share and what they count.

/// Rows in table `hot`.
const HOT_ROWS: u64 = 50;

/// Queue position from which a session counts as deep in the queue: it is
/// then very likely still parked when a signal (or the 10 ms lost-client
/// check after a SIGKILL of its client) reaches it, tens of hand-offs later.
const DEEP: i32 = 10;

const CLIENT_CHECK_INTERVAL: &str = "10ms";

struct Shared {
    stop: AtomicBool,
    /// Transactions completed by the postgres clients ("a" and "t").
    completed: AtomicU64,
    /// The current cancel token of each "a" session, by application_name.
    tokens: Mutex<HashMap<String, CancelToken>>,
    /// Invariant violations seen by the monitor.
    violations: Mutex<Vec<String>>,
}

/// Per-thread counts, merged at the end.
#[derive(Default, Debug)]
struct Tally {
    /// Transactions that committed (or implicit statements that succeeded).
    completed: u64,
    /// Transactions attempted (whatever their fate).
    attempted: u64,
    /// Errors received, by SQLSTATE ("closed": the connection went away).
    errors: BTreeMap<String, u64>,
    /// Connections opened after the first (voluntary or after a terminate).
    reconnects: u64,
    connect_failures: u64,
    /// Errors this class of session must never see, with their messages.
    unexpected: Vec<String>,
    /// Faults injected, by kind (injector and psql threads).
    faults: BTreeMap<String, u64>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.completed += o.completed;
        self.attempted += o.attempted;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.reconnects += o.reconnects;
        self.connect_failures += o.connect_failures;
        self.unexpected.extend(o.unexpected);
    }

    fn err(&self, code: &str) -> u64 {
        self.errors.get(code).copied().unwrap_or(0)
    }

    fn fault(&self, kind: &str) -> u64 {
        self.faults.get(kind).copied().unwrap_or(0)
    }

    fn bump(&mut self, kind: &str) {
        *self.faults.entry(kind.to_string()).or_default() += 1;
    }
}

// ---------------------------------------------------------------------------
// Session drivers.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Role `app`: fault targets; no queue timeout.
    A,
    /// Role `app_to`: queue timeouts; never a fault target.
    T,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    SelectImplicit,
    UpdateImplicit,
    PreparedSelect,
    Block,
    BlockIdle,
    BlockBatch,
    BlockError,
    Savepoint,
    BlockRollback,
    StmtTimeoutImplicit,
    StmtTimeoutBegin,
    Sleep,
    MultiImplicit,
    LockTable,
    Maintenance,
    Procedure,
    Reconnect,
}

const A_KINDS: &[(u64, Kind)] = &[
    (200, Kind::SelectImplicit),
    (150, Kind::UpdateImplicit),
    (60, Kind::PreparedSelect),
    (100, Kind::Block),
    (80, Kind::BlockIdle),
    (50, Kind::BlockBatch),
    (50, Kind::BlockError),
    (30, Kind::Savepoint),
    (40, Kind::BlockRollback),
    (60, Kind::StmtTimeoutImplicit),
    (30, Kind::StmtTimeoutBegin),
    (30, Kind::Sleep),
    (20, Kind::MultiImplicit),
    (3, Kind::LockTable),
    (3, Kind::Maintenance),
    (5, Kind::Procedure),
    (10, Kind::Reconnect),
];

/// No statement_timeout and nothing that could end a wait other than the
/// queue timeout itself; a BEGIN is always followed by a gated statement,
/// so that a queue timeout deferred from BEGIN is always raised (a BEGIN
/// followed directly by ROLLBACK would swallow it, by design).
const T_KINDS: &[(u64, Kind)] = &[
    (250, Kind::SelectImplicit),
    (150, Kind::UpdateImplicit),
    (60, Kind::PreparedSelect),
    (150, Kind::Block),
    (80, Kind::BlockIdle),
    (60, Kind::BlockError),
    (50, Kind::BlockRollback),
    (20, Kind::Reconnect),
];

/// Errors each class may see. Anything else is a finding.
fn expected(class: Class, code: &str) -> bool {
    match class {
        // division by zero, cancel / statement_timeout, terminate, queue
        // full, deadlock between admitted sessions, connection gone.
        Class::A => matches!(code, "22012" | "57014" | "57P01" | "53400" | "40P01" | "closed"),
        // division by zero, queue timeout, queue full, deadlock.
        Class::T => matches!(code, "22012" | "53000" | "53400" | "40P01"),
    }
}

enum Fail {
    /// The statement failed; the session is still connected.
    Db,
    /// The connection is gone (terminated).
    Lost,
}

struct Driver<'a> {
    c: &'a Cluster,
    sh: &'a Shared,
    class: Class,
    name: String,
    rng: Rng,
    client: Option<Client>,
    prepared: Option<postgres::Statement>,
    /// statement_timeout is set on the session and must be reset.
    timeout_set: bool,
    /// A BEGIN was sent and its block not yet ended: cleanup must ROLLBACK.
    in_block: bool,
    connected_once: bool,
    /// The last error was a queue timeout or a rejection.
    last_was_gate_error: bool,
    t: Tally,
}

impl<'a> Driver<'a> {
    fn role(&self) -> &'static str {
        match self.class {
            Class::A => "app",
            Class::T => "app_to",
        }
    }

    fn connect(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if self.sh.stop.load(Ordering::Relaxed) {
                return false;
            }
            match self.c.try_connect(self.role(), &self.name) {
                Ok(client) => {
                    if self.class == Class::A {
                        self.sh.tokens.lock().unwrap().insert(self.name.clone(), client.cancel_token());
                    }
                    if self.connected_once {
                        self.t.reconnects += 1;
                    }
                    self.connected_once = true;
                    self.client = Some(client);
                    self.prepared = None;
                    self.timeout_set = false;
                    self.in_block = false;
                    return true;
                }
                Err(e) => {
                    self.t.connect_failures += 1;
                    if start.elapsed() > Duration::from_secs(60) {
                        self.t.unexpected.push(format!("{}: cannot connect for 60 s: {e}", self.name));
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn record(&mut self, e: &postgres::Error) -> Fail {
        let code = e.code().map(|c| c.code().to_string()).unwrap_or_else(|| "closed".into());
        *self.t.errors.entry(code.clone()).or_default() += 1;
        self.last_was_gate_error = code == "53000" || code == "53400";
        if !expected(self.class, &code) && self.t.unexpected.len() < 20 {
            self.t.unexpected.push(format!("{} ({:?}): {code}: {e}", self.name, self.class));
        }
        let closed = code == "closed" || code == "57P01" || self.client.as_ref().is_none_or(|c| c.is_closed());
        if closed {
            self.client = None;
            Fail::Lost
        } else {
            Fail::Db
        }
    }

    fn exec(&mut self, sql: &str) -> Result<(), Fail> {
        let Some(client) = self.client.as_mut() else { return Err(Fail::Lost) };
        if sql.starts_with("BEGIN") {
            self.in_block = true;
        }
        match client.batch_execute(sql) {
            Ok(()) => {
                if sql.ends_with("COMMIT") || sql.ends_with("ROLLBACK") {
                    self.in_block = false;
                }
                Ok(())
            }
            Err(e) => {
                if sql == "BEGIN" {
                    // An error raised while BEGIN runs leaves no block.
                    self.in_block = false;
                }
                Err(self.record(&e))
            }
        }
    }

    fn prepared_select(&mut self, id: i32) -> Result<(), Fail> {
        if self.prepared.is_none() {
            // Parse runs parse analysis in a transaction of its own: it is
            // gated (and may park, time out, be cancelled) like any statement.
            let Some(client) = self.client.as_mut() else { return Err(Fail::Lost) };
            match client.prepare("SELECT v FROM hot WHERE id = $1") {
                Ok(s) => self.prepared = Some(s),
                Err(e) => return Err(self.record(&e)),
            }
        }
        let stmt = self.prepared.clone().unwrap();
        let Some(client) = self.client.as_mut() else { return Err(Fail::Lost) };
        match client.query(&stmt, &[&id]) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.record(&e)),
        }
    }

    /// Leave whatever block a failed transaction left open, and undo session
    /// settings. ROLLBACK and RESET need no admission.
    fn cleanup(&mut self) {
        for _ in 0..5 {
            let sql = match (self.in_block, self.timeout_set) {
                (false, false) => return,
                (true, false) => "ROLLBACK",
                (false, true) => "RESET statement_timeout",
                (true, true) => "ROLLBACK; RESET statement_timeout",
            };
            match self.exec(sql) {
                Ok(()) => {
                    self.timeout_set = false;
                    self.in_block = false;
                    return;
                }
                Err(Fail::Lost) => return,
                Err(Fail::Db) => {} // e.g. a cancel landed on it: again
            }
        }
        // Could not clean up: start afresh on a new connection.
        self.client = None;
    }

    fn sel(&mut self) -> String {
        format!("SELECT v FROM hot WHERE id = {}", self.rng.range(1, HOT_ROWS))
    }

    fn upd(&mut self) -> String {
        format!("UPDATE hot SET v = v + 1 WHERE id = {}", self.rng.range(1, HOT_ROWS))
    }

    fn client_sleep(&mut self, lo: u64, hi: u64) {
        std::thread::sleep(Duration::from_millis(self.rng.range(lo, hi)));
    }

    /// Run one transaction of `kind`. Ok(n): n transactions completed.
    fn run(&mut self, kind: Kind) -> Result<u64, Fail> {
        match kind {
            Kind::SelectImplicit => {
                let s = self.sel();
                self.exec(&s)?;
                Ok(1)
            }
            Kind::UpdateImplicit => {
                let s = self.upd();
                self.exec(&s)?;
                Ok(1)
            }
            Kind::PreparedSelect => {
                let id = self.rng.range(1, HOT_ROWS) as i32;
                self.prepared_select(id)?;
                Ok(1)
            }
            Kind::Block => {
                self.exec("BEGIN")?;
                let (u, s) = (self.upd(), self.sel());
                self.exec(&u)?;
                self.exec(&s)?;
                self.exec("COMMIT")?;
                Ok(1)
            }
            Kind::BlockIdle => {
                // Admitted at BEGIN, then idle in transaction on the client.
                self.exec("BEGIN")?;
                let s = self.sel();
                self.exec(&s)?;
                self.client_sleep(1, 15);
                let u = self.upd();
                self.exec(&u)?;
                self.client_sleep(0, 5);
                self.exec("COMMIT")?;
                Ok(1)
            }
            Kind::BlockBatch => {
                let (u, n) = (self.upd(), self.rng.range(1, 1000));
                self.exec(&format!("BEGIN; {u}; INSERT INTO log_t (n) VALUES ({n}); COMMIT"))?;
                Ok(1)
            }
            Kind::BlockError => {
                self.exec("BEGIN")?;
                if self.class == Class::A {
                    let s = self.sel();
                    self.exec(&s)?;
                }
                // T: the first statement after BEGIN is this gated one.
                match self.exec("SELECT 1 / 0") {
                    Ok(()) => unreachable!("1/0 succeeded"),
                    Err(Fail::Lost) => return Err(Fail::Lost),
                    Err(Fail::Db) => {}
                }
                self.exec("ROLLBACK")?;
                Ok(0)
            }
            Kind::Savepoint => {
                self.exec("BEGIN")?;
                let s = self.sel();
                self.exec(&s)?;
                self.exec("SAVEPOINT s1")?;
                if let Err(Fail::Lost) = self.exec("SELECT 1 / 0") {
                    return Err(Fail::Lost);
                }
                self.exec("ROLLBACK TO SAVEPOINT s1")?;
                let u = self.upd();
                self.exec(&u)?;
                self.exec("COMMIT")?;
                Ok(1)
            }
            Kind::BlockRollback => {
                self.exec("BEGIN")?;
                let n = self.rng.range(1, 1000);
                self.exec(&format!("INSERT INTO log_t (n) VALUES ({n})"))?;
                self.exec("ROLLBACK")?;
                Ok(0)
            }
            Kind::StmtTimeoutImplicit => {
                // Fires while parked or while running, whichever comes first.
                let ms = self.rng.range(5, 80);
                self.exec(&format!("SET statement_timeout = {ms}"))?;
                self.timeout_set = true;
                let sleep = self.rng.range(0, 40);
                let r = self.exec(&format!("SELECT pg_sleep({sleep} / 1000.0)"));
                if let Err(Fail::Lost) = r {
                    return Err(Fail::Lost);
                }
                self.exec("RESET statement_timeout")?;
                self.timeout_set = false;
                r.map(|()| 1)
            }
            Kind::StmtTimeoutBegin => {
                // statement_timeout while BEGIN parks: BEGIN completes, the
                // SELECT reports 57014 and the block is aborted (cleanup
                // rolls it back).
                let ms = self.rng.range(5, 60);
                self.exec(&format!("SET statement_timeout = {ms}"))?;
                self.timeout_set = true;
                self.exec("BEGIN")?;
                let s = self.sel();
                self.exec(&s)?;
                self.exec("COMMIT")?;
                self.exec("RESET statement_timeout")?;
                self.timeout_set = false;
                Ok(1)
            }
            Kind::Sleep => {
                let ms = self.rng.range(5, 40);
                self.exec(&format!("SELECT pg_sleep({ms} / 1000.0)"))?;
                Ok(1)
            }
            Kind::MultiImplicit => {
                let (u, s) = (self.upd(), self.sel());
                self.exec(&format!("SELECT 1; {u}; {s}"))?;
                Ok(1)
            }
            Kind::LockTable => {
                // Waits for the RowExclusiveLocks that parked UPDATEs took
                // at parse analysis: only the deadlock breaker lets it on.
                self.exec("BEGIN")?;
                self.exec("LOCK TABLE hot IN SHARE ROW EXCLUSIVE MODE")?;
                let u = self.upd();
                self.exec(&u)?;
                self.exec("COMMIT")?;
                Ok(1)
            }
            Kind::Maintenance => {
                let sql = *self.rng.pick(&["VACUUM hot", "ANALYZE hot", "VACUUM (ANALYZE) log_t"]);
                self.exec(sql)?;
                Ok(1)
            }
            Kind::Procedure => {
                let (a, b) = (self.rng.range(1, HOT_ROWS), self.rng.range(1, HOT_ROWS));
                self.exec(&format!("CALL bump({a}, {b})"))?;
                Ok(1)
            }
            Kind::Reconnect => {
                self.client = None; // clean close between transactions
                Ok(0)
            }
        }
    }

    fn drive(mut self) -> Tally {
        let kinds = match self.class {
            Class::A => A_KINDS,
            Class::T => T_KINDS,
        };
        while !self.sh.stop.load(Ordering::Relaxed) {
            if self.client.is_none() && !self.connect() {
                break;
            }
            let kind = self.rng.weighted(kinds);
            self.t.attempted += 1;
            match self.run(kind) {
                Ok(n) => {
                    self.t.completed += n;
                    self.sh.completed.fetch_add(n, Ordering::Relaxed);
                }
                Err(Fail::Db) => {
                    self.cleanup();
                    // Turned away or timed out: back off a little before
                    // retrying, as a real client would.
                    if self.last_was_gate_error {
                        self.client_sleep(0, 10);
                    }
                }
                Err(Fail::Lost) => {}
            }
        }
        if let Some(mut client) = self.client.take() {
            // Nothing may be left open; a clean close.
            if self.timeout_set {
                let _ = client.batch_execute("RESET statement_timeout");
            }
        }
        self.sh.tokens.lock().unwrap().remove(&self.name);
        self.t
    }
}

// ---------------------------------------------------------------------------
// Fault injector, psql killers, limits, monitor.

struct Seen {
    pid: i32,
    name: String,
    state: String,
    position: Option<i32>,
}

/// The sessions of the "a" drivers (named a000, a001, ...).
fn a_sessions(obs: &mut Client) -> Vec<Seen> {
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
enum Fault {
    CancelParkedToken,
    CancelParkedSql,
    CancelRunning,
    TerminateParked,
    TerminateRunning,
    TerminateAny,
}

const FAULTS: &[(u64, Fault)] = &[
    (30, Fault::CancelParkedToken),
    (10, Fault::CancelParkedSql),
    (15, Fault::CancelRunning),
    (20, Fault::TerminateParked),
    (15, Fault::TerminateRunning),
    (10, Fault::TerminateAny),
];

/// Cancels and terminates "a" sessions, parked and running.
fn inject_faults(c: &Cluster, sh: &Shared, mut rng: Rng) -> Tally {
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
enum PsqlEnd {
    KillParked,
    KillRunning,
    Finish,
}

/// Runs psql clients one after another and SIGKILLs most of them: while
/// their backend is parked (deep in the queue, so that it is still parked
/// when the backend's client check runs), or while it runs or idles in a
/// transaction; a fifth are left to finish.
fn psql_killer(c: &Cluster, sh: &Shared, id: usize, mut rng: Rng) -> Tally {
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

/// Changes the limits and reloads, every 0.3-1.5 s.
fn change_limits(c: &Cluster, sh: &Shared, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut adm = c.connect("postgres", "chaos-limits");
    let mut watch = c.connect("chaos_watch", "chaos-watch");
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
        let t0 = Instant::now();
        watch
            .batch_execute(
                "SELECT * FROM gatekeeper.status; SELECT count(*) FROM gatekeeper.sessions;
                 SELECT count(*) FROM gatekeeper.classes s JOIN gatekeeper.wait_histogram h ON true",
            )
            .unwrap_or_else(|e| panic!("monitoring read: {e}"));
        if t0.elapsed() > Duration::from_secs(2) {
            sh.violations.lock().unwrap().push(format!("a pg_monitor read of the views took {:?}", t0.elapsed()));
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
    t
}

/// Maxima seen by the monitor.
#[derive(Default, Debug)]
struct Peaks {
    samples: u64,
    queued: i64,
    admitted: i64,
    tickets: i64,
    oldest_wait_ms: f64,
}

/// Checks, every 50 ms, what must hold at every instant. `gatekeeper.status`
/// copies the gate header under the lock, so `tickets`, `admitted` and
/// `queued` of one row are one consistent state.
fn monitor(c: &Cluster, sh: &Shared) -> Peaks {
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
        let Ok(row) = obs.query_one("SELECT row_to_json(s)::text FROM gatekeeper.status s", &[]) else { continue };
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
        // Parking happens at BEGIN or at the first statement of an implicit
        // transaction, before anything is written: a parked session with a
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
                .unwrap_or_default();
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

// ---------------------------------------------------------------------------
// The chaos test.

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn setup_schema(c: &Cluster) {
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

fn worker_pid(c: &Cluster) -> Option<i32> {
    c.admin_query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'", &[])
        .first()
        .map(|r| r.get(0))
}

fn diagnostics(c: &Cluster) -> String {
    let sessions: Vec<String> = c
        .admin_query(
            "SELECT g.application_name, g.state, g.queue_position, g.wait_ms, a.wait_event_type, a.wait_event,
                    left(a.query, 60)
             FROM gatekeeper.sessions g LEFT JOIN pg_stat_activity a USING (pid)
             WHERE g.state <> 'idle' AND g.state <> 'exempt'",
            &[],
        )
        .iter()
        .map(|r| {
            format!(
                "{:?} {} pos={:?} wait_ms={:?} {:?}/{:?} {:?}",
                r.get::<_, Option<String>>(0),
                r.get::<_, String>(1),
                r.get::<_, Option<i32>>(2),
                r.get::<_, Option<f64>>(3),
                r.get::<_, Option<String>>(4),
                r.get::<_, Option<String>>(5),
                r.get::<_, Option<String>>(6)
            )
        })
        .collect();
    format!("status: {}\nsessions not idle:\n  {}", c.status().0, sessions.join("\n  "))
}

#[test]
fn chaos_keeps_the_gate_exact() {
    let size = size();
    let seed = seed();
    println!(
        "chaos: seed {seed} (replay with GATEKEEPER_CHAOS_SEED={seed}); {} sessions ({} app, {} app_to), {} psql \
         drivers, target {} transactions{}",
        size.a_sessions + size.t_sessions,
        size.a_sessions,
        size.t_sessions,
        size.psql_drivers,
        size.xacts,
        if size.long { " (long)" } else { "" }
    );
    let max_connections = (size.a_sessions + size.t_sessions + size.psql_drivers * 2 + 60).to_string();
    let c = Cluster::start(&[
        ("max_connections", &max_connections),
        ("shared_buffers", "32MB"),
        ("pg_gatekeeper.max_active", "3"),
        ("pg_gatekeeper.client_check_interval", CLIENT_CHECK_INTERVAL),
        ("pg_gatekeeper.history_interval", "100ms"),
        ("deadlock_timeout", "100ms"),
    ]);
    setup_schema(&c);
    let start_status = c.status();
    assert_eq!(start_status.int("admitted_total"), 0, "{:?}", start_status.0);
    worker_pid(&c).expect("the worker runs");

    let sh = Shared {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        tokens: Mutex::new(HashMap::new()),
        violations: Mutex::new(vec![]),
    };
    let t0 = Instant::now();
    let mut a = Tally::default();
    let mut tt = Tally::default();
    let mut faults = Tally::default();
    let mut peaks = Peaks::default();
    let mut stuck = None;

    std::thread::scope(|scope| {
        let (c, sh) = (&c, &sh);
        // If this thread panics inside the scope, the scope still joins every
        // thread: make sure they all stop.
        let _stop_on_unwind = StopOnDrop(&sh.stop);
        let mut drivers = vec![];
        for i in 0..size.a_sessions + size.t_sessions {
            let (class, name) = if i < size.a_sessions {
                (Class::A, format!("a{i:03}"))
            } else {
                (Class::T, format!("t{:03}", i - size.a_sessions))
            };
            let d = Driver {
                c,
                sh,
                class,
                name,
                rng: Rng::fork(seed, i as u64 + 1),
                client: None,
                prepared: None,
                timeout_set: false,
                in_block: false,
                connected_once: false,
                last_was_gate_error: false,
                t: Tally::default(),
            };
            drivers.push((class, scope.spawn(move || d.drive())));
        }
        let mut helpers = vec![];
        helpers.push(scope.spawn(move || inject_faults(c, sh, Rng::fork(seed, 10_001))));
        helpers.push(scope.spawn(move || change_limits(c, sh, Rng::fork(seed, 10_002))));
        for k in 0..size.psql_drivers {
            helpers.push(scope.spawn(move || psql_killer(c, sh, k, Rng::fork(seed, 20_000 + k as u64))));
        }
        let mon = scope.spawn(move || monitor(c, sh));

        // Run until the target is reached (or the time is up).
        let mut next_report = Instant::now() + Duration::from_secs(10);
        while sh.completed.load(Ordering::Relaxed) < size.xacts && t0.elapsed() < size.max_wall {
            std::thread::sleep(Duration::from_millis(100));
            if Instant::now() >= next_report {
                next_report += Duration::from_secs(10);
                let s = c.status();
                println!(
                    "chaos: {:>4} s: {} transactions completed; max_active {} tickets {} admitted {} queued {}; \
                     timeouts {} rejected {} cancels {} exits {} lost {} overflow {}",
                    t0.elapsed().as_secs(),
                    sh.completed.load(Ordering::Relaxed),
                    s.max_active(),
                    s.tickets(),
                    s.admitted(),
                    s.queued(),
                    s.int("queue_timeouts_total"),
                    s.int("rejected_total"),
                    s.int("queue_cancels_total"),
                    s.int("queue_exits_total"),
                    s.int("clients_lost_total"),
                    s.int("overflow_total"),
                );
            }
        }
        sh.stop.store(true, Ordering::Relaxed);
        println!("chaos: stopping after {:.1} s", t0.elapsed().as_secs_f64());

        // Every session finishes the transaction it is in. A session that
        // never comes back is stranded: report, then stop the server so
        // that every thread returns.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline && !drivers.iter().all(|(_, h)| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !drivers.iter().all(|(_, h)| h.is_finished()) {
            stuck = Some(diagnostics(c));
            let _ = c.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        }
        for (class, h) in drivers {
            let tally = h.join().expect("session thread panicked");
            match class {
                Class::A => a.merge(tally),
                Class::T => tt.merge(tally),
            }
        }
        for h in helpers {
            faults.merge(h.join().expect("helper thread panicked"));
        }
        peaks = mon.join().expect("monitor panicked");
    });
    let wall = t0.elapsed();
    if let Some(diag) = stuck {
        panic!("sessions did not finish within 120 s of the stop (stranded?)\n{diag}");
    }

    // -- quiet ------------------------------------------------------------
    c.assert_quiet();
    wait_until("every gated session has gone", Duration::from_secs(20), || c.status().int("total_sessions") == 0);
    // Every slot is free again: the worker's next history sample counts
    // slots by state (idle counts attached gated slots whose backend is idle).
    let after: String = c.admin_query("SELECT clock_timestamp()::text", &[])[0].get(0);
    let mut sample = (0, 0, 0);
    wait_until("a history sample after the sessions left", Duration::from_secs(5), || {
        let rows = c.admin_query(
            "SELECT idle, admitted, queued FROM gatekeeper.history
             WHERE sample_time > $1::text::timestamptz ORDER BY sample_time DESC LIMIT 1",
            &[&after],
        );
        rows.first().is_some_and(|r| {
            sample = (r.get::<_, i32>(0), r.get::<_, i32>(1), r.get::<_, i32>(2));
            true
        })
    });

    let s = c.status();
    let log = c.log_text();
    let hist_sum = c.admin_i64("SELECT coalesce(sum(waits), 0)::bigint FROM gatekeeper.wait_histogram");
    let completed = a.completed + tt.completed;
    let attempted = a.attempted + tt.attempted;

    // -- report -------------------------------------------------------------
    println!(
        "chaos: seed {seed}; {:.1} s; {completed} transactions completed of {attempted} attempted",
        wall.as_secs_f64()
    );
    println!(
        "chaos: app sessions:    completed {} attempted {} reconnects {} errors {:?}",
        a.completed, a.attempted, a.reconnects, a.errors
    );
    println!(
        "chaos: app_to sessions: completed {} attempted {} reconnects {} errors {:?}",
        tt.completed, tt.attempted, tt.reconnects, tt.errors
    );
    println!("chaos: faults and changes: {:?}", faults.faults);
    println!("chaos: monitor: {peaks:?}");
    println!("chaos: final gatekeeper.status: {}", s.0);
    println!("chaos: server log messages by kind:\n{}", log_summary(&log));

    // -- checks -------------------------------------------------------------
    let mut bad: Vec<String> = vec![];
    let mut check = |ok: bool, msg: String| {
        if !ok {
            bad.push(msg);
        }
    };
    check(completed >= size.xacts, format!("only {completed} of {} transactions in {:?}", size.xacts, size.max_wall));
    check(
        a.unexpected.is_empty() && tt.unexpected.is_empty(),
        format!("unexpected errors: {:?} {:?}", a.unexpected, tt.unexpected),
    );
    let violations = sh.violations.lock().unwrap().clone();
    check(violations.is_empty(), format!("invariant violations during the run: {violations:#?}"));
    check(
        sample == (0, 0, 0),
        format!("slots still in use after every session left (idle, admitted, queued) = {sample:?}"),
    );
    // The worker came back after every termination, and only then.
    let terminations = faults.fault("worker terminations") as usize;
    let starts = count_lines(&log, "pg_gatekeeper worker started");
    check(
        worker_pid(&c).is_some() && starts == 1 + terminations,
        format!("the worker started {starts} times for {terminations} terminations, or does not run now"),
    );
    let crashes = crash_lines(&log);
    check(crashes.is_empty(), format!("crash lines in the server log: {crashes:#?}"));
    check_totals(&s, &a, &tt, &faults, &log, hist_sum, completed, &mut check);

    if !bad.is_empty() {
        panic!("chaos (seed {seed}) found {} problem(s):\n- {}", bad.len(), bad.join("\n- "));
    }
    println!("chaos: all checks passed (seed {seed})");
}

/// Counts of the log's WARNING/ERROR/FATAL/PANIC and pg_gatekeeper messages,
/// by text with numbers blanked, most frequent first.
fn log_summary(log: &str) -> String {
    let mut kinds: HashMap<String, u64> = HashMap::new();
    for line in log.lines() {
        let Some(at) =
            ["WARNING:  ", "ERROR:  ", "FATAL:  ", "PANIC:  ", "LOG:  pg_gatekeeper"].iter().find_map(|k| line.find(k))
        else {
            continue;
        };
        let mut text = String::new();
        for ch in line[at..].chars() {
            if !ch.is_ascii_digit() {
                text.push(ch);
            } else if !text.ends_with('#') {
                text.push('#');
            }
        }
        *kinds.entry(text.chars().take(110).collect()).or_default() += 1;
    }
    let mut v: Vec<_> = kinds.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter().map(|(k, n)| format!("  {n:>7}  {k}")).collect::<Vec<_>>().join("\n")
}

/// Compare the totals of `gatekeeper.status` with what the test counted.
///
/// One fact about the client library shapes what is exact: the blocking
/// `postgres::Client` polls its connection before the pending request, so
/// when a terminate's FATAL is already in the socket behind an ERROR, the
/// call returns the FATAL (57P01) and the ERROR, though received, is never
/// seen. So a client's own count is exact only for sessions that are never
/// terminated (app_to); for app sessions it is a lower bound, short by at
/// most one per terminate. The server log is exact for everyone: every
/// ERROR is logged, with the application_name (log_line_prefix has %a).
///
/// Exact:
/// - queue_timeouts_total == the 53000 errors the app_to sessions received.
///   Only app_to has a queue timeout (app and psql run with 0 = forever).
///   Every timed-out wait raises exactly one 53000 to its client: at once,
///   or, for BEGIN, at the block's next gated statement, and app_to always
///   sends one after BEGIN. Nothing else can end an app_to wait or hide its
///   error: no fault is injected into app_to and it has no statement_timeout.
///   The server log must agree too.
/// - rejected_total >= the 53400 errors that app_to sessions received + the
///   53400 in the log for app sessions and psql clients (psql clients may be
///   SIGKILLed before they read theirs), and == the 53400 in the log, but
///   for rejections at BEGIN that were never raised: a rejection at BEGIN
///   is raised by the block's next gated statement, and a terminate, a
///   psql kill or a cancel that lands first (57014 instead) loses it. So the
///   excess is at most those faults. The app sessions' own count is within
///   [log - terminates received, log].
/// - overflow_total == the deadlock breaker's log lines (it logs each).
/// - sum(wait_histogram) == waited_total + queue_timeouts_total +
///   queue_cancels_total + queue_exits_total + clients_lost_total (every
///   wait that ended is recorded once, however it ended).
///
/// Bounds (a client cannot tell whether its session was parked or running
/// when a signal landed):
/// - admitted_total >= transactions the postgres clients completed (each
///   needed its own admission; failed ones, psql's and Parse are extra).
/// - waited_total, overflow_total <= admitted_total.
/// - 0 < queue_cancels_total <= 57014 errors received by app sessions + the
///   terminates they received: a wait ended by an ERROR (cancel or
///   statement_timeout) raises 57014 to that client (hidden only by a
///   terminate right behind it), only app sessions are cancelled or have a
///   statement_timeout, and a cancel or timeout of a running statement
///   raises 57014 too, without counting.
/// - 0 < queue_exits_total <= successful pg_terminate_backend calls: the
///   only FATAL that can end a wait here is a terminate (a lost client
///   leaves the queue first and is counted as lost).
/// - 0 < clients_lost_total <= psql clients killed: only psql clients die
///   with their statement in flight; the postgres clients always close
///   cleanly between transactions.
///
/// The lower bounds hold because faults target sessions seen deep in the
/// queue (position >= DEEP) hundreds of times per run.
#[allow(clippy::too_many_arguments)]
fn check_totals(
    s: &Status,
    a: &Tally,
    t: &Tally,
    faults: &Tally,
    log: &str,
    hist_sum: i64,
    completed: u64,
    check: &mut impl FnMut(bool, String),
) {
    let total = |col: &str| s.int(col) as u64;
    let timeouts = total("queue_timeouts_total");
    let rejected = total("rejected_total");
    let admitted = total("admitted_total");
    let waited = total("waited_total");
    let overflow = total("overflow_total");
    let cancels = total("queue_cancels_total");
    let exits = total("queue_exits_total");
    let lost = total("clients_lost_total");

    check(a.err("53000") == 0, format!("app sessions (no queue timeout) got {} 53000 errors", a.err("53000")));
    check(
        timeouts == t.err("53000"),
        format!("queue_timeouts_total {timeouts} but app_to sessions received {} 53000 errors", t.err("53000")),
    );
    let log_timeouts = count_lines(log, "ERROR:  pg_gatekeeper: timed out waiting for admission") as u64;
    check(timeouts == log_timeouts, format!("queue_timeouts_total {timeouts} but {log_timeouts} in the log"));

    let rejections = |prefix: &str| {
        log.lines()
            .filter(|l| l.contains("ERROR:  pg_gatekeeper: admission queue is full") && l.contains(prefix))
            .count() as u64
    };
    let log_rejected = rejections("");
    let (log_rejected_a, log_rejected_psql) = (rejections("] a"), rejections("] psql-"));
    // Rejections at BEGIN whose deferred error a fault may have swallowed.
    let swallowable = faults.fault("terminated")
        + faults.fault("psql killed")
        + faults.fault("psql killed otherwise")
        + a.err("57014");
    check(
        log_rejected <= rejected && rejected <= log_rejected + swallowable,
        format!(
            "rejected_total {rejected} but {log_rejected} in the log (+ at most {swallowable} swallowed by faults)"
        ),
    );
    let seen = t.err("53400") + log_rejected_a + log_rejected_psql;
    check(
        seen <= rejected && rejected <= seen + swallowable,
        format!(
            "rejected_total {rejected} but app_to sessions received {} 53400 errors, and the log has {log_rejected_a} \
             for app sessions and {log_rejected_psql} for psql (+ at most {swallowable} swallowed by faults)",
            t.err("53400")
        ),
    );
    let a_lost = a.err("57P01") + a.err("closed");
    check(
        a.err("53400") <= log_rejected_a && log_rejected_a <= a.err("53400") + a_lost,
        format!(
            "app sessions received {} 53400 errors, the log has {log_rejected_a} ({a_lost} terminates received)",
            a.err("53400")
        ),
    );

    let log_overflow = count_lines(log, "over the limit because process") as u64;
    check(overflow == log_overflow, format!("overflow_total {overflow} but {log_overflow} breaker log lines"));
    let ended = waited + timeouts + cancels + exits + lost;
    check(
        hist_sum as u64 == ended,
        format!("wait_histogram sums to {hist_sum} but {ended} waits ended ({waited} admitted after a wait)"),
    );

    check(admitted >= completed, format!("admitted_total {admitted} < {completed} completed transactions"));
    check(
        waited <= admitted && overflow <= admitted,
        format!("waited {waited} / overflow {overflow} > admitted {admitted}"),
    );

    let a_57014 = a.err("57014");
    check(t.err("57014") == 0, "app_to sessions were cancelled".into());
    check(
        0 < cancels && cancels <= a_57014 + a_lost,
        format!("queue_cancels_total {cancels} not in 1..={a_57014} + {a_lost} (57014 and terminates received)"),
    );
    let terminated = faults.fault("terminated");
    check(0 < exits && exits <= terminated, format!("queue_exits_total {exits} not in 1..={terminated} (terminates)"));
    let killed = faults.fault("psql killed");
    check(0 < lost && lost <= killed, format!("clients_lost_total {lost} not in 1..={killed} (psql clients killed)"));
    check(s.0["wait_time_total_ms"].as_f64().is_some_and(|ms| ms > 0.0), "no wait time recorded".into());
}

// ---------------------------------------------------------------------------
// Crash and restart.

fn worker_count(c: &Cluster) -> i64 {
    c.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
}

const TWO_TICKETS: &[(&str, &str)] = &[("pg_gatekeeper.max_active", "2"), ("pg_gatekeeper.max_tickets", "2")];

/// `pg_ctl restart -m fast` while one session runs, one idles in its
/// transaction and two are parked (one at BEGIN): the shutdown does not
/// wait for the parked sessions, the server comes back with a clean gate,
/// the worker returns, and parking works again.
#[test]
fn pg_ctl_restart_fast_with_parked_sessions() {
    let c = Cluster::start(TWO_TICKETS);
    let runner = c.app("running").spawn("SELECT pg_sleep(60)");
    c.wait_for_event("running", "PgSleep");
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    let w1 = c.app("w1").spawn("SELECT 1");
    c.wait_queued("w1");
    let w2 = c.app("w2").spawn("BEGIN; SELECT 2; COMMIT");
    c.wait_queued("w2");
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (2, 2), "{:?}", s.0);

    let log = c.log_path();
    let t0 = Instant::now();
    let out = c.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60", "-l", log.to_str().unwrap()]);
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "pg_ctl restart failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.log_tail(30)
    );
    assert!(took < Duration::from_secs(15), "the fast restart took {took:?}");

    // Every old session was ended by the shutdown.
    for r in [runner, w1, w2] {
        let name = r.name.clone();
        let d = r.join(Duration::from_secs(10));
        assert!(d.result.is_err(), "{name} survived the restart");
    }
    assert!(h.exec("SELECT 1").is_err(), "the holder survived the restart");
    c.reconnect_admin(Duration::from_secs(20));

    // A clean gate: the shared memory was created anew.
    let s = c.status();
    assert_eq!((s.admitted(), s.queued(), s.int("admitted_total"), s.tickets()), (0, 0, 0, 2), "{:?}", s.0);
    wait_until("the worker is back", Duration::from_secs(10), || worker_count(&c) == 1);

    // The shutdown was clean (a shutdown checkpoint, no crash recovery).
    let text = c.log_text();
    assert_eq!(count_lines(&text, "database system is shut down"), 1, "{}", c.log_tail(40));
    assert_eq!(count_lines(&text, "was not properly shut down"), 0, "{}", c.log_tail(40));
    let crashes = crash_lines(&text);
    assert!(crashes.is_empty(), "{crashes:#?}");

    // Parking and hand-off work again.
    let mut h1 = c.app("holder1");
    h1.ok("BEGIN");
    h1.ok("SELECT 1");
    let mut h2 = c.app("holder2");
    h2.ok("BEGIN");
    h2.ok("SELECT 1");
    let w3 = c.app("w3").spawn("SELECT 3");
    c.wait_queued("w3");
    h1.ok("COMMIT");
    w3.join_ok(Duration::from_secs(10));
    h2.ok("COMMIT");
    let s = c.status();
    assert_eq!((s.int("admitted_total"), s.int("waited_total")), (3, 1), "{:?}", s.0);
    c.assert_quiet();
}

/// The gate lives in shared memory, independent of the SQL objects:
/// `DROP EXTENSION` while sessions run, idle in a transaction and are
/// parked (at BEGIN and at a statement) breaks nothing; parked sessions
/// are still admitted in order and new ones still park; after `CREATE
/// EXTENSION` the views show the live state and the totals kept counting.
#[test]
fn drop_and_create_extension_while_sessions_are_parked() {
    let c = Cluster::start(TWO_TICKETS);
    c.admin_exec("CREATE TABLE arrivals (id serial, name text); GRANT ALL ON arrivals, arrivals_id_seq TO app;");
    let mut h = c.app("holder");
    h.ok("BEGIN");
    h.ok("SELECT 1");
    let runner = c.app("running").spawn("SELECT pg_sleep(1.5)");
    c.wait_for_event("running", "PgSleep");
    let w1 = c.app("w1").spawn("BEGIN; INSERT INTO arrivals (name) VALUES ('w1')");
    assert_eq!(c.wait_queued("w1"), 1);
    let w2 = c.app("w2").spawn("INSERT INTO arrivals (name) VALUES ('w2')");
    assert_eq!(c.wait_queued("w2"), 2);
    let before = c.status();
    assert_eq!((before.admitted(), before.queued()), (2, 2), "{:?}", before.0);

    let t0 = Instant::now();
    c.admin_exec("DROP EXTENSION pg_gatekeeper");
    assert!(t0.elapsed() < Duration::from_secs(10), "DROP EXTENSION took {:?}", t0.elapsed());
    let e = c.admin_try("SELECT * FROM gatekeeper.status");
    assert_eq!(sqlstate(&e).as_deref(), Some("42P01"), "{e:?}");
    // Still parked, in the Extension wait.
    for name in ["w1", "w2"] {
        assert_eq!(c.wait_event(name), (Some("Extension".into()), Some("Extension".into())), "{name}");
    }

    // The runner ends: its place goes to the head of the queue (w1), which
    // then idles in its transaction; w2 stays parked.
    runner.join_ok(Duration::from_secs(10));
    let mut w1 = w1.join_ok(Duration::from_secs(10)).session;
    assert_eq!(c.activity_state("w1").as_deref(), Some("idle in transaction"));
    assert_eq!(c.wait_event("w2").0.as_deref(), Some("Extension"), "w2 still parked");
    // A newcomer parks too, without the SQL objects.
    let w3 = c.app("w3").spawn("INSERT INTO arrivals (name) VALUES ('w3')");
    c.wait_for_event("w3", "Extension");

    c.admin_exec("CREATE EXTENSION pg_gatekeeper");
    // The views work again and show the live state; the totals survived.
    let s = c.status();
    assert_eq!((s.admitted(), s.queued()), (2, 2), "{:?}", s.0);
    assert!(s.int("admitted_total") > before.int("admitted_total"), "{:?}", s.0);
    assert_eq!(c.session("w2").unwrap().queue_position, Some(1));
    assert_eq!(c.session("w3").unwrap().queue_position, Some(2));
    assert_eq!(c.session("holder").unwrap().state, "idle in transaction");
    assert!(c.admin_i64("SELECT count(*) FROM gatekeeper.history") > 0, "history survived");
    c.admin_exec("SELECT gatekeeper.reset()");
    assert_eq!(c.status().int("admitted_total"), 0);

    h.ok("COMMIT");
    // The order of the ids in `arrivals` shows the order of admission.
    w2.join_ok(Duration::from_secs(10));
    w3.join_ok(Duration::from_secs(10));
    w1.ok("INSERT INTO arrivals (name) VALUES ('w1 again'); COMMIT");
    let crashes = crash_lines(&c.log_text());
    assert!(crashes.is_empty(), "{crashes:#?}");
    let names: Vec<String> =
        c.admin_query("SELECT name FROM arrivals ORDER BY id", &[]).iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["w1", "w2", "w3", "w1 again"]);
    let s = c.status();
    assert_eq!((s.int("admitted_total"), s.int("waited_total")), (2, 2), "{:?}", s.0);
    c.assert_quiet();
}

// ---------------------------------------------------------------------------
// Findings.

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
    let mut h = Session { name: "holder".into(), client: c.connect("app_to", "holder") };
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
