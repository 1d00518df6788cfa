//! Taking and giving back admissions: the request, the wait in the queue,
//! and the release at transaction end.
//!
//! A session parks by sleeping on its latch (wait event `Extension`). The
//! releasing backend hands its ticket to the head of the queue under the
//! lock and sets that waiter's latch, so a woken waiter only has to confirm
//! that it was admitted. Every way out of the wait is accounted for:
//! - admitted: the normal path;
//! - `queue_timeout`: leave the queue, then ERROR 53000;
//! - an ERROR raised by CHECK_FOR_INTERRUPTS (cancel, statement_timeout):
//!   the unwinding `Parked` guard leaves the queue;
//! - FATAL (terminate, lost client, postmaster death): the backend exits and
//!   `session::on_exit` leaves the queue, since FATAL does not unwind.
//!
//! Every wait is a statement's (never BEGIN's, docs/DESIGN.md §4), so its
//! error is that statement's: in a block, it aborts the block.
//!
//! How the sleep itself notices a lost client is in `park`.

use std::time::Duration;

use gatekeeper_core::admission::{DEFAULT, LONG};
use gatekeeper_core::classes::{ClassName, ClassParams};
use gatekeeper_core::progress;
use gatekeeper_core::shapes::{Change, Lane};
use gatekeeper_core::{Abandon, Full, Request};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::backend_local::BackendLocal;
use crate::errors::{QueueFull, QueueTimeout};
use crate::{gucs, park, session, shmem, snapshot};

/// Longest single sleep; the loop re-checks its state at least this often
/// even if a wake-up were lost. Parked sessions must not wake for nothing:
/// 1,000 of them at one second would be 1,000 wake-ups a second.
const MAX_SLEEP: Duration = Duration::from_secs(10);

/// Take an admission for the current transaction, parking if needed.
/// The caller (`hooks::needs_admission`) has checked that the session is
/// gated and not yet admitted, and applied a reload this backend read.
/// `query_id` is PostgreSQL's query id of the statement that asks (0 when
/// it has none): the transaction's shape, which may route it to the long
/// lane or to a class a DBA chose (docs/DESIGN.md §15).
pub fn admit(query_id: u64) {
    admit_with(query_id, None);
}

/// [`admit`] from the planner or ExecutorStart hook, whose statement's
/// snapshot a wait may give back where that is safe (`snapshot`).
///
/// # Safety
/// As for [`snapshot::release`].
pub unsafe fn admit_statement(query_id: u64, at: snapshot::Point) {
    admit_with(query_id, Some(at));
}

/// Whether this session's transaction passes without an admission
/// whatever it runs: one before the backend's command loop (a login event
/// trigger: parked there, the connection would hang in its start-up, and an
/// error in the queue would refuse it), an exempt session, or Citus's
/// superuser connections between nodes. Needs a transaction (catalog
/// lookups).
pub fn passes_anyway() -> bool {
    session::before_command_loop()
        || session::is_exempt(session::ensure_attached())
        || crate::citus::is_internal_superuser()
}

fn admit_with(query_id: u64, at: Option<snapshot::Point>) {
    let slot = session::ensure_attached();
    if passes_anyway() || crate::citus::rides() {
        // Decided once per transaction: a reload that ends the exemption
        // takes effect at the next transaction, never mid-way.
        session::pass_this_transaction();
        return;
    }
    let now = crate::now_us();
    let max_queued = gucs::max_queued();
    // SAFETY: MyDatabaseId is set once the backend connected; GetUserId
    // reads a backend-local variable.
    let (db, user) = unsafe { (u32::from(pg_sys::MyDatabaseId), u32::from(pg_sys::GetUserId())) };
    let lane_mode = gucs::long_lane();
    let (req, limit, class, unknown) = gucs::with_class_name(|name| {
        let (req, limit, class) = shmem::with_gate(|mut l| {
            // An explicit class wins over the shape's lane; one that is not
            // defined is no class at all, and the shape decides as for a
            // session with none.
            let explicit = (!name.is_empty()).then(|| l.gate.class_index(name)).flatten();
            let known = name.is_empty() || explicit.is_some();
            // Pinned: the class was chosen for it (its own, or a route's),
            // and the worker will not move it into the lane.
            let (index, pinned) = explicit.map(|k| (k, true)).unwrap_or_else(|| {
                // Counted as routed only where it is sent along its route or
                // into the lane (or, in dry run, would have been): not with
                // the lane off. A route to a class removed since is no
                // route: the role's own runs decide, as if it had none.
                let (lane, route) = match l.shapes.lane(db, user, query_id, now) {
                    Lane::Routed(c) => match l.gate.class_index(c.as_str()) {
                        Some(k) => (Lane::Routed(c), Some(k)),
                        None => (l.shapes.learned(db, user, query_id), None),
                    },
                    lane => (lane, None),
                };
                let (index, routed) = match (lane, route) {
                    (_, Some(k)) => (k, true),
                    (Lane::Long, None) => match lane_mode {
                        gucs::LongLane::On => (LONG, true),
                        gucs::LongLane::DryRun => (DEFAULT, true),
                        gucs::LongLane::Off => (DEFAULT, false),
                    },
                    _ => (DEFAULT, false),
                };
                if routed {
                    l.shapes.count_routed(db, user, query_id, lane);
                }
                // Pinned: sent along a route.
                (index, route.is_some())
            });
            let r = l.gate.request_pinned(slot, index, pinned, now, max_queued);
            let c = &l.gate.header().classes[index];
            (r, l.gate.header().limit, Class { name: c.name, params: c.params, known })
        });
        // Logged once the admission is recorded, outside this borrow (see
        // `warn_unknown_class`).
        let unknown = (!class.known).then(|| name.to_string());
        (req, limit, class, unknown)
    });
    session::set_shape(db, user, query_id);
    match req {
        Request::Admitted => session::set_admitted(true),
        Request::Rejected { queued, full } => {
            let bound = match full {
                Full::Gate => max_queued,
                Full::Class => class.params.max_queued,
            };
            QueueFull { queued, max_queued: bound, limit, class: class.name, full }.raise()
        }
        Request::Queued { position } => {
            // The first session to queue starts the worker's sampling; while
            // the queue lasts, its clock keeps it sampling.
            if position == 1 {
                shmem::wake_worker();
            }
            // Armed before anything that could raise an ERROR: the slot is
            // queued from here on.
            let guard = Parked { slot, armed: true };
            // SAFETY: `at` comes from the hook it names (admit_statement).
            let released = at.filter(|&at| unsafe { snapshot::release(at) });
            wait(guard, &class);
            if let Some(at) = released {
                // SAFETY: as above, and release returned true.
                unsafe { snapshot::retake(at) };
            }
        }
    }
    if let Some(name) = unknown {
        warn_unknown_class(&name);
    }
}

/// The class a request was made in, as the wait and the errors need it.
struct Class {
    name: ClassName,
    params: ClassParams,
    /// The session's `pg_gatekeeper.class` names a defined class (or none).
    known: bool,
}

/// The last unknown class name this session was told about.
static WARNED_CLASS: BackendLocal<std::cell::RefCell<String>> =
    BackendLocal::new(std::cell::RefCell::new(String::new()));

/// Say once per session and name, in the server log, that the session's
/// class is not defined. It is never an error: the session is admitted as
/// one with no class.
///
/// Call it with no borrow held and nothing half done. PostgreSQL serves
/// pending interrupts at the end of every message it logs, where the ERROR
/// (a cancel) or FATAL (a terminate) raised would leave by longjmp or
/// process exit, past any Rust frame, dropping nothing: `log_held!` holds
/// them off until the next CHECK_FOR_INTERRUPTS, but a log call can still
/// fail on its own (out of memory).
fn warn_unknown_class(name: &str) {
    let fresh = WARNED_CLASS.with(|w| {
        let mut w = w.borrow_mut();
        (*w != name).then(|| *w = name.to_string()).is_some()
    });
    if fresh {
        crate::log_held!(
            "pg_gatekeeper: class \"{name}\" of process {} is not defined in pg_gatekeeper.classes (or has no entry free yet); its transactions are admitted as a session's with no class",
            // SAFETY: MyProcPid is set at process start.
            unsafe { pg_sys::MyProcPid }
        );
    }
}

/// Leaves the queue if the wait is left by unwinding (an ERROR).
struct Parked {
    slot: usize,
    armed: bool,
}

impl Drop for Parked {
    fn drop(&mut self) {
        if self.armed {
            leave(self.slot, Abandon::Cancel);
        }
    }
}

/// Leave the queue for `why`. If the ticket was handed to us in the
/// meantime we hold it now: remember that, so the transaction end releases it.
/// Returns whether we left the queue (false: we are admitted).
fn leave(slot: usize, why: Abandon) -> bool {
    let now = crate::now_us();
    let left = shmem::with_gate_waking(|mut l, wake| l.gate.abandon(slot, now, why, wake));
    if !left {
        session::set_admitted(true);
    }
    left
}

/// Wait until admitted; `guard` leaves the queue if an ERROR ends the wait.
fn wait(mut guard: Parked, class: &Class) {
    let slot = guard.slot;
    // The class's own timeout, where it has one, else the session's.
    let class_timeout = class.params.queue_timeout_ms >= 0;
    let timeout_ms = if class_timeout { class.params.queue_timeout_ms as u32 } else { gucs::queue_timeout_ms() };
    // The client's polls are timed on the monotonic clock: a step back of
    // the wall clock must not put them off.
    let mut sleeper = park::Sleeper::new(gucs::client_check_interval_ms(), crate::mono_us());
    // The timeout runs on the monotonic clock, as PostgreSQL's own timers
    // do: a step of the wall clock neither fires it early nor stretches it.
    let began = std::time::Instant::now();
    // The progress guarantee while the worker is away (`HeadWatch`).
    let mut head_watch = progress::HeadWatch::default();
    loop {
        let now = crate::now_us();
        let mono = crate::mono_us();
        // Before the admission check: polling the client may reset the latch.
        if sleeper.client_gone(mono) {
            client_lost(&mut guard);
        }
        // A poll that found the latch set resets it, as PostgreSQL's own
        // check does, expecting interrupts to be served next: a cancel that
        // set it must not wait for the next wake-up.
        pg_sys::check_for_interrupts!();
        let (admitted, limit, queued, class_admitted, head, sampled_mono_us, worker_bound) =
            shmem::with_gate_shared(|l| {
                let h = l.gate.header();
                let k = l.gate.slot(slot).class as usize;
                let class_admitted = h.classes.get(k).map_or(0, |c| c.counters.admitted);
                let head = l.gate.class_head(k) == Some(slot);
                let st = &l.status;
                (
                    l.gate.is_admitted(slot),
                    h.limit,
                    h.queued,
                    class_admitted,
                    head,
                    st.sampled_mono_us,
                    st.workerless_bound_us,
                )
            });
        if admitted {
            guard.armed = false;
            session::set_admitted(true);
            log_wait(slot, limit, queued);
            return;
        }
        let waited_ms = began.elapsed().as_millis() as u64;
        if timeout_ms > 0 && waited_ms >= timeout_ms as u64 {
            guard.armed = false;
            if leave(slot, Abandon::Timeout) {
                QueueTimeout {
                    waited_ms,
                    timeout_ms,
                    limit,
                    queued: queued.saturating_sub(1),
                    class: class.name,
                    class_timeout,
                }
                .raise();
            }
            // Admitted at the last moment: a wait as long as any to log
            // (`queued`, read while queued, counted this session).
            log_wait(slot, limit, queued.saturating_sub(1));
            return;
        }
        let mut sleep_ms = MAX_SLEEP.as_millis() as i64;
        // This session's settings, or the worker's if longer: a session
        // parked before a reload that raised them has the old ones.
        let bound =
            progress::workerless_bound(gucs::progress_timeout_us(), gucs::sample_interval_us()).max(worker_bound);
        match head_watch.look(mono, class_admitted, sampled_mono_us, head, bound) {
            progress::Look::Admit => {
                if admit_without_worker(slot, now, sampled_mono_us, class_admitted) {
                    // Recorded as this session's before the log line, which
                    // serves a terminate (cancels are held): the exit must
                    // find it this session's to release it.
                    guard.armed = false;
                    session::set_admitted(true);
                    log_admitted_without_worker(mono, sampled_mono_us);
                    return;
                }
                continue;
            }
            progress::Look::Again { at_us } => sleep_ms = sleep_ms.min((at_us - mono) / 1000 + 1),
        }
        if timeout_ms > 0 {
            sleep_ms = sleep_ms.min(timeout_ms as i64 - waited_ms as i64);
        }
        if sleeper.sleep(mono, sleep_ms) == park::Woke::ClientGone {
            client_lost(&mut guard);
        }
        pg_sys::check_for_interrupts!();
    }
}

/// The head of a class's queue admits itself over the limit: the worker has
/// not sampled since `sampled_mono_us` and the class admitted nobody since
/// its count was `class_admitted` (`progress::HeadWatch`). Checked again
/// under the lock: a sample taken meanwhile, an admission in the class, or
/// a session gone ahead makes it wait on. The next head is woken, so that
/// its own watch starts now. Returns whether it was admitted.
fn admit_without_worker(slot: usize, now: i64, sampled_mono_us: i64, class_admitted: u64) -> bool {
    shmem::with_gate_waking(|mut l, wake| {
        let k = l.gate.slot(slot).class as usize;
        let unchanged = l.gate.header().classes.get(k).is_some_and(|c| c.counters.admitted == class_admitted);
        if l.status.sampled_mono_us != sampled_mono_us || !unchanged || l.gate.class_head(k) != Some(slot) {
            return false;
        }
        let done = l.gate.progress_admit(Some(k), now, wake) == Some(slot);
        if let Some(next) = l.gate.class_head(k) {
            wake(next);
        }
        done
    })
}

fn log_admitted_without_worker(mono: i64, sampled_mono_us: i64) {
    let since = if sampled_mono_us == 0 {
        "has not sampled since the server started".to_string()
    } else {
        format!("has not sampled for {} ms", (mono - sampled_mono_us).max(0) / 1000)
    };
    crate::log_held!(
        "pg_gatekeeper: admitted process {} over the limit: the worker {since} and its class's queue stood still meanwhile (is the worker running? max_worker_processes)",
        // SAFETY: MyProcPid is set at process start.
        unsafe { pg_sys::MyProcPid }
    );
}

/// The client hung up while we were parked: leave the queue and end the
/// backend as PostgreSQL does for any lost client (FATAL "connection to
/// client lost", raised by ProcessInterrupts).
fn client_lost(guard: &mut Parked) -> ! {
    guard.armed = false;
    leave(guard.slot, Abandon::ClientLost);
    // SAFETY: these are the flags PostgreSQL's own client check sets; with no
    // client to send to, the FATAL goes to the log only.
    unsafe {
        pg_sys::ClientConnectionLost = 1;
        pg_sys::InterruptPending = 1;
    }
    pg_sys::check_for_interrupts!();
    // Only reached if interrupts were held off: end the backend ourselves.
    // SAFETY: as ProcessInterrupts does before this FATAL.
    unsafe { pg_sys::whereToSendOutput = pg_sys::CommandDest::DestNone };
    pgrx::ereport!(
        pgrx::PgLogLevel::FATAL,
        pgrx::PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE,
        "connection to client lost"
    );
    unreachable!("FATAL returned")
}

fn log_wait(slot: usize, limit: u32, queued: u32) {
    let min = gucs::log_min_wait_ms();
    if min < 0 {
        return;
    }
    let waited_us = shmem::with_gate_shared(|l| l.gate.slot(slot).last_wait_us);
    if waited_us / 1000 >= min as u64 {
        crate::log_held!(
            "pg_gatekeeper: process {} admitted after waiting {:.3} ms (limit {}, {} still queued)",
            // SAFETY: MyProcPid is set at process start.
            unsafe { pg_sys::MyProcPid },
            waited_us as f64 / 1000.0,
            limit,
            queued
        );
    }
}

/// Give back this backend's admission, handing it to the queue's head.
pub fn release() {
    if !session::admitted() {
        return;
    }
    let slot = session::slot();
    let now = crate::now_us();
    let shape = session::take_shape();
    // It ran long if it computed past stall_timeout, or if the worker saw
    // it working (on a CPU or on I/O) that long. With stall_timeout = 0
    // nothing is long.
    let stall_us = gucs::stall_timeout_us();
    let computed_long = shape.is_some_and(|s| session::computed_long(&s, now, stall_us));
    let change = shmem::with_gate_waking(|mut l, wake| {
        let ran_long = computed_long || l.gate.slot(slot).long_run;
        l.gate.release(slot, now, wake);
        shape.and_then(|s| {
            let held_us = (now - s.admitted_us).max(0) as u64;
            l.shapes.record(s.db, s.user, s.query_id, held_us, ran_long, now).map(|c| (c, s))
        })
    });
    // Only once the place is given back: had anything before failed, the
    // next transaction end (the abort's) would give it back again
    // (`Gate::release` of a slot not admitted does nothing).
    session::set_admitted(false);
    if let Some((change, s)) = change {
        log_lane_change(change, &s);
    }
}

/// Say in the server log that a role's shape entered or left the long lane.
fn log_lane_change(change: Change, s: &session::Shaped) {
    let (query_id, user, db) = (s.query_id as i64, s.user, s.db);
    match (change, gucs::long_lane()) {
        (Change::Entered, gucs::LongLane::On) => crate::log_held!(
            "pg_gatekeeper: query {query_id} of role {user} in database {db} ran long; its transactions are admitted in the long lane"
        ),
        (Change::Entered, gucs::LongLane::DryRun) => crate::log_held!(
            "pg_gatekeeper: query {query_id} of role {user} in database {db} ran long; its transactions would be admitted in the long lane (long_lane = dry_run)"
        ),
        (Change::Left, _) => crate::log_held!(
            "pg_gatekeeper: query {query_id} of role {user} in database {db} ran short {} times in a row; it leaves the long lane",
            gatekeeper_core::shapes::LEAVE_AFTER
        ),
        _ => {}
    }
}

/// The transaction is over: give back its admission and forget what was
/// decided for it. Called at transaction end, and when a multi-transaction
/// command fails between its internal transactions (no callback fires then).
pub fn end_transaction() {
    session::forget_transaction();
    release();
}

/// Transaction callback: an admission lasts until COMMIT, ROLLBACK, error
/// abort or PREPARE TRANSACTION. Inside a gated utility statement that
/// commits internally (VACUUM, CREATE INDEX CONCURRENTLY, a procedure's
/// COMMIT), the admission is kept until the statement itself ends.
#[pg_guard]
pub unsafe extern "C-unwind" fn xact_callback(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    if matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE) {
        crate::monitor::forget();
    }
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE if session::utility_depth() == 0 => {
            if session::take_chain(event) {
                // COMMIT/ROLLBACK AND CHAIN: the next transaction starts at
                // once, with no statement in between where it could be
                // admitted; it keeps this one's admission.
                session::forget_transaction();
            } else {
                end_transaction();
            }
        }
        _ => {}
    }
}
