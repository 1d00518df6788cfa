//! Hot standby: a real streaming replica (pg_basebackup from a test
//! cluster) gates its read-only sessions by its own limit, shows the views
//! and runs the worker; after promotion the gate keeps working.

mod common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use common::{as_postgres, connect_to, wait_until, Cluster, Session};

/// The standby's server, stopped and removed when dropped (kept on failure).
struct Standby {
    dir: PathBuf,
    port: u16,
}

impl Standby {
    fn data(&self) -> String {
        self.dir.join("data").to_str().unwrap().to_string()
    }
    fn session(&self, user: &str, name: &str) -> Session {
        let client = connect_to(&self.socket_dir(), self.port, user, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        Session { name: name.to_string(), client }
    }
    /// The socket directory: the primary's (the configuration is copied).
    fn socket_dir(&self) -> PathBuf {
        self.dir.parent().unwrap().to_path_buf()
    }
    fn i64(&self, sql: &str) -> i64 {
        let mut s = self.session("postgres", "observer");
        s.client.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }
    fn bool(&self, sql: &str) -> bool {
        let mut s = self.session("postgres", "observer");
        s.client.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        let _ = as_postgres("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
        if std::thread::panicking() {
            let log = fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            eprintln!("standby kept in {}\n--- its log ---\n{log}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// One holder idle in its transaction and one session parked behind it on
/// `s`, then the holder commits and the parked one gets in.
fn park_and_hand_off(s: &Standby, sql: &str) {
    let mut holder = s.session("app", "holder");
    holder.ok(&format!("BEGIN; {sql}"));
    let waiter = s.session("app", "waiter").spawn(sql);
    wait_until("the second session parks on the standby's gate", Duration::from_secs(5), || {
        s.i64("SELECT queued::bigint FROM gatekeeper.status") == 1
    });
    assert!(!waiter.is_finished());
    holder.ok("COMMIT");
    waiter.join_ok(Duration::from_secs(5));
    wait_until("the standby's gate is quiet", Duration::from_secs(5), || {
        s.i64("SELECT (admitted + queued)::bigint FROM gatekeeper.status") == 0
    });
}

#[test]
fn a_hot_standby_gates_by_its_own_limit_and_keeps_gating_after_promotion() {
    let primary =
        Cluster::start(&[("wal_level", "replica"), ("max_wal_senders", "4"), ("pg_gatekeeper.max_active", "4")]);
    primary.admin_exec("CREATE TABLE t (x int); INSERT INTO t VALUES (1); GRANT SELECT, INSERT ON t TO app;");
    primary.admin_exec("CREATE ROLE watcher LOGIN IN ROLE pg_monitor");
    // A database with a route: the base backup copies the routes file.
    primary.admin_exec("CREATE DATABASE gone");
    let gone = primary.admin_i64("SELECT oid::bigint FROM pg_database WHERE datname = 'gone'");
    primary
        .connect_db("postgres", "gone")
        .batch_execute("CREATE EXTENSION pg_gatekeeper; SELECT gatekeeper.route_shape(4242, 'long')")
        .unwrap();

    let standby = Standby { dir: primary.dir.join("standby"), port: primary.port + 1000 };
    fs::create_dir_all(&standby.dir).unwrap();
    let st = std::process::Command::new("chown").args(["postgres:postgres"]).arg(&standby.dir).status().unwrap();
    assert!(st.success());
    let port = primary.port.to_string();
    let socket = primary.dir.to_str().unwrap().to_string();
    let out = as_postgres(
        "pg_basebackup",
        &["-h", &socket, "-p", &port, "-U", "postgres", "-D", &standby.data(), "-R", "-X", "stream", "-c", "fast"],
    );
    assert!(out.status.success(), "pg_basebackup: {}", String::from_utf8_lossy(&out.stderr));
    let mut conf = fs::read_to_string(format!("{}/postgresql.conf", standby.data())).unwrap();
    conf.push_str(&format!(
        "\n# the standby\nport = '{}'\npg_gatekeeper.max_active = '1'\npg_gatekeeper.max_tickets = '1'\npg_gatekeeper.progress_timeout = '1h'\nhot_standby = on\n",
        standby.port
    ));
    fs::write(format!("{}/postgresql.conf", standby.data()), conf).unwrap();
    let log = standby.dir.join("log");
    let out = as_postgres("pg_ctl", &["-D", &standby.data(), "-l", log.to_str().unwrap(), "-w", "-t", "60", "start"]);
    assert!(out.status.success(), "standby start: {}", String::from_utf8_lossy(&out.stderr));
    assert!(standby.bool("SELECT pg_is_in_recovery()"), "the standby is in recovery");

    // Its own limit, its own worker, its views (for a pg_monitor member too).
    assert_eq!(standby.i64("SELECT max_active::bigint FROM gatekeeper.status"), 1);
    assert_eq!(primary.status().max_active(), 4);
    wait_until("the standby runs its worker", Duration::from_secs(10), || {
        standby.i64("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'") == 1
    });
    let mut w = standby.session("watcher", "watcher");
    for view in ["status", "sessions", "classes", "wait_histogram", "history", "shapes"] {
        w.ok(&format!("SELECT * FROM gatekeeper.{view}"));
    }

    // Read-only sessions on the standby are gated by its limit of 1.
    park_and_hand_off(&standby, "SELECT x FROM t");

    // The standby restored the primary's route from the copied file. The
    // primary's drop of the database forgets it there; the standby replays
    // the drop, and its worker forgets it (else a database created after a
    // promotion with the same OID would inherit it).
    let routes_of_gone = format!("SELECT count(*) FROM gatekeeper.shapes WHERE dbid = {gone}");
    assert_eq!(standby.i64(&routes_of_gone), 1, "the standby restored the route");
    wait_until("gone's session on the primary has ended", Duration::from_secs(10), || {
        primary.admin_i64("SELECT count(*) FROM pg_stat_activity WHERE datname = 'gone'") == 0
    });
    primary.admin_exec("DROP DATABASE gone");
    wait_until("the standby's worker forgets the dropped database's route", Duration::from_secs(20), || {
        standby.i64(&routes_of_gone) == 0
    });
    let standby_log = fs::read_to_string(standby.dir.join("log")).unwrap();
    assert!(standby_log.contains("forgot 1 query routes of databases that no longer exist"), "{standby_log}");

    // Promoted, it keeps gating, writes included.
    assert!(standby.bool("SELECT pg_promote(true, 30)"));
    assert!(!standby.bool("SELECT pg_is_in_recovery()"));
    park_and_hand_off(&standby, "INSERT INTO t VALUES (2)");
    assert_eq!(
        standby.i64("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_gatekeeper worker'"),
        1,
        "the worker runs after promotion"
    );
    assert!(standby.i64("SELECT waited_total FROM gatekeeper.status") >= 2);
    primary.assert_quiet();
}
