//! Differences between the PostgreSQL versions pg_gatekeeper supports (15,
//! 16, 17, 18), in one place, as pg_wait_sampling's compat.h does. Each was
//! checked against that version's headers (the pgrx bindings and the
//! server's include directory):
//!
//! - The local pgstat backend array is read by `pgstat_fetch_stat_local_beentry`
//!   in 15, renamed `pgstat_get_local_beentry_by_index` from 16: [`local_beentry`].
//! - `PGPROC.pgprocno` is gone from 17 (ProcNumber): `procs::number` derives
//!   the number from the entry's index in `ProcGlobal->allProcs` on every
//!   version instead (PostgreSQL's GetNumberFromPGProc).
//! - The hooks keep their signatures from 15 to 18 (`ExecutorStart_hook`
//!   returned bool in 18's betas only; 18.0 reverted it). The C entry points
//!   in `hooks_shim.c` are compiled against each version's own headers, so a
//!   future change there fails the build rather than the server.
//! - 18 adds a range-table entry for the grouping step to a query with
//!   GROUP BY (`RTE_GROUP`, its grouped expressions in `groupexprs`):
//!   [`group_rte_exprs`].
//! - `Query.queryId` and `PlannedStmt.queryId` are `uint64` to 17 and
//!   `int64` from 18: [`query_id`].
//! - Role memberships carry INHERIT and SET options from 16, and CREATEROLE
//!   gives its holder ADMIN OPTION alone on the roles it creates:
//!   [`takes_exemption_of`].
//! - Everything else the extension uses (shmem_request_hook, LWLock
//!   tranches, latches, wait events, background workers, GUC hooks) is the
//!   same in the four versions.

use pgrx::pg_sys;

/// The `k`-th (1-based) entry of this transaction's snapshot of the backend
/// status array, or NULL.
///
/// # Safety
/// Inside a transaction, with `k` from 1 to `pgstat_fetch_stat_numbackends()`.
pub unsafe fn local_beentry(k: i32) -> *mut pg_sys::LocalPgBackendStatus {
    // SAFETY: forwarded from the caller.
    #[cfg(feature = "pg15")]
    unsafe {
        pg_sys::pgstat_fetch_stat_local_beentry(k)
    }
    // SAFETY: forwarded from the caller.
    #[cfg(not(feature = "pg15"))]
    unsafe {
        pg_sys::pgstat_get_local_beentry_by_index(k)
    }
}

/// The grouped expressions of a grouping-step range-table entry (18); `None`
/// for any other entry, and on 15 to 17, which have none.
pub fn group_rte_exprs(rte: &pg_sys::RangeTblEntry) -> Option<*mut pg_sys::List> {
    #[cfg(feature = "pg18")]
    if rte.rtekind == pg_sys::RTEKind::RTE_GROUP {
        return Some(rte.groupexprs);
    }
    #[cfg(not(feature = "pg18"))]
    let _ = rte;
    None
}

/// A query id as the gate keeps it (the bits PostgreSQL computed, unsigned):
/// `uint64` to 17, `int64` from 18.
#[cfg(not(feature = "pg18"))]
pub fn query_id(id: u64) -> u64 {
    id
}

/// A query id as the gate keeps it (the bits PostgreSQL computed, unsigned):
/// `uint64` to 17, `int64` from 18.
#[cfg(feature = "pg18")]
pub fn query_id(id: i64) -> u64 {
    id as u64
}

/// Whether `member` is exempt through `role`, a role of `exempt_roles`: it is
/// `role`, or holds `role`'s privileges, or may `SET ROLE` to it, directly or
/// through other roles. A superuser counts only through the memberships it
/// has (`is_member_of_role_nosuper`), not as a member of every role, so that
/// `exempt_superusers = off` gates superusers.
///
/// From 16, a membership that only administers the role (ADMIN OPTION with
/// neither INHERIT nor SET, which CREATEROLE gives its holder on each role it
/// creates) does not count: it gives no privilege of the role, and a role
/// with CREATEROLE could otherwise exempt itself by creating a listed role
/// that does not exist yet. On 15 every membership lets its member SET ROLE.
///
/// # Safety
/// Inside a transaction (the syscache).
pub unsafe fn takes_exemption_of(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: forwarded from the caller; these read the catalogs through the
    // syscache.
    unsafe {
        #[cfg(not(feature = "pg15"))]
        if !pg_sys::superuser_arg(member) {
            return pg_sys::has_privs_of_role(member, role) || pg_sys::member_can_set_role(member, role);
        }
        pg_sys::is_member_of_role_nosuper(member, role)
    }
}
