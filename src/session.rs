//! This backend's own view of the gate: its slot, whether it holds an
//! admission, whether it is exempt, and the exit callback that cleans up.
//!
//! The shared slot is the truth; the flags here are a per-process cache that
//! keeps the hot path free of locks. `admitted` is set whenever this backend
//! may hold an admission, so releasing is never skipped; releasing a slot
//! that holds none is a no-op in the core.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use gatekeeper_core::admission::SlotState;
use gatekeeper_core::cpu_clock::{self, CpuClock};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::backend_local::BackendLocal;
use crate::{gucs, shmem};

struct Local {
    /// Our slot has been attached in shared memory.
    attached: Cell<bool>,
    /// Our PGPROC number, the index of our slot.
    slot: Cell<usize>,
    /// We may hold an admission.
    admitted: Cell<bool>,
    /// This transaction was let through without admission (exempt, or
    /// `enabled = off`): it stays ungated until it ends, whatever a reload
    /// or a SET changes meanwhile, so that it is never parked mid-way.
    passed: Cell<bool>,
    /// Cached exemption decision, with the settings generation, the
    /// configuration load (`PgReloadTime`) and the session user it was made
    /// for.
    exempt: Cell<Option<(bool, (u64, pg_sys::TimestampTz), pg_sys::Oid)>>,
    /// Whether our slot shows us exempt (`SlotState::Exempt`) or gated, as
    /// last written; `None` before the first write.
    shown_exempt: Cell<Option<bool>>,
    /// Depth of gated utility statements being executed; while above zero,
    /// commits inside them (VACUUM, procedures with COMMIT) keep the admission.
    utility_depth: Cell<u32>,
    /// COMMIT/ROLLBACK AND CHAIN ran in an admitted block: at this
    /// transaction event the admission passes to the chained transaction
    /// instead of being released.
    chain_at: Cell<Option<pg_sys::XactEvent::Type>>,
    /// The statement start (PostgreSQL's statement timestamp) last written
    /// to our run start, so that each statement writes it once.
    last_statement: Cell<i64>,
    /// This transaction's shape (database, role, query id of its first gated
    /// statement), and when it was admitted, by the clock and by this
    /// process's CPU time: recorded when it ends.
    shape: Cell<Option<Shaped>>,
    /// The last reading of this process's CPU clock (`shape`'s CPU time).
    cpu_clock: Cell<CpuClock>,
    /// The limit settings' generation (`gucs::limit_generation`) this
    /// process last applied or found in force; `None` before its first
    /// admission.
    applied_limit: Cell<Option<u64>>,
}

static LOCAL: BackendLocal<Local> = BackendLocal::new(Local {
    attached: Cell::new(false),
    slot: Cell::new(0),
    admitted: Cell::new(false),
    passed: Cell::new(false),
    exempt: Cell::new(None),
    shown_exempt: Cell::new(None),
    utility_depth: Cell::new(0),
    chain_at: Cell::new(None),
    last_statement: Cell::new(0),
    shape: Cell::new(None),
    cpu_clock: Cell::new(CpuClock::new()),
    applied_limit: Cell::new(None),
});

unsafe extern "C" {
    /// The hook shim's copy of [`settled`] (hooks_shim.c): while it is set,
    /// the hooks that only decide admission (the planner's, the object
    /// access hook's) return without calling into Rust.
    static mut gk_settled: bool;
    /// The query id of the statement that asked for this transaction's
    /// admission, until it has started (hooks_shim.c clears it then).
    static mut gk_shape_pending: u64;
}

/// Publish [`settled`] to the shim; called wherever `admitted` or `passed`
/// changes.
fn publish_settled(l: &Local) {
    // SAFETY: a plain C global of this backend's, written only here, from
    // the backend's one thread.
    unsafe { gk_settled = l.admitted.get() || l.passed.get() };
}

/// Whether this process is a client backend (the only kind that is gated).
pub fn is_client_backend() -> bool {
    // SAFETY: MyBackendType is set once at process start and only read here.
    unsafe { pg_sys::MyBackendType == pg_sys::BackendType::B_BACKEND }
}

/// Whether this backend has not reached its command loop yet: PostgreSQL
/// reports the backend's state (idle, or disabled without
/// `track_activities`) before it reads its first command, and never sets it
/// back to undefined. What runs before that is the server's own start-up
/// work, such as a login event trigger (PostgreSQL 17+), where an ERROR is a
/// FATAL that refuses the connection.
pub fn before_command_loop() -> bool {
    // SAFETY: MyBEEntry is this backend's own entry (or null without one);
    // only this backend writes its st_state, so reading it needs no
    // change-count protocol.
    unsafe {
        let e = pg_sys::MyBEEntry;
        !e.is_null() && (*e).st_state == pg_sys::BackendState::STATE_UNDEFINED
    }
}

pub fn admitted() -> bool {
    LOCAL.with(|l| l.admitted.get())
}

/// Record whether we may hold an admission. Admitted now, the run that the
/// worker's stall check measures starts now, whatever statement it is in:
/// the time spent queued is not running time.
pub fn set_admitted(v: bool) {
    LOCAL.with(|l| {
        l.admitted.set(v);
        publish_settled(l);
        if v {
            l.last_statement.set(crate::statement_start_us());
            let now = crate::now_us();
            shmem::run_start(l.slot.get()).store(now, Ordering::Relaxed);
            // The shape's clocks start at the admission, not at the request:
            // time spent queued is not the transaction's.
            if let Some(s) = l.shape.get() {
                let mut clock = l.cpu_clock.get();
                let cpu = clock.start(now, gucs::stall_timeout_us(), cpu_time_us);
                l.cpu_clock.set(clock);
                l.shape.set(Some(Shaped { admitted_us: now, cpu, ..s }));
            }
        }
    });
}

/// The shape of a transaction, and where its clocks stood at admission.
#[derive(Clone, Copy)]
pub struct Shaped {
    pub db: u32,
    /// The role admitted (`GetUserId()` then): whose shape learns.
    pub user: u32,
    pub query_id: u64,
    pub admitted_us: i64,
    /// Where its CPU time is counted from (`None` with stall relief off).
    pub cpu: Option<cpu_clock::Start>,
}

unsafe extern "C" {
    /// This process's CPU time in microseconds (src/clocks.c).
    fn gk_cpu_time_us() -> i64;
}

/// This process's CPU time, in microseconds.
fn cpu_time_us() -> i64 {
    // SAFETY: a plain C function with no arguments that only reads a clock.
    unsafe { gk_cpu_time_us() }
}

/// Whether the transaction of `shape`, ending at `now_us`, computed for
/// `stall_us` or longer (see `gatekeeper_core::cpu_clock`: only one held
/// that long reads the CPU clock).
pub fn computed_long(shape: &Shaped, now_us: i64, stall_us: i64) -> bool {
    LOCAL.with(|l| {
        let mut clock = l.cpu_clock.get();
        let long = clock.computed_long(shape.cpu, shape.admitted_us, now_us, stall_us, cpu_time_us);
        l.cpu_clock.set(clock);
        long
    })
}

/// Remember the shape of the transaction asking for admission (see
/// `gate::release`); its clocks start when it is admitted
/// ([`set_admitted`]). A statement with no query id leaves no shape.
pub fn set_shape(db: u32, user: u32, query_id: u64) {
    let shaped = (query_id != 0).then_some(Shaped { db, user, query_id, admitted_us: 0, cpu: None });
    // SAFETY: a plain C global of this backend's, written from its one
    // thread; the shim only compares and clears it.
    unsafe { gk_shape_pending = query_id };
    LOCAL.with(|l| l.shape.set(shaped));
}

/// The shape of the transaction that ends, once, if the statement that
/// asked for its admission started: one that failed before (its permission
/// checks, in a subtransaction that was rolled back) teaches nothing.
pub fn take_shape() -> Option<Shaped> {
    // SAFETY: as in `set_shape`.
    let started = unsafe {
        let pending = gk_shape_pending;
        gk_shape_pending = 0;
        pending == 0
    };
    LOCAL.with(|l| l.shape.take()).filter(|_| started)
}

/// A statement starts, or goes on, in an admitted transaction: keep the run
/// start current, so that the worker measures this statement's time (the
/// stall check). One compare per call; one store per statement.
#[inline]
pub fn note_statement() {
    LOCAL.with(|l| {
        if !l.admitted.get() {
            return;
        }
        let started = crate::statement_start_us();
        if started != l.last_statement.get() {
            l.last_statement.set(started);
            shmem::run_start(l.slot.get()).store(started, Ordering::Relaxed);
        }
    });
}

/// Apply the limit and the classes if this process reloaded a change to
/// them since it last looked, or, at its first admission, if its settings
/// come from a reload that nobody has applied yet (a reload while the
/// worker was away, before this backend started). See `limit::apply`.
pub fn apply_reloaded_limit() {
    let generation = gucs::limit_generation();
    let stale = match LOCAL.with(|l| l.applied_limit.replace(Some(generation))) {
        Some(g) => g != generation,
        // SAFETY: PgReloadTime is this process's own copy of when its
        // configuration was last loaded.
        None => (unsafe { pg_sys::PgReloadTime }) > shmem::applied_reload().load(Ordering::Relaxed),
    };
    if stale {
        crate::limit::apply_unless_superseded();
    }
}

/// Whether this transaction already holds an admission or was let through.
#[inline]
pub fn settled() -> bool {
    LOCAL.with(|l| l.admitted.get() || l.passed.get())
}

/// Let the rest of this transaction through without admission.
pub fn pass_this_transaction() {
    LOCAL.with(|l| {
        l.passed.set(true);
        publish_settled(l);
    });
}

/// The transaction ended: forget what was decided for it (this touches
/// only this backend's flags; the caller releases any admission, see
/// `gate::end_transaction`).
pub fn forget_transaction() {
    LOCAL.with(|l| {
        l.passed.set(false);
        publish_settled(l);
    });
}

pub fn slot() -> usize {
    LOCAL.with(|l| l.slot.get())
}

/// A chained COMMIT (at `XACT_EVENT_COMMIT`) or ROLLBACK (at
/// `XACT_EVENT_ABORT`) is about to end this admitted transaction and start
/// the next one at once.
pub fn chain_at(event: pg_sys::XactEvent::Type) {
    LOCAL.with(|l| l.chain_at.set(Some(event)));
}

/// Whether this transaction event ends a chained transaction whose successor
/// keeps the admission. Clears the mark either way: a COMMIT AND CHAIN whose
/// commit fails aborts instead, and starts no chained transaction.
pub fn take_chain(event: pg_sys::XactEvent::Type) -> bool {
    LOCAL.with(|l| l.chain_at.take()) == Some(event)
}

/// This backend starts or ends reading COPY data from its client: while it
/// does, a wait on its client is not a wait on another server (see
/// `procs::holder_wait`).
pub fn set_reads_client(v: bool) {
    if LOCAL.with(|l| l.attached.get()) {
        shmem::activity(slot()).reads_client.store(v, Ordering::Relaxed);
    }
}

pub fn utility_depth() -> u32 {
    LOCAL.with(|l| l.utility_depth.get())
}

/// A gated utility statement starts: commits inside it (VACUUM, procedures
/// with COMMIT) keep the admission until [`exit_utility`].
pub fn enter_utility() {
    LOCAL.with(|l| l.utility_depth.set(l.utility_depth.get() + 1));
}

/// A gated utility statement ended, normally or by an error. Returns true
/// when the caller must end the transaction itself: an error between two
/// internal transactions of a multi-transaction command leaves no
/// transaction to abort, so no transaction callback will release for us.
#[must_use]
pub fn exit_utility() -> bool {
    let depth = LOCAL.with(|l| {
        let d = l.utility_depth.get().saturating_sub(1);
        l.utility_depth.set(d);
        d
    });
    // SAFETY: IsTransactionState only reads backend-local state.
    depth == 0 && !unsafe { pg_sys::IsTransactionState() }
}

/// This process registered [`on_exit`] (once: a process attaches again
/// only after a failure between the two).
static EXIT_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Attach our slot on first use and register the exit callback.
pub fn ensure_attached() -> usize {
    if let Some(i) = LOCAL.with(|l| l.attached.get().then(|| l.slot.get())) {
        return i;
    }
    // The PGPROC number is below MaxBackends for regular backends, the size
    // of the slot array.
    let i = crate::procs::my_number();
    // SAFETY: MyProcPid is set at process start.
    let pid = unsafe { pg_sys::MyProcPid };
    // The exit callback first: registering it can fail (a FATAL when other
    // libraries took PostgreSQL's 20 entries), and a slot attached without
    // it would keep its place or queue entry after this process exits. It
    // does nothing until the slot is attached.
    if !EXIT_REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: registering a plain extern "C" callback; it runs at backend
        // exit before shared memory is detached, on FATAL and normal exits
        // alike.
        unsafe { pg_sys::before_shmem_exit(Some(on_exit), pg_sys::Datum::from(0)) };
    }
    // A slot left queued or admitted by its previous process (whose exit
    // callback never ran to its end) would keep a place or a queue entry
    // for ever: release it first, and say so.
    let now = crate::now_us();
    let left_by = shmem::with_gate_waking(|mut l, wake| l.gate.take_over(i, pid, false, now, wake));
    let activity = shmem::activity(i);
    activity.reads_client.store(false, Ordering::Relaxed);
    // SAFETY: MyBEEntry is this backend's entry in PostgreSQL's shared
    // activity array, set before any statement runs (or null without one).
    activity.status_entry.store(unsafe { pg_sys::MyBEEntry }, Ordering::Relaxed);
    LOCAL.with(|l| {
        l.slot.set(i);
        l.attached.set(true);
    });
    // Logged once attached and the exit callback registered: a log call
    // serves a terminate (cancels are held), which must find the slot ours.
    if let Some(old) = left_by {
        crate::log_held!(
            "pg_gatekeeper: process {old} left its queue entry or admission behind at exit; released when process {pid} took its slot"
        );
    }
    i
}

/// Whether this session is exempt, deciding again after this process read
/// a configuration reload, after a change to the exemption settings (a SET
/// of them, or a reload) or when `SET SESSION AUTHORIZATION` changed the
/// session user. Any reload, not only one that changed those settings: a
/// role made or unmade superuser, or granted or revoked an exempt role, is
/// noticed at the next reload, as the documentation says. Needs a
/// transaction (catalog lookups).
pub fn is_exempt(slot: usize) -> bool {
    // SAFETY: PgReloadTime is this process's own copy of when it last read
    // its configuration.
    let generation = (gucs::exemption_generation(), unsafe { pg_sys::PgReloadTime });
    // SAFETY: GetSessionUserId is valid after InitPostgres; it follows SET
    // SESSION AUTHORIZATION (SET ROLE changes the current user only).
    let user = unsafe { pg_sys::GetSessionUserId() };
    let exempt = match LOCAL.with(|l| l.exempt.get()) {
        Some((v, g, u)) if g == generation && u == user => v,
        _ => {
            let exempt = role_is_exempt(user);
            LOCAL.with(|l| l.exempt.set(Some((exempt, generation, user))));
            exempt
        }
    };
    show_exempt(slot, exempt);
    exempt
}

/// The gate is off for this session (`pg_gatekeeper.enabled = off`, by a
/// SET, the role's or database's settings, or the runbook's reload): its
/// transactions pass ungated, so the views show it exempt, not idle, until
/// a transaction of its is gated again.
pub fn show_gate_off() {
    show_exempt(ensure_attached(), true);
}

/// Show our slot exempt or gated (the views and `total_sessions` read it),
/// taking the gate's lock only when that changes. Only between
/// transactions: a queued or admitted slot keeps its state, and the next
/// call tries again.
fn show_exempt(slot: usize, exempt: bool) {
    if LOCAL.with(|l| l.shown_exempt.get()) == Some(exempt) {
        return;
    }
    let shown = shmem::with_gate(|mut l| {
        l.gate.set_exempt(slot, exempt);
        l.gate.slot(slot).state == if exempt { SlotState::Exempt } else { SlotState::Idle }
    });
    if shown {
        LOCAL.with(|l| l.shown_exempt.set(Some(exempt)));
    }
}

/// Whether `role` is exempt under the settings now in force.
pub fn role_is_exempt(role: pg_sys::Oid) -> bool {
    // SAFETY: superuser_arg, get_role_oid and takes_exemption_of read the
    // catalogs through syscache, which needs (and has) a transaction here.
    unsafe {
        if gucs::exempt_superusers() && pg_sys::superuser_arg(role) {
            return true;
        }
        for name in gucs::exempt_roles() {
            let oid = pg_sys::get_role_oid(name.as_ptr(), true);
            if oid != pg_sys::InvalidOid && crate::compat::takes_exemption_of(role, oid) {
                return true;
            }
        }
    }
    false
}

/// Backend exit, FATAL included: leave the queue or hand the admission on.
#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    if !LOCAL.with(|l| l.attached.get()) {
        return;
    }
    shmem::release_if_held();
    let i = slot();
    let now = crate::now_us();
    shmem::with_gate_waking(|mut l, wake| l.gate.detach(i, now, wake));
    shmem::activity(i).status_entry.store(std::ptr::null_mut(), Ordering::Relaxed);
    LOCAL.with(|l| {
        l.attached.set(false);
        l.admitted.set(false);
        publish_settled(l);
    });
}
