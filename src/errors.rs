//! The errors pg_gatekeeper raises, each with its SQLSTATE, DETAIL and HINT.

use gatekeeper_core::classes::{ClassName, DEFAULT_CLASS};
use gatekeeper_core::Full;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

fn raise(code: PgSqlErrorCode, msg: String, detail: String, hint: &str) -> ! {
    ErrorReport::new(code, msg, function_name!()).set_detail(detail).set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

/// 55000: the library was not loaded through shared_preload_libraries.
pub fn not_preloaded() -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "pg_gatekeeper must be loaded via shared_preload_libraries",
        function_name!(),
    )
    .set_detail("Its shared memory and hooks are set up only when the server starts with it preloaded.")
    .set_hint("Add pg_gatekeeper to shared_preload_libraries in postgresql.conf and restart the server.")
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

/// 42804: a function that calls `symbol`, one of `legacy_api`'s entry points,
/// is declared with a row that no version of `gatekeeper.<function>()` had,
/// so the entry point cannot fill it.
pub fn row_mismatch(symbol: &str, function: &str, columns: i32, known: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
        format!("pg_gatekeeper: entry point {symbol} cannot return a row of {columns} columns"),
        format!("It returns the row of gatekeeper.{function}() that an install script declared: {known}."),
        "Install the extension's SQL scripts from the same build as the library, then run ALTER EXTENSION pg_gatekeeper UPDATE.",
    )
}

/// What the HINT of a wait's error says after "Retry": in an explicit block,
/// the error aborts the block (docs/DESIGN.md §4).
const AFTER_ROLLBACK: &str = " (in a transaction block, after ROLLBACK)";

/// " in class \"x\"", or nothing for the class default.
fn in_class(class: &ClassName) -> String {
    if class.is_empty() || class.as_str() == DEFAULT_CLASS {
        String::new()
    } else {
        format!(" in class \"{}\"", class.as_str())
    }
}

/// 53000: a wait in the queue exceeded `queue_timeout`.
#[derive(Clone, Copy, Debug)]
pub struct QueueTimeout {
    pub waited_ms: u64,
    pub timeout_ms: u32,
    pub limit: u32,
    /// Sessions still queued after this one left.
    pub queued: u32,
    /// The session's class.
    pub class: ClassName,
    /// The timeout is the class's own (`queue_timeout` in
    /// `pg_gatekeeper.classes`), not the session's setting.
    pub class_timeout: bool,
}

impl QueueTimeout {
    pub fn raise(self) -> ! {
        let QueueTimeout { waited_ms, timeout_ms, limit, queued, class, class_timeout } = self;
        let (setting, hint) = if class_timeout {
            (
                format!("queue_timeout of class \"{}\" = {timeout_ms} ms", class.as_str()),
                format!(
                    "Retry the transaction{AFTER_ROLLBACK}, or raise queue_timeout of class {} in pg_gatekeeper.classes, or its max_active.",
                    class.as_str()
                ),
            )
        } else {
            (
                format!("pg_gatekeeper.queue_timeout = {timeout_ms} ms"),
                format!("Retry the transaction{AFTER_ROLLBACK}, or raise pg_gatekeeper.queue_timeout or pg_gatekeeper.max_active."),
            )
        };
        raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
            "pg_gatekeeper: timed out waiting for admission".into(),
            format!("Waited {waited_ms} ms{} ({setting}); limit {limit}, {queued} still queued.", in_class(&class)),
            &hint,
        )
    }
}

/// 53400: the queue, or the class's queue, already holds its `max_queued`.
#[derive(Clone, Copy, Debug)]
pub struct QueueFull {
    pub queued: u32,
    pub max_queued: u32,
    pub limit: u32,
    pub class: ClassName,
    /// Which queue is full: the whole one, or the class's.
    pub full: Full,
}

impl QueueFull {
    pub fn raise(self) -> ! {
        let QueueFull { queued, max_queued, limit, class, full } = self;
        let (detail, hint) = match full {
            Full::Gate => (
                format!(
                    "{queued} sessions are queued (pg_gatekeeper.max_queued = {max_queued}); limit {limit}{}.",
                    in_class(&class).replace(" in class", ", this session's class")
                ),
                format!("Retry later{AFTER_ROLLBACK}, or raise pg_gatekeeper.max_queued or pg_gatekeeper.max_active."),
            ),
            Full::Class => (
                format!(
                    "{queued} sessions of class \"{}\" are queued (its max_queued = {max_queued}); limit {limit}.",
                    class.as_str()
                ),
                format!(
                    "Retry later{AFTER_ROLLBACK}, or raise max_queued of class {} in pg_gatekeeper.classes.",
                    class.as_str()
                ),
            ),
        };
        raise(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            "pg_gatekeeper: admission queue is full".into(),
            detail,
            &hint,
        )
    }
}
