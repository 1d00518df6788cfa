//! After the run: the accounting of the gate's totals against the clients'
//! own counts and the server log, and the reports for a failure.

use std::collections::HashMap;

use crate::common::{count_lines, Cluster, Status};
use crate::shared::Tally;

pub(crate) fn diagnostics(c: &Cluster) -> String {
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

/// Counts of the log's WARNING/ERROR/FATAL/PANIC and pg_gatekeeper messages,
/// by text with numbers blanked, most frequent first.
pub(crate) fn log_summary(log: &str) -> String {
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
///   Every timed-out wait raises exactly one 53000 to its client, from the
///   statement that waited (a block's first gated one, never BEGIN). Nothing
///   else can end an app_to wait or hide its error: no fault is injected into
///   app_to and it has no statement_timeout. The server log must agree too.
/// - rejected_total == the 53400 in the log: a rejection is raised at once
///   by the statement turned away, and logged whatever becomes of its client;
///   and == the 53400 errors that app_to sessions received + the 53400 in the
///   log for app sessions and psql clients (psql clients may be SIGKILLed
///   before they read theirs). The app sessions' own count is within
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
pub(crate) fn check_totals(
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
    check(rejected == log_rejected, format!("rejected_total {rejected} but {log_rejected} in the log"));
    let seen = t.err("53400") + log_rejected_a + log_rejected_psql;
    check(
        rejected == seen,
        format!(
            "rejected_total {rejected} but app_to sessions received {} 53400 errors, and the log has {log_rejected_a} \
             for app sessions and {log_rejected_psql} for psql",
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

    // overflow_total counts the deadlock breaker's admissions and the
    // progress guarantee's, the gate's and a class's; each logs one line.
    let log_breaker = count_lines(log, "over the limit because process") as u64;
    let log_progress = count_lines(log, "over the limit: no holder worked") as u64
        + count_lines(log, "over its class's cap: no holder of the class worked") as u64;
    check(
        overflow == log_breaker + log_progress,
        format!("overflow_total {overflow} but {log_breaker} breaker and {log_progress} progress log lines"),
    );
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
