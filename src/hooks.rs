//! The admission points (DESIGN §3), installed from one `init()`.
//!
//! - Explicit blocks: `BEGIN` / `START TRANSACTION` run first, then park.
//! - Implicit transactions: the first of post_parse_analyze, planner,
//!   ExecutorStart or ProcessUtility that sees a gated statement parks.
//!   ExecutorStart and ProcessUtility are needed because with prepared
//!   statements they are the only hooks that fire on each execution.
//! - Statements that neither touch relations nor need a snapshot pass
//!   (see [`Utility::classify`]), and so do queries that only read
//!   pg_gatekeeper's own views and functions (see `monitor`).
//! - Nested statements run under their top-level statement's admission: an
//!   admitted session is never parked again in the same transaction.
//!
//! Each hook chains to the previous one through `pg_guard_ffi_boundary`,
//! or to the standard implementation.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::{gate, gucs, monitor, session};

static mut PREV_POST_PARSE_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;
static mut PREV_PLANNER: pg_sys::planner_hook_type = None;
static mut PREV_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;
static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

pub fn init() {
    // SAFETY: _PG_init runs single-threaded before any hook can fire; we save
    // each previous hook and chain to it.
    unsafe {
        PREV_POST_PARSE_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(post_parse_analyze);
        PREV_PLANNER = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(planner);
        PREV_EXECUTOR_START = pg_sys::ExecutorStart_hook;
        pg_sys::ExecutorStart_hook = Some(executor_start);
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
        pg_sys::RegisterXactCallback(Some(gate::xact_callback), std::ptr::null_mut());
    }
}

/// The hot-path test shared by every hook: a gated client backend whose
/// transaction holds no admission yet. A transaction that starts with the
/// gate switched off for the session stays ungated until it ends.
#[inline]
fn needs_admission() -> bool {
    if session::settled() || !session::is_client_backend() {
        return false;
    }
    if !gucs::enabled() {
        session::pass_this_transaction();
        return false;
    }
    true
}

#[pg_guard]
unsafe extern "C-unwind" fn post_parse_analyze(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    // SAFETY: PostgreSQL passes a valid analysed Query; we chain unchanged.
    unsafe {
        if let Some(prev) = PREV_POST_PARSE_ANALYZE {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev(pstate, query, jstate));
        }
        // Utility statements are decided in ProcessUtility, which also runs
        // for prepared and extended-protocol executions.
        if needs_admission()
            && (*query).commandType != pg_sys::CmdType::CMD_UTILITY
            && !monitor::is_monitoring_query(query)
        {
            gate::admit(gate::Point::Statement);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn planner(
    parse: *mut pg_sys::Query,
    query_string: *const std::ffi::c_char,
    cursor_options: i32,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: PostgreSQL passes a valid Query; we chain unchanged.
    unsafe {
        if needs_admission() && !monitor::is_monitoring_query(parse) {
            gate::admit(gate::Point::Statement);
        }
        match PREV_PLANNER {
            Some(prev) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                prev(parse, query_string, cursor_options, bound_params)
            }),
            None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_params),
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn executor_start(query_desc: *mut pg_sys::QueryDesc, eflags: i32) {
    // SAFETY: PostgreSQL passes a valid QueryDesc; we chain unchanged.
    unsafe {
        let explain_only = eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 != 0;
        if needs_admission() && !explain_only && !monitor::is_monitoring_plan((*query_desc).plannedstmt) {
            gate::admit(gate::Point::Statement);
        }
        session::note_statement();
        match PREV_EXECUTOR_START {
            Some(prev) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev(query_desc, eflags)),
            None => pg_sys::standard_ExecutorStart(query_desc, eflags),
        }
    }
}

/// How a utility statement is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Utility {
    /// BEGIN / START TRANSACTION: run it, then park.
    Begin,
    /// Needs no admission.
    Free,
    /// Admitted before it runs; internal commits keep the admission.
    Gated,
    /// COMMIT or ROLLBACK AND CHAIN: needs no admission itself; the chained
    /// transaction keeps an admitted block's admission, released instead
    /// at this transaction event otherwise.
    Chain(pg_sys::XactEvent::Type),
}

impl Utility {
    /// SAFETY: `stmt` must be a valid utility statement node.
    unsafe fn classify(stmt: *mut pg_sys::Node) -> Utility {
        use pg_sys::NodeTag::*;
        // SAFETY: the caller passes a valid node; we read its tag and, for
        // transaction statements, their kind.
        unsafe {
            match (*stmt).type_ {
                T_TransactionStmt => {
                    let t = &*(stmt as *mut pg_sys::TransactionStmt);
                    match t.kind {
                        pg_sys::TransactionStmtKind::TRANS_STMT_BEGIN
                        | pg_sys::TransactionStmtKind::TRANS_STMT_START => Utility::Begin,
                        pg_sys::TransactionStmtKind::TRANS_STMT_COMMIT if t.chain => {
                            Utility::Chain(pg_sys::XactEvent::XACT_EVENT_COMMIT)
                        }
                        pg_sys::TransactionStmtKind::TRANS_STMT_ROLLBACK if t.chain => {
                            Utility::Chain(pg_sys::XactEvent::XACT_EVENT_ABORT)
                        }
                        // COMMIT, ROLLBACK, savepoints, PREPARE TRANSACTION,
                        // and COMMIT/ROLLBACK PREPARED: the last two finish a
                        // prepared transaction that may hold locks admitted
                        // sessions wait for, so parking them could deadlock.
                        _ => Utility::Free,
                    }
                }
                T_VariableSetStmt | T_VariableShowStmt | T_DiscardStmt | T_DeallocateStmt | T_ListenStmt
                | T_UnlistenStmt | T_ClosePortalStmt | T_CheckPointStmt => Utility::Free,
                // The statement inside is planned or executed through the
                // planner and ExecutorStart hooks, which decide for it.
                T_PrepareStmt | T_ExecuteStmt | T_ExplainStmt => Utility::Free,
                _ => Utility::Gated,
            }
        }
    }
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: PostgreSQL passes a valid PlannedStmt wrapping a utility
    // statement; we chain with the arguments unchanged.
    unsafe {
        let run = || match PREV_PROCESS_UTILITY {
            Some(prev) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                prev(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc)
            }),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        };
        if !session::is_client_backend() {
            return run();
        }
        session::note_statement();
        match Utility::classify((*pstmt).utilityStmt) {
            Utility::Free => run(),
            Utility::Chain(event) => {
                run();
                // It ran, so the block ends at the next transaction event
                // and the chained one starts (an error before then means no
                // chain: the mark is then cleared without effect). In an
                // aborted block the admission is already gone, and the
                // chained block is admitted at its first gated statement.
                if session::admitted() {
                    session::chain_at(event);
                }
            }
            Utility::Begin => {
                run();
                if needs_admission() {
                    gate::admit(gate::Point::Begin);
                }
            }
            Utility::Gated => {
                if needs_admission() {
                    gate::admit(gate::Point::Statement);
                }
                let _scope = session::UtilityScope::enter();
                run();
            }
        }
    }
}
