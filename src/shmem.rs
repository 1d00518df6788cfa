//! The shared-memory segment: layout, creation, and locked access.
//!
//! Layout (one `ShmemInitStruct` named "pg_gatekeeper", MAXALIGNed parts):
//! `Shared` header | `[Slot; nslots]` (one per PGPROC number below
//! MaxBackends) | `[HistorySample; history_cap]` | `[Activity; nslots]`
//! (what each holder runs, one cache line each, see [`activity`]) |
//! `[Shape; shapes_cap]` (the query shapes, `gatekeeper_core::shapes`).
//!
//! Locking protocol:
//! - `Shared::lock` (one LWLock of the "pg_gatekeeper" tranche) guards the
//!   gate header, every slot, the history ring, the shapes and `status`. Every change
//!   takes it in exclusive mode through [`with_gate`]; readers that need a
//!   consistent picture (the views) take it in shared mode through
//!   [`with_gate_shared`], copy what they need, and build tuples only after
//!   releasing it. Nothing that can raise an ERROR or sleep runs under it.
//!   (The views' copies are Rust vectors, grown by
//!   `gatekeeper_core::copy::try_collect`, which stops where memory runs
//!   short; [`out_of_memory`] then raises 53200 once the lock is released.
//!   An allocation that fails elsewhere in Rust code aborts the process,
//!   and the postmaster's crash restart then rebuilds the segment, lock
//!   included.)
//! - `Shared::routes_lock` (the tranche's second LWLock) serialises the
//!   writers of the routes file ([`with_routes_file_lock`]); its holder may
//!   take `lock`, never the other way round.
//! - `nslots`, `history_cap`, `shapes_cap` and the locks are written once, by the postmaster
//!   at startup, and read without the lock afterwards.
//! - `worker_procno` is an atomic so that a parking backend can wake the
//!   worker without the lock; `applied_reload` is an atomic read at every
//!   admission without the lock.
//! - The activities are atomics written by their own backend without the
//!   lock (the run start at admission and at each statement it starts while
//!   admitted; its activity entry when it attaches; whether it reads COPY
//!   data from its client), and read by the worker, which decides stalls and
//!   idleness from them (a stale read costs one sample's accuracy).
//!
//! This module only lays the segment out: an empty gate, with no limit and
//! only the built-in classes `default` and `long`. The postmaster then
//! applies the settings to it through the same path as every reload
//! (`limit::apply`, handed to [`init`]), before any backend or the worker
//! can use it. After a crash the
//! postmaster reinitialises shared memory, and both steps run again (the
//! startup hook sees `found == false`).

use std::mem::{align_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, Ordering};

use gatekeeper_core::adaptive::{Bounds, Reason};
use gatekeeper_core::history::{HistorySample, Ring};
use gatekeeper_core::shapes::{Shape, Shapes};
use gatekeeper_core::{Gate, GateHeader, Slot};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

use crate::gucs;

/// The fixed-size part of the segment.
#[repr(C)]
pub struct Shared {
    lock: *mut pg_sys::LWLock,
    /// The tranche's second lock: serialises writers of the routes file
    /// (`route_store`); never taken with `lock` held.
    routes_lock: *mut pg_sys::LWLock,
    nslots: u32,
    history_cap: u32,
    shapes_cap: u32,
    /// PGPROC number of the worker, -1 while it is not running.
    worker_procno: AtomicI32,
    /// The latest configuration load (PgReloadTime) whose limit and classes
    /// some process has applied.
    applied_reload: AtomicI64,
    header: GateHeader,
    status: LimitStatus,
    ring: Ring,
}

/// Where the limit came from and what the worker last saw; under the lock.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitStatus {
    pub effective_cpus: f64,
    /// Ceiling applied to tickets.
    pub ceiling: u32,
    /// Holders sampled as using the server at the last sample.
    pub running: u32,
    /// Smoothed running count while a queue exists; NaN when none.
    pub running_avg: f64,
    /// When the worker last sampled, on the monotonic clock every process
    /// shares (`crate::mono_us`; 0 = never).
    pub sampled_mono_us: i64,
    /// The bound after which a parked head takes the worker for away
    /// (`progress::workerless_bound`) by the worker's settings, set at each
    /// sample: a session parked before a reload still has the old ones.
    /// 0 before the first sample.
    pub workerless_bound_us: i64,
    /// The CPUs' idle fraction the worker last measured.
    pub cpu_idle: f64,
    /// The automatic limit's range (both the limit when it does not adapt).
    pub bounds: Bounds,
    /// Why the limit last changed (`adaptive::Reason`).
    pub reason: u8,
    /// When the limit last changed, microseconds.
    pub changed_at_us: i64,
    /// Holders doing work (not waiting on their client or a lock), smoothed
    /// while a queue exists; NaN when none.
    pub working_avg: f64,
    /// Holders computing past `stall_timeout`, smoothed at every sample
    /// (`adaptive::cpu_cap`).
    pub computing_avg: f64,
    /// The lending cap at the last sample (`lending::LendClimber::cap`);
    /// 0 before the first.
    pub lend_cap: u32,
    /// The lending cap's probe being judged: 1 up, -1 down, 0 none.
    pub lend_probe: i8,
}

impl LimitStatus {
    pub fn reason(&self) -> Reason {
        Reason::from_u8(self.reason)
    }
}

/// What the backend in a slot runs, written by that backend without the lock.
/// One cache line each: every holder stores its `run_start` at each
/// statement, and with entries packed two or three to a line those stores
/// from backends on different CPUs would take the line from each other.
#[repr(C, align(64))]
pub struct Activity {
    /// When the holder began what it runs now: its admission, or the start
    /// of its current statement, whichever is later (microseconds).
    pub run_start: AtomicI64,
    /// The backend's entry in PostgreSQL's activity array (`MyBEEntry`,
    /// what pg_stat_activity reads), published when it attaches: whether
    /// its statement is active. Null before then.
    pub status_entry: AtomicPtr<pg_sys::PgBackendStatus>,
    /// It runs COPY FROM STDIN: a wait on its client is a wait for data.
    pub reads_client: AtomicBool,
}

const _: () = assert!(size_of::<Activity>() == 64 && align_of::<Activity>() == 64);

static SHARED: AtomicPtr<Shared> = AtomicPtr::new(ptr::null_mut());
/// Applies the settings to a newly laid out gate (see [`init`]).
static CONFIGURE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();
static mut PREV_SHMEM_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;

const NAME: &std::ffi::CStr = c"pg_gatekeeper";

fn align(n: usize) -> usize {
    let a = align_of::<u64>().max(pg_sys::MAXIMUM_ALIGNOF as usize);
    n.div_ceil(a) * a
}

/// The sizes of the segment's arrays.
#[derive(Clone, Copy)]
struct Dims {
    nslots: usize,
    history_cap: usize,
    shapes_cap: usize,
}

impl Dims {
    /// From the settings (postmaster, at startup).
    fn configured() -> Dims {
        // SAFETY: MaxBackends is set before shared memory is requested.
        let nslots = unsafe { pg_sys::MaxBackends } as usize;
        Dims { nslots, history_cap: gucs::history_size(), shapes_cap: gucs::max_shapes() }
    }

    /// From a live segment.
    ///
    /// SAFETY: `p` must be the live segment.
    unsafe fn of(p: *const Shared) -> Dims {
        // SAFETY: per the caller; these fields are written once at startup.
        unsafe {
            Dims {
                nslots: (*p).nslots as usize,
                history_cap: (*p).history_cap as usize,
                shapes_cap: (*p).shapes_cap as usize,
            }
        }
    }
}

/// Where each array begins, and the total size.
struct Offsets {
    slots: usize,
    history: usize,
    runs: usize,
    shapes: usize,
    total: usize,
}

fn offsets(d: Dims) -> Offsets {
    let slots = align(size_of::<Shared>());
    let history = align(slots + d.nslots * size_of::<Slot>());
    let runs = align(history + d.history_cap * size_of::<HistorySample>());
    // Room to start the activities on a cache line wherever the segment
    // begins (see `activities`).
    let shapes = align(runs + align_of::<Activity>() + d.nslots * size_of::<Activity>());
    let total = align(shapes + d.shapes_cap * size_of::<Shape>());
    Offsets { slots, history, runs, shapes, total }
}

/// Install the shared-memory hooks. Called once from `_PG_init`.
/// `configure` applies the settings to the gate; the postmaster runs it
/// each time it lays the segment out (at start, after a crash restart),
/// once the segment is in place.
pub fn init(configure: fn()) {
    let _ = CONFIGURE.set(configure);
    // SAFETY: _PG_init runs single-threaded in the postmaster before any
    // hook can fire; we save the previous hooks and chain to them.
    unsafe {
        PREV_SHMEM_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by the postmaster in its shmem request phase, where
    // MaxBackends is set and requesting space and tranches is allowed.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST {
            #[allow(ffi_unwind_calls)] // inside pgrx's guard
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev());
        }
        pg_sys::RequestAddinShmemSpace(offsets(Dims::configured()).total);
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 2);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: called in the postmaster (and after a crash restart) with shared
    // memory available; AddinShmemInitLock serialises ShmemInitStruct.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP {
            #[allow(ffi_unwind_calls)] // inside pgrx's guard
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev());
        }
        let dims = Dims::configured();
        let Offsets { slots: slots_at, total, .. } = offsets(dims);
        let nslots = dims.nslots;
        let addin_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(addin_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let p = pg_sys::ShmemInitStruct(NAME.as_ptr(), total, &mut found) as *mut Shared;
        if !found {
            ptr::write_bytes(p as *mut u8, 0, total);
            let locks = pg_sys::GetNamedLWLockTranche(NAME.as_ptr());
            (*p).lock = &raw mut (*locks).lock;
            (*p).routes_lock = &raw mut (*locks.add(1)).lock;
            (*p).nslots = nslots as u32;
            (*p).history_cap = dims.history_cap as u32;
            (*p).shapes_cap = dims.shapes_cap as u32;
            (*p).worker_procno = AtomicI32::new(-1);
            // Nothing measured yet. The limit's fields are the settings',
            // written by `configure` below; from "manual", an automatic
            // limit starts at its floor (`adaptive::on_reload`).
            (*p).status = LimitStatus {
                running_avg: f64::NAN,
                working_avg: f64::NAN,
                computing_avg: f64::NAN,
                cpu_idle: 1.0,
                reason: Reason::Manual as u8,
                ..LimitStatus::default()
            };
            let slots = std::slice::from_raw_parts_mut(p.cast::<u8>().add(slots_at) as *mut Slot, nslots);
            Gate::new(&mut (*p).header, slots).init(0, crate::now_us());
        }
        pg_sys::LWLockRelease(addin_lock);
        SHARED.store(p, Ordering::Release);
        if !found {
            if let Some(configure) = CONFIGURE.get() {
                configure();
            }
        }
    }
}

fn shared_ptr() -> *mut Shared {
    let p = SHARED.load(Ordering::Acquire);
    if p.is_null() {
        crate::errors::not_preloaded();
    }
    p
}

/// The worker's PGPROC number (-1 while it is not running), the one part of
/// the segment used without the lock.
pub fn worker_procno() -> &'static AtomicI32 {
    // SAFETY: the segment lives as long as the process once created; this
    // borrows only the atomic field, never the fields the lock guards.
    unsafe { &*ptr::addr_of!((*shared_ptr()).worker_procno) }
}

/// What the backend in slot `i` runs. Read and written without the lock
/// (see the locking protocol above).
pub fn activity(i: usize) -> &'static Activity {
    let p = shared_ptr();
    // SAFETY: the segment lives as long as the process once created; the
    // activities are an array of `nslots` atomics on the first cache line
    // at or after their offset (`activities`; `offsets` counts the line of
    // room), zeroed at creation (a valid value for each), and `nslots` is
    // written once at startup. An index out of range panics before any
    // pointer is formed.
    unsafe {
        let dims = Dims::of(p);
        assert!(i < dims.nslots, "slot {i} out of range");
        &*activities(p, dims).add(i)
    }
}

/// The first `Activity`: the first cache line at or after the activities'
/// offset. `offsets` leaves a line of room for it. The segment's mapping
/// starts on a page in every process, so the padding is the same in each.
fn activities(p: *mut Shared, dims: Dims) -> *const Activity {
    let at = p.cast::<u8>().wrapping_add(offsets(dims).runs);
    let pad = (at as usize).next_multiple_of(align_of::<Activity>()) - at as usize;
    at.wrapping_add(pad).cast::<Activity>()
}

/// When the holder in slot `i` began what it runs now (see [`Activity`]).
pub fn run_start(i: usize) -> &'static AtomicI64 {
    &activity(i).run_start
}

/// The latest configuration load whose settings were applied (see
/// `session::apply_reloaded_limit`); used without the lock.
pub fn applied_reload() -> &'static AtomicI64 {
    // SAFETY: as for worker_procno: an atomic field of the live segment.
    unsafe { &*ptr::addr_of!((*shared_ptr()).applied_reload) }
}

/// Everything the lock guards, borrowed for the duration of the lock.
pub struct Locked<'a> {
    pub gate: Gate<'a>,
    pub status: &'a mut LimitStatus,
    pub ring: &'a mut Ring,
    pub history: &'a mut [HistorySample],
    pub shapes: Shapes<'a>,
}

/// Run `f` holding the lock that serialises the routes file's writers.
/// `f` may take the gate's lock; nothing holds the gate's lock and waits
/// for this one.
pub fn with_routes_file_lock<R>(f: impl FnOnce() -> R) -> R {
    let p = shared_ptr();
    // SAFETY: `p` is the live segment; the lock pointer was set at startup
    // and the guard releases it, on unwinding too.
    let _guard = unsafe {
        let lock = (*p).routes_lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        LockGuard(lock)
    };
    f()
}

/// Releases the LWLock when dropped, on unwinding too.
struct LockGuard(*mut pg_sys::LWLock);

impl Drop for LockGuard {
    fn drop(&mut self) {
        // SAFETY: the lock was acquired by this process where the guard was
        // made (with_lock, with_routes_file_lock); a FATAL, which the exit
        // callback cleans up after, drops no guard.
        unsafe { pg_sys::LWLockRelease(self.0) };
    }
}

fn with_lock<R>(mode: pg_sys::LWLockMode::Type, f: impl FnOnce(Locked<'_>) -> R) -> R {
    let p = shared_ptr();
    // SAFETY: `p` is the live segment; the lock pointer was set at startup.
    // While we hold the lock no other process mutates the guarded fields,
    // so handing out &mut for the closure's duration is sound; in shared mode
    // callers only read through it (with_gate_shared gives out & only).
    unsafe {
        let lock = (*p).lock;
        pg_sys::LWLockAcquire(lock, mode);
        let _guard = LockGuard(lock);
        let dims = Dims::of(p);
        let at = offsets(dims);
        let base = p.cast::<u8>();
        let slots = std::slice::from_raw_parts_mut(base.add(at.slots) as *mut Slot, dims.nslots);
        let history = std::slice::from_raw_parts_mut(base.add(at.history) as *mut HistorySample, dims.history_cap);
        let shapes = std::slice::from_raw_parts_mut(base.add(at.shapes) as *mut Shape, dims.shapes_cap);
        f(Locked {
            gate: Gate::new(&mut (*p).header, slots),
            status: &mut (*p).status,
            ring: &mut (*p).ring,
            history,
            shapes: Shapes::new(shapes),
        })
    }
}

/// Run `f` with the lock held exclusively. In debug builds (the tests'),
/// every change is followed by the core's full invariant check, and a
/// failure is a PANIC (a crash restart that every test notices).
pub fn with_gate<R>(f: impl FnOnce(Locked<'_>) -> R) -> R {
    with_lock(pg_sys::LWLockMode::LW_EXCLUSIVE, |l| {
        #[cfg(debug_assertions)]
        let (h, s) = (l.gate.header() as *const _, l.gate.slots() as *const [gatekeeper_core::Slot]);
        let r = f(l);
        #[cfg(debug_assertions)]
        {
            // SAFETY: the lock is still held; these are the header and the
            // slots the closure was lent, read only.
            let (h, s) = unsafe { (&*h, &*s) };
            if let Err(e) = Gate::new(&mut { *h }, &mut s.to_vec()).check() {
                // A broken invariant is a bug: stop everything, loudly, rather
                // than go on from a state that may strand sessions.
                pgrx::ereport!(
                    pgrx::PgLogLevel::PANIC,
                    pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("pg_gatekeeper: gate invariant broken: {e}")
                );
            }
        }
        r
    })
}

/// Like [`with_gate`], for changes that may admit waiters: `f` gets the
/// `wake` callback the core expects, and the latches are set after the lock
/// is released, so that nobody queues on the lock while the signals go out.
/// (A woken waiter re-checks its state under the lock, so the order is safe.)
/// The latches are set when the collected wake-ups are dropped: after the
/// lock, and also when `f` ends in an ERROR or a panic after it admitted
/// someone (the change stays in shared memory; the admitted must not sleep
/// on until their next look). A latch is set without the lock, so a drop
/// during unwinding, before the lock is released, is safe too.
pub fn with_gate_waking<R>(f: impl FnOnce(Locked<'_>, &mut dyn FnMut(usize)) -> R) -> R {
    let mut w = Wakeups { n: 0, buf: [0; WAKE_BATCH], more: Vec::new() };
    with_gate(|l| f(l, &mut |i| w.add(i)))
}

/// Wake-ups collected under the lock. The usual hand-off wakes one or two,
/// which fit the inline buffer; a large jump in tickets (a raised limit, a
/// lending burst) spills to the heap, which costs far less under the lock
/// than a signal per waiter.
const WAKE_BATCH: usize = 16;
struct Wakeups {
    n: usize,
    buf: [usize; WAKE_BATCH],
    more: Vec<usize>,
}

impl Wakeups {
    fn add(&mut self, i: usize) {
        if self.n < WAKE_BATCH {
            self.buf[self.n] = i;
            self.n += 1;
        } else if self.more.try_reserve(1).is_ok() {
            self.more.push(i);
        } else {
            // Out of memory: wake it now rather than lose the wake-up.
            wake(i);
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        for &i in self.buf[..self.n].iter().chain(&self.more) {
            wake(i);
        }
    }
}

/// Raise 53200 for a copy of the segment that found no memory for at least
/// `n` values of `T` ([`gatekeeper_core::copy::try_collect`]): called after
/// the lock is released, as palloc's own error would be raised.
pub fn out_of_memory<T>(n: usize) -> ! {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, "out of memory".to_string(), function_name!())
        .set_detail(format!(
            "Failed on a request of at least {} bytes for a copy of pg_gatekeeper's shared memory.",
            n.saturating_mul(size_of::<T>())
        ))
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

/// Run `f` with the lock held in shared mode, for reading only.
pub fn with_gate_shared<R>(f: impl FnOnce(&Locked<'_>) -> R) -> R {
    with_lock(pg_sys::LWLockMode::LW_SHARED, |l| f(&l))
}

/// Release the lock if this process holds it (exit paths after an error).
pub fn release_if_held() {
    let p = SHARED.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: LWLockHeldByMe only inspects this process's held-lock list.
    unsafe {
        let lock = (*p).lock;
        if pg_sys::LWLockHeldByMe(lock) {
            pg_sys::LWLockRelease(lock);
        }
    }
}

/// Set the latch of the process with this PGPROC number.
pub fn wake(procno: usize) {
    crate::procs::set_latch(procno);
}

/// Wake the worker, if it runs (a session just joined the queue).
pub fn wake_worker() {
    let procno = worker_procno().load(Ordering::Relaxed);
    if procno >= 0 {
        wake(procno as usize);
    }
}
