//! pg_gatekeeper: in-server admission control for PostgreSQL.
//!
//! Module map (docs/DESIGN.md §2): the pure admission core is the `gatekeeper_core`
//! crate; this crate is the glue and the SQL surface.
//! - [`gucs`]: every setting.
//! - [`shmem`]: the shared segment and its lock.
//! - [`session`]: this backend's slot, exemption, exit cleanup.
//!   [`backend_local`]: where this backend's own state is kept.
//! - [`gate`]: taking, waiting for and releasing admissions; [`snapshot`]:
//!   what a parked statement holds.
//! - [`hooks`]: the admission points; [`monitor`]: queries that need none.
//! - [`worker`], [`limit`], [`deadlock`]: the background worker's duties;
//!   [`procs`]: reading other backends' PGPROC entries.
//! - [`citus`]: Citus's own connections between nodes.
//! - [`compat`]: what differs between PostgreSQL 15, 16, 17 and 18.
//! - [`api`]: views and functions; [`legacy_api`]: the entry points that
//!   older versions' install scripts name; [`errors`]: every error we raise.

// pgrx turns a PostgreSQL error into a Rust panic and back at each guarded
// boundary; with panic = "abort" every ERROR would take the server down.
#[cfg(not(panic = "unwind"))]
compile_error!("pg_gatekeeper must be built with panic = \"unwind\" (Cargo.toml's profiles set it)");

use pgrx::prelude::*;

mod api;
mod backend_local;
mod citus;
mod compat;
mod deadlock;
mod errors;
mod gate;
mod gucs;
mod hooks;
mod legacy_api;
mod limit;
mod liveness;
mod monitor;
mod park;
mod peer;
mod procs;
mod route_store;
mod server_text;
mod session;
mod shapes_api;
mod shmem;
mod snapshot;
mod worker;

pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // pg_upgrade loads every library that the old cluster's functions use,
    // in a server started for the binary upgrade, to check that it loads:
    // do nothing there (no error for not being preloaded, no hooks, no
    // shared memory, no worker), as pg_cron does.
    // SAFETY: a plain global, set at process start.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    // SAFETY: a plain global set by the postmaster while it loads
    // shared_preload_libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        errors::not_preloaded();
    }
    forget_rust_backtrace();
    // Query ids name the shapes the gate learns (docs/DESIGN.md §15): have
    // PostgreSQL compute them, as pg_stat_statements does, unless
    // compute_query_id is off.
    // SAFETY: called from _PG_init while shared_preload_libraries load, as
    // PostgreSQL requires.
    unsafe { pg_sys::EnableQueryId() };
    gucs::init();
    // The settings reach a new gate through the path every reload takes;
    // the DBA's routes come back from their file.
    shmem::init(|| {
        limit::apply();
        route_store::restore();
    });
    hooks::init();
    worker::register();
}

/// The current time in microseconds (PostgreSQL's TimestampTz).
pub fn now_us() -> i64 {
    // SAFETY: GetCurrentTimestamp only reads the clock.
    unsafe { unguarded::GetCurrentTimestamp() }
}

unsafe extern "C" {
    /// src/clocks.c: the system's monotonic clock, in microseconds.
    fn gk_monotonic_us() -> i64;
}

/// Microseconds on the system's monotonic clock (`CLOCK_MONOTONIC`): the
/// same in every process of the machine, however and whenever it started,
/// and never stepped by NTP or an administrator, unlike [`now_us`]. For
/// times that one process writes to shared memory and another compares
/// with its own. Never 0 in practice (it counts from the machine's boot),
/// which stamps use for "never".
pub fn mono_us() -> i64 {
    // SAFETY: a plain C function with no arguments that only reads a clock.
    unsafe { gk_monotonic_us() }
}

/// Run `f`, a log call, with query cancels held off
/// (HOLD_CANCEL_INTERRUPTS and RESUME_CANCEL_INTERRUPTS). PostgreSQL serves
/// pending interrupts at the end of every message it logs (`errfinish`),
/// and pgrx calls `errfinish` outside its guard below ERROR: the ERROR of a
/// cancel (or of a statement, lock or recovery-conflict timeout, which
/// come the same way) served there would leave by longjmp, past the Rust
/// frames of the caller and its callers, dropping nothing they own
/// (undefined behaviour in Rust, and a leak at best). Held, it is served at
/// the next CHECK_FOR_INTERRUPTS, once those frames have returned. A
/// terminate is not held: its FATAL ends the process, which resumes no
/// frame, and it must still end a backend blocked sending a message to a
/// client that does not read (PostgreSQL acts on it there only while no
/// interrupt is held off). An ERROR raised inside `f` resets the count, as
/// `errfinish` does for every ERROR; a Rust panic restores it on its way
/// out.
pub fn with_cancel_held<R>(f: impl FnOnce() -> R) -> R {
    struct Held;
    impl Drop for Held {
        fn drop(&mut self) {
            // SAFETY: RESUME_CANCEL_INTERRUPTS: a backend-local counter,
            // matching the increment below.
            unsafe { pg_sys::QueryCancelHoldoffCount = pg_sys::QueryCancelHoldoffCount.saturating_sub(1) };
        }
    }
    // SAFETY: HOLD_CANCEL_INTERRUPTS: a backend-local counter.
    unsafe { pg_sys::QueryCancelHoldoffCount += 1 };
    let _held = Held;
    f()
}

/// `pgrx::log!` with query cancels held off ([`with_cancel_held`]), for
/// the lines a backend writes (the worker and the postmaster, which take no
/// cancel, pass through it too where they share a path; the worker's own
/// lines use `pgrx::log!`).
#[macro_export]
macro_rules! log_held {
    ($($arg:tt)*) => {
        $crate::with_cancel_held(|| pgrx::log!($($arg)*))
    };
}

/// When this backend's current statement started (PostgreSQL's statement
/// timestamp, microseconds).
pub fn statement_start_us() -> i64 {
    // SAFETY: returns a backend-local variable.
    unsafe { unguarded::GetCurrentStatementStartTimestamp() }
}

/// PostgreSQL functions that cannot raise an error, called without pgrx's
/// guard. `pg_sys` wraps every call in a thread check and a `sigsetjmp`, so
/// that an error comes back as a Rust panic; these read a clock or a
/// variable and return, and they run several times per transaction, where
/// the guard costs more than the call.
mod unguarded {
    use pgrx::pg_sys::TimestampTz;

    unsafe extern "C" {
        pub fn GetCurrentTimestamp() -> TimestampTz;
        pub fn GetCurrentStatementStartTimestamp() -> TimestampTz;
    }
}

/// Clear RUST_BACKTRACE and RUST_LIB_BACKTRACE from the postmaster's
/// environment before any backend forks. With either set, pgrx appends a
/// Rust backtrace to the DETAIL of every error that passes through a
/// guarded frame (ours or PostgreSQL's, superusers' too), and applications
/// that read DETAIL would see it. The postmaster is single-threaded here,
/// and no Rust code has captured a backtrace yet (the setting is read once).
fn forget_rust_backtrace() {
    for var in ["RUST_BACKTRACE", "RUST_LIB_BACKTRACE"] {
        if std::env::var_os(var).is_some() {
            std::env::remove_var(var);
        }
    }
}
