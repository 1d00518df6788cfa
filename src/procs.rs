//! Reading other backends' PGPROC entries: the one place that does.
//!
//! Each read is of a single word that its owner updates and others read
//! without a lock, exactly as pg_stat_activity does: a stale value costs
//! one sample's accuracy, never safety.

use pgrx::pg_sys;

/// The class part of a wait event (`wait_event_info`'s top byte), as
/// PostgreSQL's `PG_WAIT_*` constants spell the classes.
pub const WAIT_CLASS_MASK: u32 = 0xFF00_0000;

/// The PGPROC of number `procno`.
///
/// # Safety
/// `procno` must be below `ProcGlobal->allProcCount`.
unsafe fn proc_at(procno: usize) -> *mut pg_sys::PGPROC {
    // SAFETY: per the caller, allProcs has an entry for this number.
    unsafe { (*pg_sys::ProcGlobal).allProcs.add(procno) }
}

/// The PGPROC number of `proc_`: its index in `ProcGlobal->allProcs`
/// (PostgreSQL's GetNumberFromPGProc; the same on every version, where
/// PGPROC's own `pgprocno` field exists on some only).
///
/// # Safety
/// `proc_` must point into `ProcGlobal->allProcs`.
pub unsafe fn number(proc_: *const pg_sys::PGPROC) -> usize {
    // SAFETY: per the caller, both pointers are into the same array.
    unsafe { proc_.offset_from((*pg_sys::ProcGlobal).allProcs) as usize }
}

/// This process's PGPROC number.
pub fn my_number() -> usize {
    // SAFETY: MyProc is set for every process attached to shared memory,
    // and points into allProcs.
    unsafe { number(pg_sys::MyProc) }
}

/// The wait event class of the process with PGPROC number `procno` (0 when
/// it is not waiting).
pub fn wait_class(procno: usize) -> u32 {
    // SAFETY: slot indices are PGPROC numbers below MaxBackends, within
    // allProcs; wait_event_info is a single word read without a lock.
    let info = unsafe { std::ptr::read_volatile(&raw const (*proc_at(procno)).wait_event_info) };
    info & WAIT_CLASS_MASK
}

/// Whether the process in PGPROC `procno` waits on its own client (idle in
/// transaction, or reading COPY data): it uses no CPU.
pub fn waits_on_client(procno: usize) -> bool {
    wait_class(procno) == pg_sys::PG_WAIT_CLIENT
}

/// PIDs of every process that waits on a heavyweight lock.
pub fn lock_waiters() -> Vec<i32> {
    let mut out = vec![];
    // SAFETY: allProcCount is fixed after startup, and every index below it
    // is a valid PGPROC; pid and wait_event_info are single words read
    // without a lock, as pg_stat_activity does.
    unsafe {
        for i in 0..(*pg_sys::ProcGlobal).allProcCount as usize {
            let p = proc_at(i);
            let info = std::ptr::read_volatile(&raw const (*p).wait_event_info);
            let pid = std::ptr::read_volatile(&raw const (*p).pid);
            if pid != 0 && info & WAIT_CLASS_MASK == pg_sys::PG_WAIT_LOCK {
                out.push(pid);
            }
        }
    }
    out
}

/// Set the latch of the process with PGPROC number `procno`.
pub fn set_latch(procno: usize) {
    // SAFETY: slot indices and the worker's number are PGPROC numbers within
    // allProcs; SetLatch on another process's latch is the supported way to
    // wake it.
    unsafe { pg_sys::SetLatch(&raw mut (*proc_at(procno)).procLatch) }
}
