//! Shared fixture for the integration tests: a private cluster of the
//! PostgreSQL under test (`PG_BINDIR`) with pg_gatekeeper preloaded, plus
//! small helpers to drive sessions and to wait for states by polling the
//! extension's views.
//!
//! Conventions used by every test:
//! - gated sessions log in as the non-superuser role `app`, each with a
//!   unique `application_name` by which the observer finds it;
//! - the `postgres` superuser is exempt (the default) and is the observer:
//!   it reads `gatekeeper.status`, `gatekeeper.sessions` and
//!   `pg_stat_activity`, and is never parked;
//! - nothing waits by sleeping a fixed time: helpers poll a view until a
//!   state is reached, and panic with a description on timeout;
//! - every test ends with [`Cluster::assert_quiet`].
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::Value;

/// PostgreSQL's bin directory: `PG_BINDIR` (scripts/pg_env.sh sets it for
/// the version under test), or Debian's PostgreSQL 15.
fn bindir() -> String {
    std::env::var("PG_BINDIR").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_string())
}

/// Polling period of [`wait_until`].
const POLL: Duration = Duration::from_millis(20);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Run a command as the `postgres` OS user (initdb and postgres refuse root),
/// with RUST_BACKTRACE unset (it would append backtraces to error messages).
pub fn as_postgres(program: &str, args: &[&str]) -> std::process::Output {
    as_postgres_env(program, args, &[])
}

/// Like [`as_postgres`], with these `NAME=value` settings in the environment.
fn as_postgres_env(program: &str, args: &[&str], env: &[&str]) -> std::process::Output {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", "env", "-u", "RUST_BACKTRACE"])
        .args(env)
        .arg(format!("{}/{program}", bindir()))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    out
}

fn port_is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Poll `cond` every 20 ms until it holds; panic with `desc` after `timeout`.
pub fn wait_until(desc: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_until_or(desc, timeout, cond, String::new);
}

/// [`wait_until`], with `diagnose()` added to the panic message.
pub fn wait_until_or(desc: &str, timeout: Duration, mut cond: impl FnMut() -> bool, diagnose: impl FnOnce() -> String) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting until {desc}{}", diagnose());
        }
        std::thread::sleep(POLL);
    }
}

/// The SQLSTATE of a failed statement, if the server sent one.
pub fn sqlstate<T>(r: &Result<T, postgres::Error>) -> Option<String> {
    r.as_ref().err().and_then(|e| e.code()).map(|c| c.code().to_string())
}

/// One row of `gatekeeper.status`. Columns are read by name from JSON.
#[derive(Clone, Debug)]
pub struct Status(pub Value);

impl Status {
    /// An integer column (panics if missing or null).
    pub fn int(&self, col: &str) -> i64 {
        self.0[col].as_i64().unwrap_or_else(|| panic!("gatekeeper.status.{col} is not an integer in {}", self.0))
    }
    pub fn max_active(&self) -> i64 {
        self.int("max_active")
    }
    pub fn tickets(&self) -> i64 {
        self.int("tickets")
    }
    pub fn admitted(&self) -> i64 {
        self.int("admitted")
    }
    pub fn queued(&self) -> i64 {
        self.int("queued")
    }
}

/// One row of `gatekeeper.sessions`, the columns the tests use.
#[derive(Clone, Debug)]
pub struct SessionRow {
    pub pid: i32,
    pub application_name: Option<String>,
    pub state: String,
    pub queue_position: Option<i32>,
}

/// A private cluster, stopped and removed when dropped (kept on failure).
pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    admin: Mutex<Client>,
}

impl Cluster {
    /// initdb, configure, start, `CREATE EXTENSION pg_gatekeeper`, and create
    /// the gated role `app`. `extra_conf` lines go into postgresql.conf.
    pub fn start(extra_conf: &[(&str, &str)]) -> Cluster {
        Cluster::start_with(extra_conf, &[], true)
    }

    /// Like [`Cluster::start`], with `env` (`NAME=value`) in the server's
    /// environment; without the library preloaded when `preload` is false
    /// (and then without the extension).
    pub fn start_with(extra_conf: &[(&str, &str)], env: &[&str], preload: bool) -> Cluster {
        let pid = std::process::id();
        let (dir, port) = loop {
            let n = COUNTER.fetch_add(1, Ordering::SeqCst);
            let port = 20000 + (pid % 1000) as u16 * 20 + (n % 20) as u16;
            let dir = PathBuf::from(format!("/tmp/pg_gatekeeper_test.{pid}.{n}"));
            if !dir.exists() && port_is_free(port) {
                break (dir, port);
            }
            assert!(n < 200, "no free port or directory found");
        };
        fs::create_dir_all(&dir).unwrap();
        let st = Command::new("chown").args(["postgres:postgres"]).arg(&dir).status().unwrap();
        assert!(st.success(), "chown {}", dir.display());

        let data = dir.join("data");
        let data_s = data.to_str().unwrap();
        let out = as_postgres(
            "initdb",
            &["-D", data_s, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--no-locale"],
        );
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));

        let mut conf = String::from("\n# pg_gatekeeper integration test\n");
        let mut line = |k: &str, v: &str| conf.push_str(&format!("{k} = '{v}'\n"));
        line("shared_preload_libraries", if preload { "pg_gatekeeper" } else { "" });
        line("port", &port.to_string());
        line("unix_socket_directories", dir.to_str().unwrap());
        line("listen_addresses", "");
        line("max_connections", "50");
        line("shared_buffers", "16MB");
        line("fsync", "off");
        line("log_line_prefix", "%m [%p] %a ");
        // Stall relief off unless a test asks for it: most tests hold places
        // with long statements on purpose (later lines win).
        line("pg_gatekeeper.stall_timeout", "0");
        for (k, v) in extra_conf {
            line(k, v);
        }
        let conf_path = data.join("postgresql.conf");
        let mut text = fs::read_to_string(&conf_path).unwrap();
        text.push_str(&conf);
        fs::write(&conf_path, text).unwrap();

        let log = dir.join("log");
        let out =
            as_postgres_env("pg_ctl", &["-D", data_s, "-l", log.to_str().unwrap(), "-w", "-t", "30", "start"], env);
        if !out.status.success() {
            let tail = fs::read_to_string(&log).unwrap_or_default();
            panic!("pg_ctl start failed: {}\n{tail}", String::from_utf8_lossy(&out.stderr));
        }

        // No Cluster owns the server yet, so its Drop would not stop it.
        let admin = connect_to(&dir, port, "postgres", "admin").unwrap_or_else(|e| {
            as_postgres_env("pg_ctl", &["-D", data_s, "-m", "immediate", "-w", "stop"], env);
            panic!("connect as postgres: {e}")
        });
        let cluster = Cluster { dir, port, admin: Mutex::new(admin) };
        if preload {
            cluster.admin_exec("CREATE EXTENSION pg_gatekeeper");
        }
        cluster.admin_exec("CREATE ROLE app LOGIN");
        cluster
    }

    // -- connections -------------------------------------------------------

    /// A new connection as `user`, tagged with `application_name = name`.
    pub fn connect(&self, user: &str, name: &str) -> Client {
        connect_to(&self.dir, self.port, user, name).unwrap_or_else(|e| panic!("connect as {user}: {e}"))
    }

    /// A new connection as `user` to database `dbname`, named after it.
    pub fn connect_db(&self, user: &str, dbname: &str) -> Client {
        connect_to_db(&self.dir, self.port, user, dbname, dbname)
            .unwrap_or_else(|e| panic!("connect as {user} to {dbname}: {e}"))
    }

    /// A session as `role`, named `name`.
    pub fn session_as(&self, role: &str, name: &str) -> Session {
        Session { name: name.to_string(), client: self.connect(role, name) }
    }

    /// A gated session: role `app`, named `name`.
    pub fn app(&self, name: &str) -> Session {
        self.session_as("app", name)
    }

    /// An exempt superuser session (the observer's role), named `name`.
    pub fn superuser(&self, name: &str) -> Session {
        self.session_as("postgres", name)
    }

    /// The pg_gatekeeper worker's pid, if one runs.
    pub fn worker_pid(&self) -> Option<i32> {
        self.admin_query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'", &[])
            .first()
            .map(|r| r.get(0))
    }

    /// How many pg_gatekeeper workers run (1, or 0 while it restarts).
    pub fn worker_count(&self) -> i64 {
        self.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'")
    }

    /// Run SQL on the observer connection (superuser, exempt); panics on error.
    pub fn admin_exec(&self, sql: &str) {
        self.admin.lock().unwrap().batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// Run a query on the observer connection.
    pub fn admin_query(&self, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Vec<postgres::Row> {
        self.admin.lock().unwrap().query(sql, params).unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    }

    /// A single integer (bigint) result on the observer connection.
    pub fn admin_i64(&self, sql: &str) -> i64 {
        self.admin_query(sql, &[])[0].get(0)
    }

    /// Create `burn(s float8)`, which computes for `s` seconds from its own
    /// start, executable by `app`. (Not from `statement_timestamp()`: that
    /// is taken before the statement waits in the queue, and a storm of
    /// burns that queue then computes for less the longer it waits.)
    pub fn create_burn(&self) {
        self.admin_exec(
            "CREATE FUNCTION burn(s float8) RETURNS int LANGUAGE plpgsql AS $$
               DECLARE t0 timestamptz := clock_timestamp();
               BEGIN
                 WHILE clock_timestamp() < t0 + s * interval '1 s' LOOP END LOOP;
                 RETURN 1;
               END $$;
             GRANT EXECUTE ON FUNCTION burn(float8) TO app;",
        );
    }

    /// Sessions of `app` on a CPU now (active, no wait event).
    pub fn app_computing(&self) -> i64 {
        self.admin_i64(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND state = 'active' AND wait_event IS NULL",
        )
    }

    /// After a crash restart: wait until the server accepts connections
    /// again and replace the observer connection.
    pub fn reconnect_admin(&self, timeout: Duration) {
        let mut fresh = None;
        wait_until("the server accepts connections again", timeout, || {
            fresh = connect_to(&self.dir, self.port, "postgres", "admin").ok().filter(|c: &Client| !c.is_closed());
            // A connection can be accepted while startup is still finishing.
            fresh.as_mut().is_some_and(|c| c.batch_execute("SELECT 1").is_ok())
        });
        *self.admin.lock().unwrap() = fresh.unwrap();
    }

    /// SIGKILL backend `pid`: the postmaster ends every backend and lays
    /// shared memory out again. Reconnects the observer once it has: a
    /// connection made before the postmaster noticed the crash would be
    /// ended by it a moment later.
    pub fn crash_restart(&self, pid: i32, timeout: Duration) {
        const REINIT: &str = "all server processes terminated; reinitializing";
        let before = count_lines(&self.log_text(), REINIT);
        Cluster::kill(pid, "KILL");
        wait_until("the postmaster reinitializes after the crash", timeout, || {
            count_lines(&self.log_text(), REINIT) > before
        });
        self.reconnect_admin(timeout);
    }

    /// `ALTER SYSTEM SET` each setting and reload; returns once the observer
    /// backend has reloaded and, for the limit settings, once the worker has
    /// applied them (visible in `gatekeeper.status`).
    pub fn set_conf(&self, settings: &[(&str, &str)]) {
        for (k, v) in settings {
            // ALTER SYSTEM takes no parameters; these are the tests' own constants.
            self.admin_exec(&format!("ALTER SYSTEM SET {k} = '{v}'"));
        }
        let before: String = self.admin_query("SELECT pg_conf_load_time()::text", &[])[0].get(0);
        self.admin_exec("SELECT pg_reload_conf()");
        wait_until("the observer reloaded its configuration", Duration::from_secs(5), || {
            let now: String = self.admin_query("SELECT pg_conf_load_time()::text", &[])[0].get(0);
            now != before
        });
        for (k, v) in settings {
            if *k == "pg_gatekeeper.max_active" {
                let want: i64 = v.parse().unwrap();
                if want > 0 {
                    wait_until(&format!("the worker applies max_active = {want}"), Duration::from_secs(5), || {
                        self.status().max_active() == want
                    });
                }
            }
        }
    }

    // -- observing ---------------------------------------------------------

    /// The one row of `gatekeeper.status`.
    pub fn status(&self) -> Status {
        let text: String = self.admin_query("SELECT row_to_json(s)::text FROM gatekeeper.status s", &[])[0].get(0);
        Status(serde_json::from_str(&text).unwrap())
    }

    /// Every row of `gatekeeper.sessions`.
    pub fn sessions(&self) -> Vec<SessionRow> {
        self.admin_query("SELECT pid, application_name, state, queue_position FROM gatekeeper.sessions", &[])
            .iter()
            .map(|r| SessionRow {
                pid: r.get(0),
                application_name: r.get(1),
                state: r.get(2),
                queue_position: r.get(3),
            })
            .collect()
    }

    /// The `gatekeeper.sessions` row of the session named `name`, if connected.
    pub fn session(&self, name: &str) -> Option<SessionRow> {
        self.sessions().into_iter().find(|s| s.application_name.as_deref() == Some(name))
    }

    /// The backend pid of the session named `name`.
    pub fn pid_of(&self, name: &str) -> i32 {
        self.session(name).unwrap_or_else(|| panic!("no session named {name}")).pid
    }

    /// `wait_event_type` and `wait_event` of the session named `name`.
    pub fn wait_event(&self, name: &str) -> (Option<String>, Option<String>) {
        let rows = self.admin_query(
            "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        );
        rows.first().map(|r| (r.get(0), r.get(1))).unwrap_or((None, None))
    }

    /// `pg_stat_activity.state` of the session named `name`.
    pub fn activity_state(&self, name: &str) -> Option<String> {
        let rows = self.admin_query("SELECT state FROM pg_stat_activity WHERE application_name = $1", &[&name]);
        rows.first().and_then(|r| r.get(0))
    }

    /// Wait until the session named `name` is parked; returns its queue position.
    pub fn wait_queued(&self, name: &str) -> i32 {
        let mut pos = None;
        wait_until(&format!("{name} is queued"), Duration::from_secs(5), || {
            pos = self.session(name).filter(|s| s.state == "queued").and_then(|s| s.queue_position);
            pos.is_some()
        });
        pos.unwrap()
    }

    /// Wait until the session named `name` shows `wait_event = event`.
    pub fn wait_for_event(&self, name: &str, event: &str) {
        wait_until(&format!("{name} waits on {event}"), Duration::from_secs(5), || {
            self.wait_event(name).1.as_deref() == Some(event)
        });
    }

    /// Wait until `gatekeeper.status` satisfies `cond`.
    pub fn wait_status(&self, desc: &str, cond: impl Fn(&Status) -> bool) -> Status {
        self.wait_status_for(desc, Duration::from_secs(5), cond)
    }

    /// Wait up to `timeout` until `gatekeeper.status` satisfies `cond`.
    pub fn wait_status_for(&self, desc: &str, timeout: Duration, cond: impl Fn(&Status) -> bool) -> Status {
        let last = std::cell::RefCell::new(None);
        wait_until_or(
            desc,
            timeout,
            || {
                let s = self.status();
                let ok = cond(&s);
                *last.borrow_mut() = Some(s);
                ok
            },
            // What the gate looked like, and how it got there: a timing
            // failure on a loaded machine is read from this alone.
            || {
                let history: Vec<String> = self
                    .admin_query(
                        "SELECT to_char(sample_time, 'HH24:MI:SS.MS') || ' limit ' || max_active || ' ' || limit_reason
                                || ' admitted ' || admitted || ' queued ' || queued || ' running ' || running
                           FROM (SELECT * FROM gatekeeper.history ORDER BY sample_time DESC LIMIT 40) h
                          ORDER BY sample_time",
                        &[],
                    )
                    .iter()
                    .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
                    .collect();
                let status = last.borrow().as_ref().map(|s| s.0.to_string()).unwrap_or_default();
                format!("\nlast gatekeeper.status: {status}\nhistory:\n  {}", history.join("\n  "))
            },
        );
        last.into_inner().unwrap()
    }

    /// The invariant at a quiet moment (docs/DESIGN.md §8): nothing admitted, nothing
    /// queued, no session in a state that implies either, and no client
    /// backend parked on the Extension wait event.
    pub fn assert_quiet(&self) {
        wait_until("the gate is quiet (admitted = 0, queued = 0)", Duration::from_secs(5), || {
            let s = self.status();
            s.admitted() == 0 && s.queued() == 0
        });
        wait_until("no session is queued, active or idle in transaction", Duration::from_secs(5), || {
            self.sessions().iter().all(|s| !matches!(s.state.as_str(), "queued" | "active" | "idle in transaction"))
        });
        wait_until("no client backend waits on the Extension wait event", Duration::from_secs(5), || {
            self.admin_i64(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND wait_event_type = 'Extension'",
            ) == 0
        });
    }

    /// The server log holds `line`; the log's last lines are the message
    /// where it does not.
    pub fn assert_logged(&self, line: &str) {
        assert!(self.log_text().contains(line), "not in the server log: {line}\n{}", self.log_tail(5));
    }

    /// The tail of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Send `signal` (e.g. "KILL") to a process.
    pub fn kill(pid: i32, signal: &str) {
        let st = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
        assert!(st.success(), "kill -{signal} {pid}");
    }

    /// Stop process `pid` (SIGSTOP) until the guard is dropped, also when
    /// the test fails meanwhile: a stopped process left behind would hold
    /// the cluster's shutdown until the postmaster's SIGKILL.
    pub fn stop_process(pid: i32) -> Stopped {
        Cluster::kill(pid, "STOP");
        Stopped(pid)
    }

    // -- added for the chaos and restart tests (tests/chaos/) ---------------

    /// Like [`Cluster::connect`], but a failure is returned instead of
    /// panicking (for clients that reconnect while the server is busy).
    pub fn try_connect(&self, user: &str, name: &str) -> Result<Client, postgres::Error> {
        connect_to(&self.dir, self.port, user, name)
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The whole server log.
    pub fn log_text(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Run SQL on the observer connection and return the result, without
    /// panicking (for statements that are expected to fail).
    pub fn admin_try(&self, sql: &str) -> Result<(), postgres::Error> {
        self.admin.lock().unwrap().batch_execute(sql)
    }

    /// Run `pg_ctl -D <data> args...` as the postgres user. A command that
    /// starts the server (start, restart) must pass `-l <log>`, so that the
    /// postmaster does not inherit this process's pipes.
    pub fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        let data = self.data_dir();
        let mut all = vec!["-D", data.to_str().unwrap()];
        all.extend_from_slice(args);
        as_postgres("pg_ctl", &all)
    }

    /// A `psql` client process of its own (so that it can be killed with
    /// SIGKILL), connected as `user` with `application_name = name`, running
    /// each of `commands` as a separate `-c` (each is sent as its own query).
    /// Output is discarded.
    pub fn psql(&self, user: &str, name: &str, commands: &[&str]) -> std::process::Child {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-q", "-h", self.dir.to_str().unwrap(), "-p", &self.port.to_string()])
            .args(["-U", user, "-d", "postgres"]);
        for c in commands {
            cmd.args(["-c", c]);
        }
        cmd.env("PGAPPNAME", name)
            .env_remove("RUST_BACKTRACE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn psql")
    }
}

/// Lines of the server log `text` that contain `needle`.
pub fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Lines that mean a server process crashed or the server reinitialised.
pub fn crash_lines(text: &str) -> Vec<String> {
    const BAD: &[&str] = &[
        "PANIC:",
        "terminated by signal",
        "was terminated by exception",
        "TRAP:",
        "terminating any other active server processes",
        "all server processes terminated; reinitializing",
    ];
    text.lines().filter(|l| BAD.iter().any(|b| l.contains(b))).map(str::to_string).collect()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = as_postgres("pg_ctl", &["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
        if std::thread::panicking() {
            eprintln!(
                "test failed; cluster kept in {}\n--- server log tail ---\n{}",
                self.dir.display(),
                self.log_tail(40)
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn connect_to(dir: &Path, port: u16, user: &str, name: &str) -> Result<Client, postgres::Error> {
    connect_to_db(dir, port, user, "postgres", name)
}

/// Like [`connect_to`], to database `dbname`.
pub fn connect_to_db(dir: &Path, port: u16, user: &str, dbname: &str, name: &str) -> Result<Client, postgres::Error> {
    postgres::Config::new().host_path(dir).port(port).user(user).dbname(dbname).application_name(name).connect(NoTls)
}

/// A process stopped by [`Cluster::stop_process`]: continued when dropped.
pub struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-CONT").arg(self.0.to_string()).status();
    }
}

/// A client connection with a name (its `application_name`).
pub struct Session {
    pub name: String,
    pub client: Client,
}

impl Session {
    /// Run SQL (simple protocol) and wait for the result.
    pub fn exec(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }

    /// Run SQL (simple protocol), panicking on error.
    pub fn ok(&mut self, sql: &str) {
        let name = self.name.clone();
        self.exec(sql).unwrap_or_else(|e| panic!("{name}: {sql}: {e:?}"));
    }

    /// Run SQL in a thread of its own; the session comes back with the result.
    pub fn spawn(self, sql: &str) -> Running {
        let sql = sql.to_string();
        self.spawn_with(move |c| c.batch_execute(&sql))
    }

    /// Run any client call in a thread of its own.
    pub fn spawn_with(
        mut self,
        f: impl FnOnce(&mut Client) -> Result<(), postgres::Error> + Send + 'static,
    ) -> Running {
        let name = self.name.clone();
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            let r = f(&mut self.client);
            (self, r, Instant::now())
        });
        Running { name, started, handle }
    }

    /// Run `sql` again and again in a thread of its own until `stop` is set.
    pub fn looping(self, sql: &str, stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> Running {
        let sql = sql.to_string();
        let stop = stop.clone();
        self.spawn_with(move |c| {
            while !stop.load(Ordering::Relaxed) {
                c.batch_execute(&sql)?;
            }
            Ok(())
        })
    }

    pub fn cancel_token(&self) -> postgres::CancelToken {
        self.client.cancel_token()
    }
}

/// A statement running in its own thread.
pub struct Running {
    pub name: String,
    pub started: Instant,
    handle: JoinHandle<(Session, Result<(), postgres::Error>, Instant)>,
}

/// What a finished [`Running`] gives back.
pub struct Done {
    pub session: Session,
    pub result: Result<(), postgres::Error>,
    /// When the call returned.
    pub finished: Instant,
    /// How long the call took.
    pub elapsed: Duration,
}

impl Running {
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Wait for the statement to end, panicking if it takes longer than `timeout`.
    pub fn join(self, timeout: Duration) -> Done {
        let name = self.name.clone();
        wait_until(&format!("{name}'s statement returns"), timeout, || self.handle.is_finished());
        let (session, result, finished) = self.handle.join().expect("session thread panicked");
        Done { session, result, finished, elapsed: finished - self.started }
    }

    /// Like [`Running::join`], and the statement must have succeeded.
    pub fn join_ok(self, timeout: Duration) -> Done {
        let d = self.join(timeout);
        if let Err(e) = &d.result {
            panic!("{}: statement failed: {e:?}", d.session.name);
        }
        d
    }
}

/// Assert that `running` is still parked, polling for `dur` (a negative check
/// cannot wait for a state, so it watches the state for a while).
pub fn assert_stays_queued(cluster: &Cluster, running: &Running, dur: Duration) {
    let start = Instant::now();
    while start.elapsed() < dur {
        assert!(!running.is_finished(), "{} was admitted but should still be parked", running.name);
        let state = cluster.session(&running.name).map(|s| s.state);
        assert_eq!(state.as_deref(), Some("queued"), "{} should still be parked", running.name);
        std::thread::sleep(POLL);
    }
}

/// A bare protocol-3 connection over the cluster's Unix socket, for the
/// messages the `postgres` crate does not send: the fastpath function call
/// (libpq's `PQfn`, behind its large-object API), and Bind with text
/// parameters of any type, on a statement named by the test.
pub struct Wire {
    stream: std::os::unix::net::UnixStream,
}

/// What the server answered to a request, up to ReadyForQuery.
#[derive(Debug)]
pub enum WireReply {
    /// The function's or the query's first value (text format), if any.
    Value(Option<String>),
    /// An ErrorResponse: its SQLSTATE and message.
    Error { code: String, message: String },
}

impl Wire {
    /// Connect as `user` to database `postgres` with `application_name = name`
    /// (trust authentication) and read up to the first ReadyForQuery.
    pub fn connect(cluster: &Cluster, user: &str, name: &str) -> Wire {
        let path = cluster.dir.join(format!(".s.PGSQL.{}", cluster.port));
        let stream = std::os::unix::net::UnixStream::connect(&path).expect("connect to the socket");
        let mut w = Wire { stream };
        let mut body = 196608i32.to_be_bytes().to_vec(); // protocol 3.0
        for (k, v) in [("user", user), ("database", "postgres"), ("application_name", name)] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        msg.extend_from_slice(&body);
        w.write(&msg);
        match w.reply() {
            WireReply::Error { code, message } => panic!("{name}: connect failed: {code} {message}"),
            WireReply::Value(_) => w,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("write to the server");
    }

    /// Append one message of type `tag` with `body`.
    fn message(buf: &mut Vec<u8>, tag: u8, body: &[u8]) {
        buf.push(tag);
        buf.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        buf.extend_from_slice(body);
    }

    fn cstr(buf: &mut Vec<u8>, s: &str) {
        buf.extend_from_slice(s.as_bytes());
        buf.push(0);
    }

    /// Text-format parameters: one format code (text), then each value.
    fn text_args(buf: &mut Vec<u8>, args: &[&str]) {
        buf.extend_from_slice(&1i16.to_be_bytes());
        buf.extend_from_slice(&0i16.to_be_bytes());
        buf.extend_from_slice(&(args.len() as i16).to_be_bytes());
        for a in args {
            buf.extend_from_slice(&(a.len() as i32).to_be_bytes());
            buf.extend_from_slice(a.as_bytes());
        }
    }

    /// Read messages up to ReadyForQuery; the first value or error wins.
    fn reply(&mut self) -> WireReply {
        use std::io::Read;
        let mut out: Option<WireReply> = None;
        loop {
            let mut head = [0u8; 5];
            self.stream.read_exact(&mut head).expect("read from the server");
            let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize - 4;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).expect("read from the server");
            match head[0] {
                b'Z' => return out.unwrap_or(WireReply::Value(None)),
                b'R' => assert_eq!(&body[..4], &[0, 0, 0, 0], "only trust authentication is supported"),
                // FunctionCallResponse: the value's length, then the value.
                b'V' | b'D' if out.is_none() => {
                    let at = if head[0] == b'V' { 0 } else { 2 }; // DataRow: column count first
                    let n = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                    let v = (n >= 0).then(|| String::from_utf8_lossy(&body[at + 4..at + 4 + n as usize]).into_owned());
                    out = Some(WireReply::Value(v));
                }
                b'E' => {
                    let (mut code, mut message) = (String::new(), String::new());
                    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
                        let text = String::from_utf8_lossy(&field[1..]).into_owned();
                        match field[0] {
                            b'C' => code = text,
                            b'M' => message = text,
                            _ => {}
                        }
                    }
                    out.get_or_insert(WireReply::Error { code, message });
                }
                _ => {}
            }
        }
    }

    /// A fastpath function call (message `F`) of function `oid` with text
    /// arguments, as libpq's `PQfn` sends it; waits for the answer.
    pub fn call(&mut self, oid: u32, args: &[&str]) -> WireReply {
        self.send_call(oid, args);
        self.reply()
    }

    /// Parse `sql` as the named statement `name` (parameter types inferred), then Sync.
    pub fn parse(&mut self, name: &str, sql: &str) -> WireReply {
        let mut body = vec![];
        Wire::cstr(&mut body, name);
        Wire::cstr(&mut body, sql);
        body.extend_from_slice(&0i16.to_be_bytes());
        let mut buf = vec![];
        Wire::message(&mut buf, b'P', &body);
        Wire::message(&mut buf, b'S', &[]);
        self.write(&buf);
        self.reply()
    }

    /// Send Bind (text parameters), Execute and Sync for the named statement,
    /// without waiting for the answer.
    pub fn send_bind_execute(&mut self, name: &str, args: &[&str]) {
        let mut bind = vec![];
        Wire::cstr(&mut bind, ""); // the unnamed portal
        Wire::cstr(&mut bind, name);
        Wire::text_args(&mut bind, args);
        bind.extend_from_slice(&0i16.to_be_bytes()); // results in text
        let mut execute = vec![];
        Wire::cstr(&mut execute, "");
        execute.extend_from_slice(&0i32.to_be_bytes());
        let mut buf = vec![];
        Wire::message(&mut buf, b'B', &bind);
        Wire::message(&mut buf, b'E', &execute);
        Wire::message(&mut buf, b'S', &[]);
        self.write(&buf);
    }

    /// Bind and execute the named statement and read the answer.
    pub fn bind_execute(&mut self, name: &str, args: &[&str]) -> WireReply {
        self.send_bind_execute(name, args);
        self.reply()
    }

    /// [`Wire::bind_execute`] on a thread of its own, so that the test can
    /// watch the execution park; the thread gives the connection back with
    /// the answer.
    pub fn spawn_bind_execute(mut self, name: &str, args: &[&str]) -> std::thread::JoinHandle<(Wire, WireReply)> {
        let (name, args) = (name.to_string(), args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = self.bind_execute(&name, &args);
            (self, r)
        })
    }

    /// Send Parse, Bind and Execute of `sql` (unnamed, no parameters) and
    /// flush them, without Sync: the statement runs, and then the server
    /// waits for the next message with the statement still active, as a
    /// client pipelining several statements leaves it. [`Wire::sync`] ends it.
    pub fn send_execute_without_sync(&mut self, sql: &str) {
        let mut parse = vec![];
        Wire::cstr(&mut parse, "");
        Wire::cstr(&mut parse, sql);
        parse.extend_from_slice(&0i16.to_be_bytes());
        let mut bind = vec![];
        Wire::cstr(&mut bind, "");
        Wire::cstr(&mut bind, "");
        Wire::text_args(&mut bind, &[]);
        bind.extend_from_slice(&0i16.to_be_bytes());
        let mut execute = vec![];
        Wire::cstr(&mut execute, "");
        execute.extend_from_slice(&0i32.to_be_bytes());
        let mut buf = vec![];
        Wire::message(&mut buf, b'P', &parse);
        Wire::message(&mut buf, b'B', &bind);
        Wire::message(&mut buf, b'E', &execute);
        Wire::message(&mut buf, b'H', &[]); // Flush
        self.write(&buf);
    }

    /// Run `sql` with the simple query protocol (message `Q`) and wait for the answer.
    pub fn query(&mut self, sql: &str) -> WireReply {
        let mut body = vec![];
        Wire::cstr(&mut body, sql);
        let mut buf = vec![];
        Wire::message(&mut buf, b'Q', &body);
        self.write(&buf);
        self.reply()
    }

    /// Send Parse, Bind and Execute of each of `statements` (unnamed, no
    /// parameters), then one Sync, in a single write, as a client's pipeline
    /// sends them; without waiting for the answer ([`Wire::read_reply`]).
    pub fn send_pipeline(&mut self, statements: &[&str]) {
        let mut buf = vec![];
        for sql in statements {
            let mut parse = vec![];
            Wire::cstr(&mut parse, "");
            Wire::cstr(&mut parse, sql);
            parse.extend_from_slice(&0i16.to_be_bytes());
            let mut bind = vec![];
            Wire::cstr(&mut bind, "");
            Wire::cstr(&mut bind, "");
            Wire::text_args(&mut bind, &[]);
            bind.extend_from_slice(&0i16.to_be_bytes());
            let mut execute = vec![];
            Wire::cstr(&mut execute, "");
            execute.extend_from_slice(&0i32.to_be_bytes());
            Wire::message(&mut buf, b'P', &parse);
            Wire::message(&mut buf, b'B', &bind);
            Wire::message(&mut buf, b'E', &execute);
        }
        Wire::message(&mut buf, b'S', &[]);
        self.write(&buf);
    }

    /// Send Sync and read the answer to everything sent since the last one.
    pub fn sync(&mut self) -> WireReply {
        let mut buf = vec![];
        Wire::message(&mut buf, b'S', &[]);
        self.write(&buf);
        self.reply()
    }

    /// Read the answer to what was sent.
    pub fn read_reply(&mut self) -> WireReply {
        self.reply()
    }

    /// Send a fastpath call without waiting for the answer.
    pub fn send_call(&mut self, oid: u32, args: &[&str]) {
        let mut body = oid.to_be_bytes().to_vec();
        Wire::text_args(&mut body, args);
        body.extend_from_slice(&0i16.to_be_bytes());
        let mut buf = vec![];
        Wire::message(&mut buf, b'F', &body);
        self.write(&buf);
    }
}
