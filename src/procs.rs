//! Reading other backends' PGPROC entries: the one place that does.
//!
//! Each read is of a single word that its owner updates and others read
//! without a lock, exactly as pg_stat_activity does: a stale value costs
//! one sample's accuracy, never safety.

use std::sync::atomic::Ordering;

use gatekeeper_core::working::Activity;
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

/// The wait event of the process with PGPROC number `procno` (0 when it is
/// not waiting).
fn wait_event(procno: usize) -> u32 {
    // SAFETY: slot indices are PGPROC numbers below MaxBackends, within
    // allProcs; wait_event_info is a single word read without a lock.
    unsafe { std::ptr::read_volatile(&raw const (*proc_at(procno)).wait_event_info) }
}

/// What the holder in slot `procno` waits on, as a wait event class (0 when
/// it is not waiting), with one correction: a `ClientRead` wait while its
/// statement is active is a wait on another server, not on its own client.
/// Citus waits for its workers' results that way (postgres_fdw and dblink
/// wait in class Extension), so such a wait is reported as
/// [`pg_sys::PG_WAIT_EXTENSION`], the class of waits on something outside
/// this server. COPY FROM STDIN
/// reading its client stays a client wait, and so does every wait of a
/// backend whose activity is not tracked (`track_activities = off`).
pub fn holder_wait(procno: usize) -> u32 {
    let event = wait_event(procno);
    if event == pg_sys::WaitEventClient::WAIT_EVENT_CLIENT_READ && statement_active(procno) {
        return pg_sys::PG_WAIT_EXTENSION;
    }
    event & WAIT_CLASS_MASK
}

/// Whether the backend in slot `procno` runs a statement (its activity
/// state is `active` or `fastpath function call`) that does not read COPY
/// data from its client.
fn statement_active(procno: usize) -> bool {
    let activity = crate::shmem::activity(procno);
    if activity.reads_client.load(Ordering::Relaxed) {
        return false;
    }
    matches!(state(procno), Some((pg_sys::BackendState::STATE_RUNNING | pg_sys::BackendState::STATE_FASTPATH, _)))
}

/// What the activity of the backend in slot `procno` says about the
/// statement it runs now (`working::run_time_us`).
pub fn activity(procno: usize) -> Activity {
    match state(procno) {
        None | Some((pg_sys::BackendState::STATE_DISABLED | pg_sys::BackendState::STATE_UNDEFINED, _)) => {
            Activity::Unknown
        }
        Some((pg_sys::BackendState::STATE_RUNNING | pg_sys::BackendState::STATE_FASTPATH, since)) => {
            Activity::Since(since)
        }
        Some(_) => Activity::Between,
    }
}

/// The activity state of the backend in slot `procno` and when it entered
/// it, from its `pg_stat_activity` entry; None before it has published one.
fn state(procno: usize) -> Option<(pg_sys::BackendState::Type, i64)> {
    let entry = crate::shmem::activity(procno).status_entry.load(Ordering::Relaxed);
    if entry.is_null() {
        return None;
    }
    // Read the pair as pg_stat_activity does (pgstat_begin_read_activity and
    // its end): its owner bumps st_changecount before and after it writes,
    // so an odd count, or one that moved while we read, means a write was
    // under way. A torn pair (the new state with the old state's start)
    // would read a transaction's client think time as run time and send
    // its shape to the long lane. A few tries, then no answer: an entry
    // rewritten that often is busy, and the next sample looks again.
    for _ in 0..8 {
        // SAFETY: a published entry points into PostgreSQL's shared activity
        // array, which lives as long as shared memory; each field read is a
        // single aligned word, and the fences are the read barriers of
        // PostgreSQL's protocol.
        let (before, st, since, after) = unsafe {
            let before = std::ptr::read_volatile(&raw const (*entry).st_changecount);
            std::sync::atomic::fence(Ordering::Acquire);
            let st = std::ptr::read_volatile(&raw const (*entry).st_state);
            let since = std::ptr::read_volatile(&raw const (*entry).st_state_start_timestamp);
            std::sync::atomic::fence(Ordering::Acquire);
            (before, st, since, std::ptr::read_volatile(&raw const (*entry).st_changecount))
        };
        if before == after && before & 1 == 0 {
            return Some((st, since));
        }
        std::hint::spin_loop();
    }
    None
}

/// The top-level transaction id of the process with PGPROC number
/// `procno`, 0 when it has none.
pub fn xid(procno: usize) -> u32 {
    // SAFETY: as in wait_event; xid is a single word that its owner sets
    // and others read without a lock, as GetSnapshotData's callers may.
    unsafe { std::ptr::read_volatile(&raw const (*proc_at(procno)).xid) }.into_inner()
}

/// The transaction that the process with PGPROC number `procno` waits
/// for, when it waits on a transaction's lock (`Lock:transactionid`: it
/// waits for that transaction to end); 0 for any other wait, or when the
/// wait ended while we looked.
pub fn awaited_xid(procno: usize) -> u32 {
    let transaction = pg_sys::PG_WAIT_LOCK | pg_sys::LockTagType::LOCKTAG_TRANSACTION;
    if wait_event(procno) != transaction {
        return 0;
    }
    // SAFETY: waitLock is a single word; while set it points into the lock
    // manager's shared hash table, which is never unmapped, so reading the
    // tag is safe even if the lock was released and its entry reused since
    // (that costs one sample's accuracy, as a stale wait event does).
    unsafe {
        let lock = std::ptr::read_volatile(&raw const (*proc_at(procno)).waitLock);
        if lock.is_null() {
            return 0;
        }
        let tag = std::ptr::read_volatile(&raw const (*lock).tag);
        if u32::from(tag.locktag_type) == pg_sys::LockTagType::LOCKTAG_TRANSACTION {
            tag.locktag_field1
        } else {
            0
        }
    }
}

/// Whether the holder in slot `procno` waits on its own client (idle in
/// transaction, or reading COPY data): it uses no CPU.
pub fn waits_on_client(procno: usize) -> bool {
    holder_wait(procno) == pg_sys::PG_WAIT_CLIENT
}

/// A process waiting on a heavyweight lock, as [`lock_waiters`] saw it.
#[derive(Clone, Copy, Debug)]
pub struct LockWait {
    pub pid: i32,
    /// The lock it waits on (the address of the lock manager's entry) and
    /// the mode it asks for: waiters with the same are blocked by the same
    /// holders. `None` when the wait had not been recorded, or had ended.
    pub on: Option<(usize, i32)>,
}

/// Every process that waits on a heavyweight lock.
pub fn lock_waiters() -> Vec<LockWait> {
    let mut out = vec![];
    // SAFETY: allProcCount is fixed after startup, and every index below it
    // is a valid PGPROC; pid, wait_event_info, waitLock and waitLockMode are
    // single words read without a lock, as pg_stat_activity reads the
    // first two (waitLock is only compared, never followed).
    unsafe {
        for i in 0..(*pg_sys::ProcGlobal).allProcCount as usize {
            let p = proc_at(i);
            let info = std::ptr::read_volatile(&raw const (*p).wait_event_info);
            let pid = std::ptr::read_volatile(&raw const (*p).pid);
            if pid != 0 && info & WAIT_CLASS_MASK == pg_sys::PG_WAIT_LOCK {
                let lock = std::ptr::read_volatile(&raw const (*p).waitLock);
                let mode = std::ptr::read_volatile(&raw const (*p).waitLockMode);
                out.push(LockWait { pid, on: (!lock.is_null()).then_some((lock as usize, mode)) });
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
