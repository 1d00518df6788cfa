//! The admission points (docs/DESIGN.md §4), installed
//! from one `init()`.
//!
//! - Every transaction, an explicit block's included, is admitted at its
//!   first gated statement: the first of planner, ExecutorStart or
//!   ProcessUtility that sees one parks. ExecutorStart and ProcessUtility
//!   are needed because with prepared statements they are the only hooks
//!   that fire on each execution. BEGIN / START TRANSACTION take no
//!   admission: a block that idles after BEGIN holds no place, and the
//!   wait's error is the first statement's own, which aborts the block.
//! - Parse analysis takes none: a statement waits after it, in the planner,
//!   so that a Parse message (or SQL PREPARE), which runs nothing, never
//!   parks. A client that prepares synchronously in the middle of a
//!   transaction, as `pgbench -M prepared` does, would otherwise stop its
//!   whole thread on that wait, with every admitted connection the thread
//!   serves idle in transaction: a wait cycle through the client.
//! - Statements that neither touch relations nor need a snapshot pass
//!   (see [`Utility::classify`]), and so do plain reads of pg_gatekeeper's
//!   own views by members of pg_monitor (see `monitor`).
//! - Work that no statement hook sees first (a fastpath function call, a
//!   domain's CHECK run while parse analysis or Bind converts a value) is
//!   admitted by the object access hook before the function is set up.
//! - Nested statements run under their top-level statement's admission: an
//!   admitted session is never parked again in the same transaction.
//!
//! The hook entry points themselves are in C (`hooks_shim.c`): they call
//! the functions here for the decision, then chain to the previous hook or
//! the standard implementation, so that errors raised there reach the
//! client with all their fields (see that file).

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::{compat, gate, gucs, monitor, session, snapshot};

unsafe extern "C" {
    /// Saves the previous hooks and installs the C entry points; it only
    /// assigns pointers, so it raises no error.
    fn gk_install_hooks();
}

pub fn init() {
    // SAFETY: _PG_init runs single-threaded before any hook can fire; the
    // shim saves each previous hook and chains to it.
    unsafe {
        gk_install_hooks();
        pg_sys::RegisterXactCallback(Some(gate::xact_callback), std::ptr::null_mut());
    }
}

/// The hot-path test shared by every hook: a gated client backend whose
/// transaction holds no admission yet, and that is not exiting. A
/// transaction that starts with the gate switched off for the session stays
/// ungated until it ends.
#[inline]
fn needs_admission() -> bool {
    if session::settled() || !session::is_client_backend() {
        return false;
    }
    // An exiting backend runs no client's work, but another library's exit
    // callback may run a transaction after ours has detached the slot:
    // attaching it again would leave it behind (ours has run), and parking
    // there would wait with interrupts held off, past cancel and terminate.
    // SAFETY: a backend-local flag, set by proc_exit before any exit callback.
    if unsafe { pg_sys::proc_exit_inprogress } {
        return false;
    }
    // A reload this backend read is applied by any transaction it runs that
    // reaches here: gated, exempt, with the gate off, or reading the gate's
    // views. With the worker away and every gated session parked, the DBA's
    // own session (the runbook's check) may be the only one that runs.
    session::apply_reloaded_limit();
    if !gucs::enabled() {
        session::pass_this_transaction();
        session::show_gate_off();
        return false;
    }
    true
}

/// Before planning. Returns true when the statement takes the monitoring
/// free path (the shim then plans it in a free scope, see `hooks_shim.c`).
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_before_planner(parse: *mut pg_sys::Query) -> bool {
    if !needs_admission() {
        return false;
    }
    // SAFETY: PostgreSQL passes a valid Query.
    if unsafe { monitor::is_monitoring_query(parse) } {
        return true;
    }
    // SAFETY: as above, from the planner hook.
    unsafe { gate::admit_statement(compat::query_id((*parse).queryId), snapshot::Point::Planner) };
    false
}

/// Before the executor starts (every execution, prepared ones included).
/// Returns true when the statement runs without an admission: a monitoring
/// query. EXPLAIN without ANALYZE is admitted like any statement: starting
/// the executor runs the plan's initial partition pruning, which evaluates
/// stable functions, the user's too (`EXPLAIN EXECUTE` of a cached plan,
/// which no planner hook sees first).
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_before_executor_start(query_desc: *mut pg_sys::QueryDesc, _eflags: i32) -> bool {
    let mut free = false;
    if needs_admission() {
        // SAFETY: PostgreSQL passes a valid QueryDesc.
        if unsafe { monitor::is_monitoring_plan((*query_desc).plannedstmt) } {
            free = true;
        } else {
            // SAFETY: a QueryDesc being started has its PlannedStmt; this is
            // the ExecutorStart hook, with that QueryDesc.
            unsafe {
                let query_id = compat::query_id((*(*query_desc).plannedstmt).queryId);
                gate::admit_statement(query_id, snapshot::Point::Executor(query_desc));
            }
        }
    }
    session::note_statement();
    free
}

/// A function is about to be set up to run (object access hook,
/// `OAT_FUNCTION_EXECUTE`), outside a free-path statement. In an admitted
/// transaction this is one thread-local test. Without an admission it is
/// work that no statement hook saw first: a fastpath function call (libpq's
/// `PQfn`, the large-object API), or a function in a domain's CHECK that
/// parse analysis or Bind reaches while converting a value (a literal of an
/// array of a domain, a Bind parameter). Admit before it runs.
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_before_function_execute() {
    if needs_admission() {
        // No statement: no shape.
        gate::admit(0);
    }
}

/// How a utility statement is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Utility {
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
                        pg_sys::TransactionStmtKind::TRANS_STMT_COMMIT if t.chain => {
                            Utility::Chain(pg_sys::XactEvent::XACT_EVENT_COMMIT)
                        }
                        pg_sys::TransactionStmtKind::TRANS_STMT_ROLLBACK if t.chain => {
                            Utility::Chain(pg_sys::XactEvent::XACT_EVENT_ABORT)
                        }
                        // BEGIN / START TRANSACTION (the block's first gated
                        // statement is admitted), COMMIT, ROLLBACK, savepoints,
                        // PREPARE TRANSACTION, and COMMIT/ROLLBACK PREPARED:
                        // the last two finish a prepared transaction that may
                        // hold locks admitted sessions wait for, so parking
                        // them could deadlock.
                        _ => Utility::Free,
                    }
                }
                T_VariableSetStmt | T_VariableShowStmt | T_DiscardStmt | T_DeallocateStmt | T_ListenStmt
                | T_UnlistenStmt | T_ClosePortalStmt | T_CheckPointStmt => Utility::Free,
                // EXECUTE evaluates its parameters (any expressions) before
                // the planner and ExecutorStart run, and so does EXPLAIN
                // [ANALYZE] EXECUTE: admitted first.
                T_ExecuteStmt | T_ExplainStmt if evaluates_parameters(stmt) => Utility::Gated,
                // The statement inside is planned or executed through the
                // planner and ExecutorStart hooks, which decide for it.
                T_PrepareStmt | T_ExecuteStmt | T_ExplainStmt => Utility::Free,
                _ => Utility::Gated,
            }
        }
    }
}

/// Whether `stmt` is an EXECUTE with parameters, or an EXPLAIN of one, or
/// of a `CREATE TABLE ... AS EXECUTE` with parameters.
///
/// SAFETY: `stmt` must be a valid utility statement node (or the analysed
/// Query an EXPLAIN holds).
unsafe fn evaluates_parameters(stmt: *mut pg_sys::Node) -> bool {
    use pg_sys::NodeTag::*;
    // SAFETY: per the caller; each cast matches the node's tag.
    unsafe {
        match (*stmt).type_ {
            T_ExecuteStmt => !(*(stmt as *mut pg_sys::ExecuteStmt)).params.is_null(),
            T_ExplainStmt => {
                let query = (*(stmt as *mut pg_sys::ExplainStmt)).query;
                !query.is_null() && evaluates_parameters(query)
            }
            T_Query => {
                let q = &*(stmt as *mut pg_sys::Query);
                q.commandType == pg_sys::CmdType::CMD_UTILITY
                    && !q.utilityStmt.is_null()
                    && evaluates_parameters(q.utilityStmt)
            }
            // Under EXPLAIN ANALYZE it reaches EXECUTE's parameters before
            // any statement hook (at the top level it is gated anyway).
            T_CreateTableAsStmt => {
                let query = (*(stmt as *mut pg_sys::CreateTableAsStmt)).query;
                !query.is_null() && evaluates_parameters(query)
            }
            _ => false,
        }
    }
}

/// What the utility shim does after the statement ran: the values
/// `gk_before_utility` returns to C and gets back.
mod after {
    /// Nothing.
    pub const NOTHING: i32 = 0;
    /// COMMIT AND CHAIN ran.
    pub const CHAIN_COMMIT: i32 = 1;
    /// ROLLBACK AND CHAIN ran.
    pub const CHAIN_ROLLBACK: i32 = 2;
    /// A gated utility statement ran under its admission: leave its scope.
    pub const GATED: i32 = 3;
}

/// Before a utility statement: admit it if it is gated, and say what to do
/// once it has run.
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_before_utility(pstmt: *mut pg_sys::PlannedStmt, toplevel: bool) -> i32 {
    if toplevel {
        // A DROP DATABASE that failed after its drop hook left its mark.
        crate::shapes_api::forget_drop_database();
    }
    if !session::is_client_backend() {
        return after::NOTHING;
    }
    session::note_statement();
    // SAFETY: PostgreSQL passes a valid PlannedStmt wrapping a utility statement.
    match unsafe { Utility::classify((*pstmt).utilityStmt) } {
        Utility::Free => after::NOTHING,
        Utility::Chain(pg_sys::XactEvent::XACT_EVENT_COMMIT) => after::CHAIN_COMMIT,
        Utility::Chain(_) => after::CHAIN_ROLLBACK,
        Utility::Gated => {
            if needs_admission() {
                // SAFETY: as above; this is the ProcessUtility hook.
                unsafe { gate::admit_statement(compat::query_id((*pstmt).queryId), snapshot::Point::Utility) };
            }
            session::enter_utility();
            // SAFETY: as above.
            if unsafe { copies_from_client((*pstmt).utilityStmt) } {
                session::set_reads_client(true);
            }
            after::GATED
        }
    }
}

/// After a utility statement ran to completion.
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_after_utility(action: i32, toplevel: bool) {
    // The gate's own bookkeeping first: what follows may log, and a log call
    // serves interrupts; an ERROR there must not leave the statement's scope
    // open (its admission would never be given back).
    if action == after::GATED {
        leave_utility(toplevel);
    }
    // A SET, RESET or DISCARD may have renamed the session.
    crate::citus::note_name();
    if toplevel {
        crate::shapes_api::after_utility(true);
    }
    // A chain's mark last, once nothing of ours can raise an ERROR: an error
    // between the mark and the end of the block aborts it with no chained
    // block, and a ROLLBACK AND CHAIN's mark would then keep the admission
    // through an abort that starts nothing. It ran, so the block ends at
    // the next transaction event and the chained one starts (a COMMIT AND
    // CHAIN whose commit fails aborts instead: the mark is then cleared
    // without effect). In an aborted block the admission is already gone,
    // and the chained block is admitted at its first gated statement.
    if matches!(action, after::CHAIN_COMMIT | after::CHAIN_ROLLBACK) && session::admitted() {
        session::chain_at(if action == after::CHAIN_COMMIT {
            pg_sys::XactEvent::XACT_EVENT_COMMIT
        } else {
            pg_sys::XactEvent::XACT_EVENT_ABORT
        });
    }
}

/// A utility statement raised an error (it is on its way to the client).
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_utility_failed(action: i32, toplevel: bool) {
    if action == after::GATED {
        leave_utility(toplevel);
    }
    if toplevel {
        crate::shapes_api::after_utility(false);
    }
}

/// The object access hook's drop of a database (`OAT_DROP`): DROP DATABASE
/// passed its permission check and is about to drop it.
#[pg_guard]
#[unsafe(no_mangle)]
unsafe extern "C-unwind" fn gk_database_dropping(dbid: pg_sys::Oid) {
    crate::shapes_api::database_dropping(dbid);
}

/// Leave a gated utility statement's scope, ending the transaction's
/// admission if the statement left no transaction behind. Only a statement
/// sent by the client (`toplevel`) can: the multi-transaction commands
/// (VACUUM, CREATE INDEX CONCURRENTLY, CALL with COMMIT) that end one
/// transaction and may fail before the next refuse to run anywhere else,
/// and a nested statement failing while a subtransaction commits still has
/// its transaction.
fn leave_utility(toplevel: bool) {
    let ended = session::exit_utility() && toplevel;
    if session::utility_depth() == 0 {
        session::set_reads_client(false);
    }
    if ended {
        gate::end_transaction();
    }
}

/// Whether `stmt` is COPY FROM STDIN: it reads its data from the client.
///
/// SAFETY: `stmt` must be a valid utility statement node.
unsafe fn copies_from_client(stmt: *mut pg_sys::Node) -> bool {
    // SAFETY: per the caller; the cast matches the node's tag.
    unsafe {
        (*stmt).type_ == pg_sys::NodeTag::T_CopyStmt && {
            let c = &*(stmt as *mut pg_sys::CopyStmt);
            c.is_from && c.filename.is_null()
        }
    }
}
