//! Prometheus metrics: the real postgres_exporter (the Debian package
//! prometheus-postgres-exporter) with docs/prometheus/pg_gatekeeper.yaml,
//! against a cluster whose gate is full, scraped over HTTP; its figures
//! must equal the views'.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{wait_until, Cluster};

const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";

/// Kills the exporter when the test ends, however it ends.
struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET /metrics; None while the exporter is not listening yet.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.contains("200 OK").then_some(body)
}

/// The value of the first sample of `name` whose labels contain `labels`.
fn sample(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    metrics.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        let (metric, rest) = key.split_once('{').unwrap_or((key, ""));
        (metric == name && rest.contains(labels)).then(|| value.parse().ok())?
    })
}

#[test]
fn the_exporter_reports_what_the_views_say() {
    assert!(
        std::path::Path::new(EXPORTER).exists(),
        "{EXPORTER} is missing: scripts/deps.sh installs prometheus-postgres-exporter"
    );
    let c = Cluster::start(&[
        ("pg_gatekeeper.max_active", "1"),
        ("pg_gatekeeper.max_tickets", "1"),
        ("pg_gatekeeper.exempt_roles", "exporter"),
        ("pg_gatekeeper.classes", "reports (max_active = 2)"),
        // The waiter stays parked behind the idle holder while the exporter
        // starts and scrapes: no admission by the progress guarantee.
        ("pg_gatekeeper.progress_timeout", "1h"),
    ]);
    c.admin_exec("CREATE ROLE exporter LOGIN IN ROLE pg_monitor");
    // A full gate: a holder idle in its transaction, a waiter parked.
    let mut holder = c.app("holder");
    holder.ok("BEGIN; SELECT 1");
    let waiter = c.app("waiter").spawn("SELECT 1");
    c.wait_queued("waiter");

    let queries = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/prometheus/pg_gatekeeper.yaml");
    let port = free_port();
    let dsn = format!("host={} port={} user=exporter dbname=postgres sslmode=disable", c.dir.display(), c.port);
    let _exporter = Exporter(
        Command::new(EXPORTER)
            .arg(format!("--extend.query-path={queries}"))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(["--disable-default-metrics", "--disable-settings-metrics"])
            .env("DATA_SOURCE_NAME", dsn)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the exporter"),
    );
    // total_sessions is a point-in-time count of gated sessions: a
    // connection that opens or closes between the scrape and the view's read
    // is in one and not the other (CI saw 3 against 2 once). So scrape and
    // read again until the two agree; a wrong figure never does, and the
    // test times out.
    let mut metrics = String::new();
    let mut s = c.status();
    wait_until(
        "the exporter serves pg_gatekeeper's metrics, its session count as the view's",
        Duration::from_secs(30),
        || {
            metrics = scrape(port).unwrap_or_default();
            if !metrics.contains("pg_gatekeeper_queued") {
                return false;
            }
            s = c.status();
            sample(&metrics, "pg_gatekeeper_total_sessions", "") == Some(s.int("total_sessions") as f64)
        },
    );
    let get = |name: &str, labels: &str| {
        sample(&metrics, name, labels).unwrap_or_else(|| panic!("no {name}{{{labels}}} in:\n{metrics}"))
    };
    for (metric, column) in [
        ("pg_gatekeeper_max_active", "max_active"),
        ("pg_gatekeeper_admitted", "admitted"),
        ("pg_gatekeeper_queued", "queued"),
        ("pg_gatekeeper_admitted_total", "admitted_total"),
        ("pg_gatekeeper_waited_total", "waited_total"),
        ("pg_gatekeeper_rejected_total", "rejected_total"),
        ("pg_gatekeeper_stalls_total", "stalls_total"),
        ("pg_gatekeeper_limit_min", "limit_min"),
        ("pg_gatekeeper_limit_max", "limit_max"),
        ("pg_gatekeeper_lend_cap", "lend_cap"),
        ("pg_gatekeeper_ticket_ceiling", "ticket_ceiling"),
        ("pg_gatekeeper_effective_cpus", "effective_cpus"),
        ("pg_gatekeeper_total_sessions", "total_sessions"),
    ] {
        assert_eq!(get(metric, ""), s.int(column) as f64, "{metric} against gatekeeper.status.{column}");
    }
    assert_eq!(get("pg_gatekeeper_queued", ""), 1.0);
    assert!(get("pg_gatekeeper_oldest_wait_seconds", "") > 0.0);
    assert!((0.0..=1.0).contains(&get("pg_gatekeeper_cpu_idle", "")));
    // The limit's reason and source are labels; the value is when it changed.
    let changed = get("pg_gatekeeper_limit_changed_seconds", "reason=\"manual\"");
    assert_eq!(get("pg_gatekeeper_limit_changed_seconds", "source=\"manual\""), changed);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(changed > now - 600.0 && changed <= now + 1.0, "limit changed at {changed}, now {now}");
    // Types, as Prometheus expects them.
    for (name, kind) in [
        ("pg_gatekeeper_queued", "gauge"),
        ("pg_gatekeeper_admitted_total", "counter"),
        ("pg_gatekeeper_wait_seconds", "histogram"),
    ] {
        assert!(metrics.contains(&format!("# TYPE {name} {kind}")), "{name} is not a {kind}");
    }
    // The histogram: its count is the waits in gatekeeper.wait_histogram,
    // its +Inf bucket the same, its buckets cumulative.
    let waits = c.admin_i64("SELECT sum(waits)::bigint FROM gatekeeper.wait_histogram");
    assert_eq!(get("pg_gatekeeper_wait_seconds_count", ""), waits as f64);
    assert_eq!(get("pg_gatekeeper_wait_seconds_bucket", "le=\"+Inf\""), waits as f64);
    assert!(
        get("pg_gatekeeper_wait_seconds_bucket", "le=\"0.0001\"")
            <= get("pg_gatekeeper_wait_seconds_bucket", "le=\"60\"")
    );
    // Per class, labelled.
    assert_eq!(get("pg_gatekeeper_class_queued", "class=\"default\""), 1.0);
    assert_eq!(get("pg_gatekeeper_class_max_active", "class=\"reports\""), 2.0);

    holder.ok("COMMIT");
    waiter.join_ok(Duration::from_secs(5));
    c.assert_quiet();
}
