//! The errors pg_gatekeeper raises, each with its SQLSTATE, DETAIL and HINT.

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

/// 53000: a wait in the queue exceeded `queue_timeout`.
#[derive(Clone, Copy, Debug)]
pub struct QueueTimeout {
    pub waited_ms: u64,
    pub timeout_ms: u32,
    pub limit: u32,
    /// Sessions still queued after this one left.
    pub queued: u32,
}

impl QueueTimeout {
    /// `at_begin`: the wait was at BEGIN, and the block's next statement
    /// raises it (see [`AtBegin`]).
    fn raise_as(self, at_begin: bool) -> ! {
        let QueueTimeout { waited_ms, timeout_ms, limit, queued } = self;
        let (what, after, hint) = if at_begin {
            (
                "BEGIN waited",
                " The transaction block is aborted.",
                "ROLLBACK and retry the transaction, or raise pg_gatekeeper.queue_timeout or pg_gatekeeper.max_active.",
            )
        } else {
            ("Waited", "", "Retry the transaction, or raise pg_gatekeeper.queue_timeout or pg_gatekeeper.max_active.")
        };
        raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
            "pg_gatekeeper: timed out waiting for admission".into(),
            format!(
                "{what} {waited_ms} ms (pg_gatekeeper.queue_timeout = {timeout_ms} ms); limit {limit}, {queued} still queued.{after}"
            ),
            hint,
        )
    }

    pub fn raise(self) -> ! {
        self.raise_as(false)
    }
}

/// 53400: the queue already holds `max_queued` sessions.
#[derive(Clone, Copy, Debug)]
pub struct QueueFull {
    pub queued: u32,
    pub max_queued: u32,
    pub limit: u32,
}

impl QueueFull {
    /// `at_begin`: turned away at BEGIN, and the block's next statement
    /// raises it (see [`AtBegin`]).
    fn raise_as(self, at_begin: bool) -> ! {
        let QueueFull { queued, max_queued, limit } = self;
        let (after, hint) = if at_begin {
            (
                " BEGIN was turned away; the transaction block is aborted.",
                "ROLLBACK and retry later, or raise pg_gatekeeper.max_queued or pg_gatekeeper.max_active.",
            )
        } else {
            ("", "Retry later, or raise pg_gatekeeper.max_queued or pg_gatekeeper.max_active.")
        };
        raise(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            "pg_gatekeeper: admission queue is full".into(),
            format!("{queued} sessions are queued (pg_gatekeeper.max_queued = {max_queued}); limit {limit}.{after}"),
            hint,
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
