//! A statement parked before planning holds no snapshot while it waits
//! (docs/DESIGN.md §4, "What a parked session holds").
//!
//! PostgreSQL takes a snapshot for parse analysis and planning before the
//! planner hook runs (`exec_simple_query`, and the planning of a statement
//! at Bind, `exec_bind_message`), and the session's `PGPROC->xmin` stays at
//! that snapshot's xmin while it is active. Parked there, a session would
//! hold back the cleanup horizon for as long as it queues: every row
//! version deleted or updated since it parked stays, unpruned, for VACUUM
//! and for HOT pruning alike. With 1000 TPC-B clients the oldest xmin stood
//! about 1000 transactions back for whole runs: some hundred dead versions
//! of each of the ten branch rows that every transaction updates
//! (bench/results/horizon-1000-20261128/, measured when statements still
//! parked at parse analysis, under the same snapshot).
//!
//! In READ COMMITTED that snapshot serves the parse analysis and planning
//! of this one statement; execution takes its own afterwards
//! (`PortalStart`). So before parking, the statement's snapshot is popped
//! (and the catalog snapshot dropped), which lets PostgreSQL clear the
//! xmin; once admitted, a fresh snapshot takes its place, as if the
//! statement had arrived then. Only where that is exactly PostgreSQL's own
//! state: READ COMMITTED, no portal running (a utility statement such as
//! EXPLAIN plans inside its portal, which keeps a pointer to its own
//! snapshot), and the active snapshot referenced by its stack entry alone
//! (pushed once, registered nowhere). Anywhere else the wait keeps what it
//! holds. Under REPEATABLE READ and SERIALIZABLE the first snapshot is the
//! transaction's and stays registered whatever happens to the statement's
//! copy, so there is nothing to gain: they are left alone outright.

use pgrx::pg_sys;

/// Drop the statement's snapshot for the wait, where that is safe (see the
/// module's comment). True when it was dropped: call [`retake`] once the
/// wait is over.
pub fn release() -> bool {
    // SAFETY: plain globals of this backend, and the snapshot manager's own
    // functions, called from the planner hook, where an
    // active snapshot, if set, is a valid SnapshotData.
    unsafe {
        if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32
            || !pg_sys::ActivePortal.is_null()
            || !pg_sys::ActiveSnapshotSet()
        {
            return false;
        }
        let snap = pg_sys::GetActiveSnapshot();
        if (*snap).active_count != 1 || (*snap).regd_count != 0 {
            return false;
        }
        pg_sys::PopActiveSnapshot();
        // The catalog snapshot is registered too: without it, nothing this
        // statement holds keeps an xmin (PopActiveSnapshot and this reset
        // PGPROC->xmin to what other registered snapshots still need).
        pg_sys::InvalidateCatalogSnapshot();
    }
    true
}

/// Take a fresh snapshot for the statement's planning, in place of the one [`release`] dropped.
pub fn retake() {
    // SAFETY: in a transaction, from the same hook as `release`; the stack
    // entry takes the place of the one popped, and the caller pops it as
    // it would have popped that one.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
}
