//! The SQL surface (schema `gatekeeper`): set-returning functions and the
//! views over them, as pg_stat_statements does.
//!
//! Every function copies what it needs under the shared lock and builds
//! rows after releasing it. Every function raises 55000 with a hint if the
//! library was not preloaded. None of them needs admission (see `monitor`).
//!
//! A function whose row changed in some version is named after the version
//! that gave it its row (`status_0_2`: its C entry point, the symbol the
//! install script names, is `status_0_2_wrapper`). The symbols that older
//! install scripts name, and the rows those scripts declare, are served by
//! `legacy_api`; a change to a row takes a new function and symbol here,
//! never a changed row behind a symbol a released script names.

use std::collections::HashMap;

use gatekeeper_core::adaptive::Reason;
use gatekeeper_core::classes::MAX_CLASSES;
use gatekeeper_core::copy::try_collect;
use gatekeeper_core::histogram::{Histogram, NBUCKETS};
use gatekeeper_core::history::HistorySample;
use gatekeeper_core::lending;
use gatekeeper_core::{GateHeader, Slot, SlotState};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::server_text::ServerText;
use crate::shmem::{self, LimitStatus};
use crate::{gucs, session};

fn ts(us: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(us).ok()
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// One client backend, joined with its slot.
struct SessionInfo {
    pid: i32,
    datname: Option<ServerText>,
    usename: Option<ServerText>,
    application_name: Option<ServerText>,
    state: &'static str,
    /// The reader may see this session's activity (its own role's, or
    /// with `pg_read_all_stats`), as pg_stat_activity decides.
    visible: bool,
    slot: Option<Slot>,
    queue_position: Option<u32>,
    counts_as_running: Option<bool>,
    class: Option<String>,
}

/// A consistent copy of the gate, taken under the shared lock.
struct Snapshot {
    header: GateHeader,
    status: LimitStatus,
    slots: Vec<Slot>,
    positions: Vec<Option<u32>>,
    oldest_wait_us: Option<u64>,
    class_oldest: [Option<u64>; MAX_CLASSES],
    now: i64,
}

fn snapshot() -> Snapshot {
    let now = crate::now_us();
    let snap = shmem::with_gate_shared(|l| {
        let slots = try_collect(l.gate.slots().iter().copied())?;
        let mut positions = try_collect(std::iter::repeat_n(None, slots.len()))?;
        for c in 0..MAX_CLASSES {
            for (pos, i) in l.gate.class_queue(c).enumerate() {
                positions[i] = Some(pos as u32 + 1);
            }
        }
        let class_oldest = std::array::from_fn(|c| l.gate.class_oldest_wait_us(c, now));
        Ok(Snapshot {
            header: *l.gate.header(),
            status: *l.status,
            slots,
            positions,
            oldest_wait_us: l.gate.oldest_wait_us(now),
            class_oldest,
            now,
        })
    });
    snap.unwrap_or_else(|n| shmem::out_of_memory::<Slot>(n))
}

/// Every client backend with its gate state, hiding identifying columns of
/// other users' sessions unless the reader may see them (as pg_stat_activity).
fn sessions_of(snap: &Snapshot) -> Vec<SessionInfo> {
    let mut out = vec![];
    // Each attached backend's slot (its PGPROC number), by PID, in one
    // pass: a slot's pid is cleared when its backend detaches. (A lookup
    // per backend with BackendPidGetProc takes ProcArrayLock and scans
    // every PGPROC each time; PGPROCs themselves keep the pid of a backend
    // that exited.) A backend with no slot never asked for an admission,
    // or attached after the snapshot: it needs no PGPROC number.
    let slot_of: HashMap<i32, usize> =
        snap.slots.iter().enumerate().filter(|(_, s)| s.pid != 0).map(|(i, s)| (s.pid, i)).collect();
    // SAFETY: pgstat's backend snapshot is local to this transaction; the
    // name lookups return palloc'd strings or NULL. All run inside a
    // transaction.
    unsafe {
        let reader = pg_sys::GetUserId();
        let read_all = pg_sys::has_privs_of_role(reader, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS));
        let n = pg_sys::pgstat_fetch_stat_numbackends();
        for k in 1..=n {
            let entry = crate::compat::local_beentry(k);
            if entry.is_null() {
                continue;
            }
            let be = &(*entry).backendStatus;
            if be.st_backendType != pg_sys::BackendType::B_BACKEND || be.st_procpid <= 0 {
                continue;
            }
            let procno = slot_of.get(&be.st_procpid).copied();
            let slot = procno.map(|i| snap.slots[i]);
            let in_xact = matches!(
                be.st_state,
                pg_sys::BackendState::STATE_IDLEINTRANSACTION | pg_sys::BackendState::STATE_IDLEINTRANSACTION_ABORTED
            );
            let state = match slot.map(|s| s.state) {
                Some(SlotState::Queued) => "queued",
                Some(SlotState::Admitted) if in_xact => "idle in transaction",
                Some(SlotState::Admitted) => "active",
                Some(SlotState::Exempt) => "exempt",
                Some(SlotState::Idle) => "idle",
                _ if session::role_is_exempt(be.st_userid) => "exempt",
                _ => "idle",
            };
            let admitted = slot.filter(|s| s.state == SlotState::Admitted);
            let counts_as_running =
                admitted.zip(procno).map(|(s, procno)| !s.stalled && !crate::procs::waits_on_client(procno));
            // The class of the current or last request; none for a session
            // that never asked (or is exempt), or whose last class was
            // dropped since and its entry freed (it may name another now).
            let class = slot
                .filter(|s| s.xacts_admitted > 0 || s.times_parked > 0 || s.state != SlotState::Idle)
                .filter(|s| s.state != SlotState::Exempt && !s.class_removed)
                .map(|s| snap.header.classes[s.class as usize].name.as_str().to_string());
            let visible = read_all || pg_sys::has_privs_of_role(reader, be.st_userid);
            let (datname, usename, application_name) = if visible {
                (
                    ServerText::from_c(pg_sys::get_database_name(be.st_databaseid)),
                    ServerText::from_c(pg_sys::GetUserNameFromId(be.st_userid, true)),
                    ServerText::from_c(be.st_appname),
                )
            } else {
                (None, None, None)
            };
            out.push(SessionInfo {
                pid: be.st_procpid,
                datname,
                usename,
                application_name,
                state,
                visible,
                slot,
                queue_position: procno.and_then(|i| snap.positions[i]),
                counts_as_running,
                class,
            });
        }
    }
    out
}

/// `gatekeeper.status()` from 0.4.0 on; 0.2.0's row, which 0.2.0 and 0.3.0
/// call as `status_wrapper`.
#[pg_extern(name = "status", parallel_restricted)]
pub fn status_0_2() -> TableIterator<
    'static,
    (
        name!(max_active, i32),
        name!(limit_source, &'static str),
        name!(effective_cpus, f64),
        name!(tickets, i32),
        name!(ticket_ceiling, i32),
        name!(admitted, i32),
        name!(active, i32),
        name!(running, i32),
        name!(stalled, i32),
        name!(cpu_idle, f64),
        name!(idle_in_transaction, i32),
        name!(queued, i32),
        name!(idle, i32),
        name!(exempt, i32),
        name!(total_sessions, i32),
        name!(admitted_total, i64),
        name!(waited_total, i64),
        name!(overflow_total, i64),
        name!(queue_timeouts_total, i64),
        name!(rejected_total, i64),
        name!(queue_cancels_total, i64),
        name!(queue_exits_total, i64),
        name!(clients_lost_total, i64),
        name!(stalls_total, i64),
        name!(wait_time_total_ms, f64),
        name!(oldest_wait_ms, Option<f64>),
        name!(wait_p50_ms, Option<f64>),
        name!(wait_p95_ms, Option<f64>),
        name!(wait_p99_ms, Option<f64>),
        name!(wait_max_ms, Option<f64>),
        name!(stats_reset, Option<TimestampWithTimeZone>),
    ),
> {
    let snap = snapshot();
    let sessions = sessions_of(&snap);
    let count = |s: &str| sessions.iter().filter(|x| x.state == s).count() as i32;
    let h = &snap.header;
    let c = &h.counters;
    let q = |p: f64| h.waits.quantile_us(p).map(|us| us / 1000.0);
    TableIterator::once((
        h.limit as i32,
        if snap.status.reason() == Reason::Manual { "manual" } else { "auto" },
        snap.status.effective_cpus,
        h.tickets as i32,
        snap.status.ceiling.max(h.limit) as i32,
        h.holders as i32,
        count("active"),
        snap.status.running as i32,
        h.stalled as i32,
        snap.status.cpu_idle,
        count("idle in transaction"),
        h.queued as i32,
        count("idle"),
        count("exempt"),
        sessions.len() as i32 - count("exempt"),
        c.admitted as i64,
        c.waited as i64,
        c.overflow as i64,
        c.timeouts as i64,
        c.rejected as i64,
        c.cancels as i64,
        c.exits as i64,
        c.clients_lost as i64,
        c.stalls as i64,
        ms(c.wait_time_us),
        snap.oldest_wait_us.map(ms),
        q(0.5),
        q(0.95),
        q(0.99),
        (h.waits.total() > 0).then(|| ms(h.waits.max_us)),
        ts(h.stats_reset_us),
    ))
}

/// The adaptive limit's range and its last move: the columns of
/// `gatekeeper.status` after `stats_reset` (a set-returning function has at
/// most 32 columns here, so the view joins this one to `status()`).
#[pg_extern(name = "limit_state", parallel_restricted)]
fn limit_state() -> TableIterator<
    'static,
    (
        name!(limit_min, i32),
        name!(limit_max, i32),
        name!(limit_reason, &'static str),
        name!(limit_changed_at, Option<TimestampWithTimeZone>),
    ),
> {
    let st = shmem::with_gate_shared(|l| *l.status);
    TableIterator::once((st.bounds.floor as i32, st.bounds.ceiling as i32, st.reason().as_str(), ts(st.changed_at_us)))
}

/// The lending cap (docs/DESIGN.md §10): the last columns of
/// `gatekeeper.status` from 0.5.0 on, which the view joins as it joins
/// `limit_state()`. NULL while `lend_by_throughput` is off.
#[pg_extern(name = "lending_state", parallel_restricted)]
fn lending_state() -> TableIterator<'static, (name!(lend_cap, Option<i32>), name!(lend_probe, Option<&'static str>))> {
    let (h, st) = shmem::with_gate_shared(|l| (*l.gate.header(), *l.status));
    if !gucs::lend_by_throughput() {
        return TableIterator::once((None, None));
    }
    // Before the worker's first sample, and after a reload moved the limit
    // or the ceiling, the cap in force is the climber's clamped to them.
    let cap = lending::within(st.lend_cap, h.limit, st.ceiling);
    let probe = match st.lend_probe {
        1 => Some("up"),
        -1 => Some("down"),
        _ => None,
    };
    TableIterator::once((Some(cap as i32), probe))
}

/// `gatekeeper.sessions()` from 0.4.0 on; 0.2.0's row, which 0.2.0 and 0.3.0
/// call as `sessions_wrapper`.
#[pg_extern(name = "sessions", parallel_restricted)]
pub fn sessions_0_2() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(datname, Option<ServerText>),
        name!(usename, Option<ServerText>),
        name!(application_name, Option<ServerText>),
        name!(class, Option<String>),
        name!(state, Option<&'static str>),
        name!(queue_position, Option<i32>),
        name!(wait_start, Option<TimestampWithTimeZone>),
        name!(wait_ms, Option<f64>),
        name!(counts_as_running, Option<bool>),
        name!(stalled, Option<bool>),
        name!(overflow, Option<bool>),
        name!(transactions_admitted, Option<i64>),
        name!(times_parked, Option<i64>),
        name!(wait_total_ms, Option<f64>),
        name!(last_wait_ms, Option<f64>),
    ),
> {
    let snap = snapshot();
    let rows: Vec<_> = sessions_of(&snap)
        .into_iter()
        .map(|s| {
            // Another role's session shows its pid alone, as
            // pg_stat_activity hides its activity: what it does, when it
            // waited, how many transactions it ran.
            let v = s.visible;
            let slot = s.slot.filter(|_| v);
            let queued = slot.filter(|x| x.state == SlotState::Queued);
            let admitted = slot.filter(|x| x.state == SlotState::Admitted);
            (
                s.pid,
                s.datname,
                s.usename,
                s.application_name,
                s.class.filter(|_| v),
                v.then_some(s.state),
                s.queue_position.filter(|_| v).map(|p| p as i32),
                queued.and_then(|x| ts(x.wait_start_us)),
                queued.map(|x| ms((snap.now - x.wait_start_us).max(0) as u64)),
                s.counts_as_running.filter(|_| v),
                admitted.map(|x| x.stalled),
                admitted.map(|x| x.overflow),
                v.then(|| slot.map_or(0, |x| x.xacts_admitted as i64)),
                v.then(|| slot.map_or(0, |x| x.times_parked as i64)),
                v.then(|| slot.map_or(0.0, |x| ms(x.wait_total_us))),
                slot.filter(|x| x.waits_ended() > 0).map(|x| ms(x.last_wait_us)),
            )
        })
        .collect();
    TableIterator::new(rows)
}

#[pg_extern(name = "classes", parallel_restricted)]
fn classes() -> TableIterator<
    'static,
    (
        name!(class, String),
        name!(defined, bool),
        name!(max_active, Option<i32>),
        name!(reserve, i32),
        name!(reserve_in_force, i32),
        name!(weight, i32),
        name!(queue_timeout_ms, Option<i64>),
        name!(max_queued, Option<i32>),
        name!(admitted, i32),
        name!(running, i32),
        name!(stalled, i32),
        name!(queued, i32),
        name!(oldest_wait_ms, Option<f64>),
        name!(admitted_total, i64),
        name!(waited_total, i64),
        name!(overflow_total, i64),
        name!(queue_timeouts_total, i64),
        name!(rejected_total, i64),
        name!(stalls_total, i64),
        name!(wait_time_total_ms, f64),
        name!(wait_p50_ms, Option<f64>),
        name!(wait_p95_ms, Option<f64>),
        name!(wait_p99_ms, Option<f64>),
        name!(wait_max_ms, Option<f64>),
    ),
> {
    let snap = snapshot();
    let mut running = [0i32; MAX_CLASSES];
    for (i, s) in snap.slots.iter().enumerate() {
        if s.state == SlotState::Admitted && !s.stalled && !crate::procs::waits_on_client(i) {
            running[s.class as usize] += 1;
        }
    }
    let rows: Vec<_> = snap
        .header
        .classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.in_use)
        .map(|(k, c)| {
            let p = c.params;
            let q = |x: f64| c.waits.quantile_us(x).map(|us| us / 1000.0);
            let n = &c.counters;
            (
                c.name.as_str().to_string(),
                c.defined,
                (p.max_active > 0).then_some(p.max_active as i32),
                p.reserve as i32,
                c.reserve_in_force as i32,
                p.weight as i32,
                (p.queue_timeout_ms >= 0).then_some(p.queue_timeout_ms),
                (p.max_queued > 0).then_some(p.max_queued as i32),
                c.admitted as i32,
                running[k],
                c.stalled as i32,
                c.queued as i32,
                snap.class_oldest[k].map(ms),
                n.admitted as i64,
                n.waited as i64,
                n.overflow as i64,
                n.timeouts as i64,
                n.rejected as i64,
                n.stalls as i64,
                ms(n.wait_time_us),
                q(0.5),
                q(0.95),
                q(0.99),
                (c.waits.total() > 0).then(|| ms(c.waits.max_us)),
            )
        })
        .collect();
    TableIterator::new(rows)
}

#[pg_extern(name = "wait_histogram", parallel_restricted)]
fn wait_histogram(
) -> TableIterator<'static, (name!(bucket, i32), name!(lower_ms, f64), name!(upper_ms, Option<f64>), name!(waits, i64))>
{
    let h = shmem::with_gate_shared(|l| l.gate.header().waits);
    TableIterator::new(
        (0..NBUCKETS)
            .map(move |i| (i as i32, ms(Histogram::lower_us(i)), Histogram::upper_us(i).map(ms), h.counts[i] as i64)),
    )
}

/// `gatekeeper.history()` from 0.4.0 on; 0.3.0's row, which 0.3.0 calls as
/// `history_wrapper`.
#[pg_extern(name = "history", parallel_restricted)]
pub fn history_0_3() -> TableIterator<
    'static,
    (
        name!(sample_time, Option<TimestampWithTimeZone>),
        name!(max_active, i32),
        name!(tickets, i32),
        name!(admitted, i32),
        name!(running, i32),
        name!(idle_in_transaction, i32),
        name!(queued, i32),
        name!(idle, i32),
        name!(admissions_per_sec, f64),
        name!(queue_timeouts, i64),
        name!(wait_p50_ms, Option<f64>),
        name!(wait_p99_ms, Option<f64>),
        name!(limit_reason, &'static str),
    ),
> {
    let samples = shmem::with_gate_shared(|l| try_collect(l.ring.iter(l.history).copied()))
        .unwrap_or_else(|n| shmem::out_of_memory::<HistorySample>(n));
    let finite = |v: f64| v.is_finite().then_some(v / 1000.0);
    TableIterator::new(samples.into_iter().map(move |s| {
        (
            ts(s.at_us),
            s.limit as i32,
            s.tickets as i32,
            s.admitted as i32,
            s.running as i32,
            s.idle_in_transaction as i32,
            s.queued as i32,
            s.idle as i32,
            s.admissions_per_s,
            s.timeouts as i64,
            finite(s.wait_p50_us),
            finite(s.wait_p99_us),
            Reason::from_u8(s.limit_reason).as_str(),
        )
    }))
}

/// Zero the statistics. Revoked from PUBLIC.
#[pg_extern(name = "reset", parallel_unsafe)]
fn reset() {
    let now = crate::now_us();
    shmem::with_gate(|mut l| l.gate.reset_stats(now));
}

extension_sql!(
    r#"
-- Every object of the extension goes into schema gatekeeper, and the
-- schema's owner could rename it or drop it with all of them: a schema of
-- that name created beforehand by a role that is not a superuser is
-- refused. (CREATE EXTENSION creates it, owned by its caller, when it does
-- not exist.)
DO $gatekeeper$
DECLARE
    owner name;
BEGIN
    SELECT r.rolname INTO owner
      FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
     WHERE n.nspname = 'gatekeeper' AND NOT r.rolsuper;
    IF FOUND THEN
        RAISE EXCEPTION 'schema "gatekeeper" is owned by role "%", which is not a superuser', owner
            USING ERRCODE = '42501',
                  DETAIL = 'Its owner could rename or drop the objects of the extension.',
                  HINT = 'Drop the schema, or make a superuser its owner (ALTER SCHEMA gatekeeper OWNER TO ...), then create the extension again.';
    END IF;
END
$gatekeeper$;
"#,
    name = "schema_owner",
    bootstrap
);

extension_sql!(
    r#"
-- Each returns one row. At the default estimate of 1000 rows a function,
-- the view's cross join of three was costed at 20 million, past
-- jit_above_cost: every read of the view was JIT-compiled, 140-260 ms of
-- CPU, which a sampler reading it twice a second on three Citus nodes
-- turned into a third of a 2-CPU machine.
ALTER FUNCTION gatekeeper.status() ROWS 1;
ALTER FUNCTION gatekeeper.limit_state() ROWS 1;
ALTER FUNCTION gatekeeper.lending_state() ROWS 1;
CREATE VIEW gatekeeper.status AS
    SELECT * FROM gatekeeper.status() CROSS JOIN gatekeeper.limit_state() CROSS JOIN gatekeeper.lending_state();
CREATE VIEW gatekeeper.sessions AS SELECT * FROM gatekeeper.sessions();
CREATE VIEW gatekeeper.wait_histogram AS SELECT * FROM gatekeeper.wait_histogram();
CREATE VIEW gatekeeper.history AS SELECT * FROM gatekeeper.history();
CREATE VIEW gatekeeper.classes AS SELECT * FROM gatekeeper.classes();

COMMENT ON VIEW gatekeeper.status IS 'pg_gatekeeper: the limit, session counts by state, and totals since the last reset';
COMMENT ON VIEW gatekeeper.sessions IS 'pg_gatekeeper: one row per client backend with its admission state';
COMMENT ON VIEW gatekeeper.wait_histogram IS 'pg_gatekeeper: distribution of queue waits since the last reset';
COMMENT ON VIEW gatekeeper.history IS 'pg_gatekeeper: periodic samples taken by the worker';
COMMENT ON VIEW gatekeeper.classes IS 'pg_gatekeeper: one row per admission class with its settings, counts and totals';

GRANT USAGE ON SCHEMA gatekeeper TO PUBLIC;
GRANT SELECT ON gatekeeper.status, gatekeeper.sessions, gatekeeper.wait_histogram, gatekeeper.history,
    gatekeeper.classes TO PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.reset() FROM PUBLIC;
"#,
    name = "views",
    requires = [status_0_2, limit_state, lending_state, sessions_0_2, wait_histogram, history_0_3, classes, reset],
    finalize
);
