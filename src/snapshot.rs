//! A statement parked before planning, at ExecutorStart or in
//! ProcessUtility holds no snapshot while it waits (docs/DESIGN.md §4,
//! "What a parked session holds").
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
//!
//! A statement that is not planned (a prepared statement's cached plan, at
//! Bind or Execute) is first admitted at ExecutorStart. There its snapshot
//! is on the active stack once and registered once, by its QueryDesc
//! (`CreateQueryDesc`, called by `PortalStart` or `ProcessQuery` right
//! after they pushed it), and the executor has not copied it yet. The wait
//! unregisters and pops it, and once admitted pushes a fresh one and
//! registers that as the QueryDesc's: the counts the callers expect when
//! they pop it and `FreeQueryDesc` unregisters it. Only where nothing else
//! can point at it: those counts exactly, the QueryDesc's snapshot the one
//! on top of the stack, no crosscheck snapshot, and no portal running with
//! a snapshot of its own (a portal that holds its results keeps a
//! `holdSnapshot` to read them with, which a newer statement snapshot must
//! not outrun).
//!
//! A utility statement (CALL, DO, COPY, CREATE TABLE AS, DDL) runs under
//! the snapshot its portal pushed for it (`PortalRunUtility`), remembered
//! as the portal's `portalSnapshot`, which the portal pops after the
//! statement and a procedure's COMMIT counts (`ForgetPortalSnapshots`).
//! The wait pops it and clears the portal's pointer, and once admitted
//! pushes a fresh one at the portal's level and points the portal at it,
//! as `EnsurePortalSnapshotExists` does. Only where the portal's snapshot
//! is the active one, on the stack once and registered nowhere (a portal
//! that keeps the statement's results registers it as its
//! `holdSnapshot`).

use pgrx::pg_sys;

/// Where a statement parks, as far as its snapshot is concerned.
#[derive(Clone, Copy)]
pub enum Point {
    /// The planner hook: the snapshot is the active stack's alone.
    Planner,
    /// ExecutorStart: the snapshot is also registered by the QueryDesc.
    Executor(*mut pg_sys::QueryDesc),
    /// ProcessUtility: the snapshot is the running portal's.
    Utility,
}

/// Drop the statement's snapshot for the wait, where that is safe (see the
/// module's comment). True when it was dropped: call [`retake`] once the
/// wait is over.
///
/// # Safety
/// Call from the hook that `at` names, with the QueryDesc it was given.
pub unsafe fn release(at: Point) -> bool {
    // SAFETY: plain globals of this backend, and the snapshot manager's own
    // functions, called from the planner, ExecutorStart or ProcessUtility
    // hook, where an active snapshot, if set, is a valid SnapshotData,
    // ActivePortal, if set, a valid portal, and the QueryDesc the one being
    // started.
    unsafe {
        if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 || !pg_sys::ActiveSnapshotSet() {
            return false;
        }
        let snap = pg_sys::GetActiveSnapshot();
        let portal = pg_sys::ActivePortal;
        match at {
            Point::Planner => {
                if !portal.is_null() || (*snap).active_count != 1 || (*snap).regd_count != 0 {
                    return false;
                }
            }
            Point::Executor(qd) => {
                if (*qd).snapshot != snap
                    || !(*qd).crosscheck_snapshot.is_null()
                    || (*snap).active_count != 1
                    || (*snap).regd_count != 1
                    || (!portal.is_null() && (!(*portal).portalSnapshot.is_null() || !(*portal).holdSnapshot.is_null()))
                {
                    return false;
                }
                // Regd 0, still active: not freed yet.
                pg_sys::UnregisterSnapshot(snap);
                (*qd).snapshot = std::ptr::null_mut();
            }
            Point::Utility => {
                if portal.is_null()
                    || (*portal).portalSnapshot != snap
                    || !(*portal).holdSnapshot.is_null()
                    || (*snap).active_count != 1
                    || (*snap).regd_count != 0
                {
                    return false;
                }
                (*portal).portalSnapshot = std::ptr::null_mut();
            }
        }
        pg_sys::PopActiveSnapshot();
        // The catalog snapshot is registered too: without it, nothing this
        // statement holds keeps an xmin (PopActiveSnapshot and this reset
        // PGPROC->xmin to what other registered snapshots still need).
        pg_sys::InvalidateCatalogSnapshot();
    }
    true
}

/// Take a fresh snapshot for the rest of the statement, in place of the
/// one [`release`] dropped.
///
/// # Safety
/// As for [`release`], which returned true for the same `at`.
pub unsafe fn retake(at: Point) {
    // SAFETY: in a transaction, from the same hook as `release`; the stack
    // entry (and the registration) take the place of those dropped, and
    // the callers pop and unregister them as they would have those.
    unsafe {
        match at {
            Point::Planner => pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()),
            Point::Executor(qd) => {
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
                // The active copy itself (a copied snapshot registers as is).
                (*qd).snapshot = pg_sys::RegisterSnapshot(pg_sys::GetActiveSnapshot());
            }
            Point::Utility => {
                // The portal is still the running one: the wait runs none.
                let portal = pg_sys::ActivePortal;
                pg_sys::PushActiveSnapshotWithLevel(pg_sys::GetTransactionSnapshot(), (*portal).createLevel);
                (*portal).portalSnapshot = pg_sys::GetActiveSnapshot();
            }
        }
    }
}
