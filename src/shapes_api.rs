//! The SQL surface of query shapes (docs/DESIGN.md §15): the view
//! `gatekeeper.shapes` and the functions that route, unroute and forget
//! shapes. Like pg_stat_statements, a role sees the query ids of its own
//! shapes, and all of them (routes too) with the privileges of
//! pg_read_all_stats.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, Ordering};

use gatekeeper_core::classes::ClassName;
use gatekeeper_core::copy::try_collect;
use gatekeeper_core::shapes::{RouteError, Shape, Shapes, ANY_ROLE};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::server_text::ServerText;
use crate::{gucs, shmem};

fn ts(us: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(us).ok()
}

fn fail(code: PgSqlErrorCode, msg: String, detail: String, hint: &str) -> ! {
    ErrorReport::new(code, msg, function_name!()).set_detail(detail).set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

fn current_db() -> u32 {
    // SAFETY: MyDatabaseId is set once the backend connected.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

/// One row per role's shape the gate remembers, and one per route in force
/// (its `userid` and `lane` NULL: a route is for every role and learns
/// nothing).
#[pg_extern(name = "shapes", parallel_restricted)]
fn shapes() -> TableIterator<
    'static,
    (
        name!(userid, Option<pg_sys::Oid>),
        name!(dbid, pg_sys::Oid),
        name!(queryid, Option<i64>),
        name!(lane, Option<&'static str>),
        name!(routed_to, Option<String>),
        name!(routed_until, Option<TimestampWithTimeZone>),
        name!(runs, i64),
        name!(long_runs, i64),
        name!(routed_total, i64),
        name!(mean_time_ms, Option<f64>),
        name!(last_run, Option<TimestampWithTimeZone>),
        name!(entered_lane, Option<TimestampWithTimeZone>),
    ),
> {
    let now = crate::now_us();
    let rows: Vec<Shape> =
        shmem::with_gate_shared(|l| try_collect(l.shapes.entries().iter().filter(|s| Shapes::in_use(s, now)).copied()))
            .unwrap_or_else(|n| shmem::out_of_memory::<Shape>(n));
    // SAFETY: GetUserId reads a backend-local variable; has_privs_of_role
    // reads the catalogs, outside the lock.
    let (me, all) = unsafe {
        let me = pg_sys::GetUserId();
        (me, pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS)))
    };
    TableIterator::new(rows.into_iter().map(move |s| {
        let user = (s.user != ANY_ROLE).then(|| pg_sys::Oid::from(s.user));
        let routed = Shapes::routed_now(&s, now);
        (
            user,
            pg_sys::Oid::from(s.db),
            (all || user == Some(me)).then_some(s.query_id as i64),
            user.map(|_| if s.long { "long" } else { "short" }),
            routed.then(|| s.route.as_str().to_string()),
            (routed && s.route_until_us != 0).then(|| ts(s.route_until_us)).flatten(),
            s.runs as i64,
            s.long_runs as i64,
            s.routed as i64,
            (s.runs > 0).then_some(s.mean_us / 1000.0),
            (s.runs > 0).then(|| ts(s.last_us)).flatten(),
            (s.entered_us != 0).then(|| ts(s.entered_us)).flatten(),
        )
    }))
}

/// Route the transactions that start with query `queryid` in this database,
/// of every role, to class `class` (`long` for the long lane, `default` to
/// keep them out of it), for `duration` or, when it is NULL, for good.
/// Revoked from PUBLIC.
#[pg_extern(name = "route_shape", parallel_unsafe)]
fn route_shape(queryid: Option<i64>, class: Option<ServerText>, duration: default!(Option<Interval>, "NULL")) {
    let (Some(queryid), Some(class)) = (queryid, class) else {
        fail(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "the query id and the class of a route cannot be NULL".into(),
            "Only the duration may be NULL: the route then holds for good.".into(),
            "Name the query id (from gatekeeper.shapes or pg_stat_statements) and a class of gatekeeper.classes.",
        );
    };
    if queryid == 0 {
        fail(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "query id 0 names no query".into(),
            "PostgreSQL never gives a statement the query id 0.".into(),
            "Take the query id from gatekeeper.shapes or pg_stat_statements.",
        );
    }
    let until = match duration {
        None => 0,
        Some(d) => {
            let us = d.as_micros();
            if us <= 0 {
                fail(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    "the duration of a route must be positive".into(),
                    format!("The duration given is {us} microseconds."),
                    "Leave it NULL to route for good; gatekeeper.unroute_shape() ends a route.",
                );
            }
            // 'infinity' (PostgreSQL 17+), or any duration past the end of
            // time, is for good, as NULL is.
            match crate::now_us().saturating_add(us.min(i64::MAX as i128) as i64) {
                i64::MAX => 0,
                t => t,
            }
        }
    };
    // Class names are ASCII, so a name that is not names no class, in any
    // server encoding.
    let Some(class) = class.ascii() else {
        undefined_class(&gatekeeper_core::text::utf8_or_escaped(&class.0));
    };
    let now = crate::now_us();
    let name = ClassName::new(class);
    let db = current_db();
    let result = shmem::with_gate(|mut l| {
        if l.gate.class_index(class).is_none() || name.as_str() != class {
            return Err(None);
        }
        l.shapes.route(db, queryid as u64, name, until, now).map_err(Some)
    });
    match result {
        Ok(()) => {
            crate::route_store::save();
            warn_without_query_ids();
        }
        // Defined, but the gate has no entry for it yet: every entry holds a
        // class dropped from the setting whose sessions have not ended.
        Err(None) if gucs::classes().iter().any(|d| d.name.as_str() == class) => fail(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("class \"{class}\" has no entry free yet"),
            "pg_gatekeeper.classes defines it, but every entry of the gate's class table still holds a class dropped from the setting whose sessions have not ended.".into(),
            "Route the shape once those sessions have ended and the class has its entry (gatekeeper.classes lists the classes that hold one; the worker gives a freed entry out within 10 s).",
        ),
        Err(None) => undefined_class(class),
        Err(Some(RouteError::NoQueryId)) => unreachable!("query id 0 was refused above"),
        Err(Some(RouteError::NoRoom)) if gucs::max_shapes() == 0 => fail(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("no room for a route of query {queryid}"),
            "The shape table is off (pg_gatekeeper.max_shapes = 0): it keeps no shape and no route.".into(),
            "Set pg_gatekeeper.max_shapes above 0 and restart the server.",
        ),
        Err(Some(RouteError::NoRoom)) => fail(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("no room for a route of query {queryid}"),
            format!(
                "Every entry of the shape table that this query may use holds a route (pg_gatekeeper.max_shapes = {}).",
                gucs::max_shapes()
            ),
            "End routes with gatekeeper.unroute_shape(), or raise pg_gatekeeper.max_shapes and restart the server.",
        ),
    }
}

fn undefined_class(class: &str) -> ! {
    fail(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!("class \"{class}\" is not defined"),
        "A shape can be routed only to a class that pg_gatekeeper.classes defines, or to default or long.".into(),
        "Define the class in pg_gatekeeper.classes and reload, or see gatekeeper.classes.",
    )
}

/// A route holds, but with `compute_query_id = off` no statement carries
/// the id it names: say so.
fn warn_without_query_ids() {
    // The value sessions start with (the configuration file's, or ALTER
    // DATABASE's or ALTER ROLE's for this one), not a SET of the caller's.
    // SAFETY: the setting exists (core); the string is the GUC machinery's
    // own, NUL-terminated, read at once.
    let off = unsafe {
        let p = pg_sys::GetConfigOptionResetString(c"compute_query_id".as_ptr());
        !p.is_null() && CStr::from_ptr(p).to_bytes() == b"off"
    };
    if off {
        let report = ErrorReport::new(
            PgSqlErrorCode::ERRCODE_WARNING,
            "the route is set, but compute_query_id is off".to_string(),
            function_name!(),
        )
        .set_detail("Without query ids, the route matches no transaction.")
        .set_hint("Set compute_query_id to auto or on (pg_gatekeeper asks for query ids in auto).");
        crate::with_cancel_held(|| report.report(PgLogLevel::WARNING));
    }
}

/// End the route of query `queryid` in this database. Returns whether it had
/// one. Revoked from PUBLIC.
#[pg_extern(name = "unroute_shape", parallel_unsafe)]
fn unroute_shape(queryid: i64) -> bool {
    let now = crate::now_us();
    let db = current_db();
    let had = shmem::with_gate(|mut l| l.shapes.unroute(db, queryid as u64, now));
    if had {
        crate::route_store::save();
    }
    had
}

/// Forget every shape, and the routes too when `routes` is true. Revoked
/// from PUBLIC.
#[pg_extern(name = "reset_shapes", parallel_unsafe)]
fn reset_shapes(routes: default!(bool, "false")) {
    let now = crate::now_us();
    shmem::with_gate(|mut l| l.shapes.reset(routes, now));
    if routes {
        crate::route_store::save();
    }
}

/// The database a DROP DATABASE of this backend is about to drop (0: none).
/// One backend is one thread: the atomic only avoids `static mut`.
static DROPPING_DB: AtomicU32 = AtomicU32::new(0);

/// Forget a DROP DATABASE's mark: called before every top-level utility
/// statement, since one that failed after its drop hook dropped nothing.
pub fn forget_drop_database() {
    DROPPING_DB.store(0, Ordering::Relaxed);
}

/// DROP DATABASE passed its permission check and is about to drop `dbid`
/// (PostgreSQL's drop hook, called with the database locked: no name to
/// resolve, no catalog to read). It may still fail (the database is in
/// use); the top-level statement's end decides.
pub fn database_dropping(dbid: pg_sys::Oid) {
    DROPPING_DB.store(u32::from(dbid), Ordering::Relaxed);
}

/// After a top-level utility statement: if it dropped a database, forget
/// the shapes and routes of that database. Its OID may be given to a database created
/// later, which must not inherit them; and a route of a database that is
/// gone could not be ended, since `unroute_shape` works in the caller's own
/// database. `ran`: whether the statement completed.
pub fn after_utility(ran: bool) {
    let db = DROPPING_DB.swap(0, Ordering::Relaxed);
    if db == 0 || !ran {
        return;
    }
    let now = crate::now_us();
    if shmem::with_gate(|mut l| l.shapes.forget_db(db, now)) {
        // The database is gone: a cancel must not fail the statement that
        // dropped it, and `save` holds cancels for its WARNING.
        crate::route_store::save();
    }
}

/// The OIDs of the databases in `pg_database`, sorted; `None` to skip this
/// pass: where memory ran short, where the read failed (logged), or where
/// another process holds or waits for a lock on `pg_database` that
/// conflicts (`VACUUM FULL pg_database`, queued behind a `pg_dump`). The
/// worker never waits for that lock: queued behind such a lock for hours,
/// it would stop sampling (stall relief, lending, the deadlock breaker and
/// the progress guarantee with it), and a SIGTERM does not end a lock wait
/// in it. It is connected to no database, and reads the shared catalog as
/// autovacuum's launcher does, by a scan in a transaction of its own; an
/// ERROR there is caught and the transaction aborted, so that the worker
/// goes on (an ERROR would end it, and each one started again would fail
/// the same way before its first sample).
fn database_oids() -> Option<Vec<u32>> {
    PgTryBuilder::new(|| {
        // SAFETY: a transaction with a snapshot, begun and ended here as
        // pgrx's `BackgroundWorker::transaction` does; pg_database is a
        // shared heap catalog, locked without waiting, opened, scanned and
        // closed here (the lock is released at commit), its tuples read
        // while the scan holds them.
        unsafe {
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
            let oids = if pg_sys::ConditionalLockRelationOid(pg_sys::DatabaseRelationId, lock) {
                let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::NoLock as pg_sys::LOCKMODE);
                let oids = scan_databases(rel);
                pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                oids
            } else {
                None
            };
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
            oids
        }
    })
    .catch_others(|e| {
        // SAFETY: the error was copied and flushed by the guard that caught
        // it; aborting ends the transaction begun above, wherever it stood,
        // and releases its lock, snapshot, buffers and relation.
        unsafe { pg_sys::AbortCurrentTransaction() };
        let message = match &e {
            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) | CaughtError::RustPanic { ereport: r, .. } => {
                r.message().to_string()
            }
        };
        pgrx::warning!(
            "pg_gatekeeper: could not list the databases to forget the query routes of dropped ones: {message}"
        );
        None
    })
    .execute()
}

/// The OIDs in `rel` (pg_database, locked), sorted; `None` where memory
/// ran short.
///
/// # Safety
/// In a transaction with an active snapshot, `rel` open and locked.
unsafe fn scan_databases(rel: pg_sys::Relation) -> Option<Vec<u32>> {
    let mut oids = Vec::new();
    // SAFETY: the caller's; the scan is ended here.
    unsafe {
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        let mut short = false;
        loop {
            let tup = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tup.is_null() {
                break;
            }
            if oids.try_reserve(1).is_err() {
                short = true;
                break;
            }
            let db = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tup);
            oids.push(u32::from((*db).oid));
        }
        pg_sys::heap_endscan(scan);
        if short {
            return None;
        }
    }
    oids.sort_unstable();
    Some(oids)
}

/// The worker, at its start and every 10 s: forget the shapes and routes
/// of databases that no longer exist. `after_utility` forgets them in the
/// backend that drops a database, but not on a standby, which replays the
/// drop (and may be promoted), nor when that backend died between the
/// drop's commit and its statement's end, nor in the file when its write
/// failed (the routes come back at the next start). A database created
/// later with the same OID must not inherit them.
pub fn forget_absent_databases() {
    if !shmem::with_gate_shared(|l| l.shapes.any()) {
        return;
    }
    let listed_at = crate::now_us();
    let Some(present) = database_oids() else {
        return; // memory ran short: the next pass lists them again
    };
    let exists = |db: u32| present.binary_search(&db).is_ok();
    // Looked for under the shared lock first: admissions need the lock in
    // exclusive mode, and a pass finds nothing almost always.
    if !shmem::with_gate_shared(|l| l.shapes.any_absent(exists, listed_at)) {
        return;
    }
    let now = crate::now_us();
    let forgot = shmem::with_gate(|mut l| l.shapes.forget_absent(exists, listed_at, now));
    if forgot > 0 {
        pgrx::log!("pg_gatekeeper: forgot {forgot} query routes of databases that no longer exist");
        crate::route_store::save();
    }
}

extension_sql!(
    r#"
CREATE VIEW gatekeeper.shapes AS SELECT * FROM gatekeeper.shapes();
COMMENT ON VIEW gatekeeper.shapes IS 'pg_gatekeeper: one row per query shape (role, database and query id of a transaction''s first statement) with its lane, and one per route in force';
GRANT SELECT ON gatekeeper.shapes TO PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.route_shape(bigint, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.unroute_shape(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.reset_shapes(boolean) FROM PUBLIC;
"#,
    name = "shapes_views",
    requires = [shapes, route_shape, unroute_shape, reset_shapes],
);
