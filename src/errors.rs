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
    /// `at_begin`: the wait was at BEGIN, and the block's next statement
    /// raises it (see [`AtBegin`]).
    fn raise_as(self, at_begin: bool) -> ! {
        let QueueTimeout { waited_ms, timeout_ms, limit, queued, class, class_timeout } = self;
        let (what, after, retry) = if at_begin {
            ("BEGIN waited", " The transaction block is aborted.", "ROLLBACK and retry the transaction")
        } else {
            ("Waited", "", "Retry the transaction")
        };
        let (setting, hint) = if class_timeout {
            (
                format!("queue_timeout of class \"{}\" = {timeout_ms} ms", class.as_str()),
                format!(
                    "{retry}, or raise queue_timeout of class {} in pg_gatekeeper.classes, or its max_active.",
                    class.as_str()
                ),
            )
        } else {
            (
                format!("pg_gatekeeper.queue_timeout = {timeout_ms} ms"),
                format!("{retry}, or raise pg_gatekeeper.queue_timeout or pg_gatekeeper.max_active."),
            )
        };
        raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
            "pg_gatekeeper: timed out waiting for admission".into(),
            format!(
                "{what} {waited_ms} ms{} ({setting}); limit {limit}, {queued} still queued.{after}",
                in_class(&class)
            ),
            &hint,
        )
    }

    pub fn raise(self) -> ! {
        self.raise_as(false)
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
    /// `at_begin`: turned away at BEGIN, and the block's next statement
    /// raises it (see [`AtBegin`]).
    fn raise_as(self, at_begin: bool) -> ! {
        let QueueFull { queued, max_queued, limit, class, full } = self;
        let (after, retry) = if at_begin {
            (" BEGIN was turned away; the transaction block is aborted.", "ROLLBACK and retry later")
        } else {
            ("", "Retry later")
        };
        let (detail, hint) = match full {
            Full::Gate => (
                format!(
                    "{queued} sessions are queued (pg_gatekeeper.max_queued = {max_queued}); limit {limit}{}.{after}",
                    in_class(&class).replace(" in class", ", this session's class")
                ),
                format!("{retry}, or raise pg_gatekeeper.max_queued or pg_gatekeeper.max_active."),
            ),
            Full::Class => (
                format!(
                    "{queued} sessions of class \"{}\" are queued (its max_queued = {max_queued}); limit {limit}.{after}",
                    class.as_str()
                ),
                format!("{retry}, or raise max_queued of class {} in pg_gatekeeper.classes.", class.as_str()),
            ),
        };
        raise(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            "pg_gatekeeper: admission queue is full".into(),
            detail,
            &hint,
        )
    }

    pub fn raise(self) -> ! {
        self.raise_as(false)
    }
}

/// An error that ended BEGIN's wait for admission, kept so that the block's
/// next gated statement raises it. Raised while BEGIN itself runs, any error
/// would end the block (PostgreSQL's AbortCurrentTransaction in TBLOCK_BEGIN
/// goes back to idle), and statements the client already sent would then
/// run outside the transaction it asked for. Raised by the next statement,
/// it aborts the block, and they fail instead.
#[derive(Debug)]
pub enum AtBegin {
    Timeout(QueueTimeout),
    QueueFull(QueueFull),
    /// An ERROR raised by an interrupt while parked (cancel,
    /// statement_timeout), with PostgreSQL's own SQLSTATE and message.
    Interrupted {
        code: PgSqlErrorCode,
        message: String,
        detail: Option<String>,
    },
}

impl AtBegin {
    pub fn raise(self) -> ! {
        match self {
            AtBegin::Timeout(t) => t.raise_as(true),
            AtBegin::QueueFull(f) => f.raise_as(true),
            AtBegin::Interrupted { code, message, detail } => {
                let note = "It ended BEGIN's wait for admission; the transaction block is aborted.";
                let detail = match detail {
                    Some(d) => format!("{d} {note}"),
                    None => note.to_string(),
                };
                raise(code, message, detail, "ROLLBACK and retry the transaction.")
            }
        }
    }
}
