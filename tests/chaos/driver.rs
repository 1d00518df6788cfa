//! The session drivers: one thread per postgres client, of class "a" (role
//! `app`, fault targets) or "t" (role `app_to`, queue timeouts), each running
//! random transactions of the kinds below and counting what happens.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::common::Cluster;
use crate::kinds::{expected, Class, Kind, A_KINDS, T_KINDS};
use crate::rng::Rng;
use crate::setup::HOT_ROWS;
use crate::shared::{Shared, Tally};

enum Fail {
    /// The statement failed; the session is still connected.
    Db,
    /// The connection is gone (terminated).
    Lost,
}

pub(crate) struct Driver<'a> {
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
    pub(crate) fn new(c: &'a Cluster, sh: &'a Shared, class: Class, name: String, rng: Rng) -> Driver<'a> {
        Driver {
            c,
            sh,
            class,
            name,
            rng,
            client: None,
            prepared: None,
            timeout_set: false,
            in_block: false,
            connected_once: false,
            last_was_gate_error: false,
            t: Tally::default(),
        }
    }

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
            // Parse runs nothing and is never gated; the execution below
            // is (and may park, time out, be cancelled) like any statement.
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
                // Admitted at its first statement, then idle in transaction
                // on the client.
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
                // statement_timeout while the block's first statement parks:
                // the SELECT reports 57014 and the block is aborted (cleanup
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

    pub(crate) fn drive(mut self) -> Tally {
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
