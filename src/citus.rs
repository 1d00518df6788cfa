//! Citus: the connections Citus opens between the nodes of a cluster.
//!
//! A distributed transaction is admitted once, at the node its client
//! connects to. The connections it then opens into other nodes (and into
//! this one) serve work that is already admitted: queued behind the work
//! they serve, they would form wait cycles that run through two gates, which
//! neither PostgreSQL's nor Citus's deadlock detector sees. So a
//! transaction that Citus starts on this node for a distributed transaction
//! rides on that transaction's admission and is not gated here.
//!
//! Citus starts every such transaction with one query string, `BEGIN ...;
//! SELECT assign_distributed_transaction_id(node, number, stamp)`, from a
//! connection named `citus_internal gpid=N`. BEGIN takes no admission
//! (docs/DESIGN.md §4): the block's first gated statement decides whether the
//! block rides. Recognised here:
//! - in a session whose `application_name` has Citus's internal form, a
//!   first statement that is exactly a call of Citus's own
//!   `assign_distributed_transaction_id` (the function is the `citus`
//!   extension's member) with constant arguments, inside the block, lets
//!   the rest of the transaction through, if the session's peer is one
//!   that `pg_gatekeeper.citus_peers` trusts (`peer`; by default the
//!   nodes in `pg_dist_node`). Any other first statement, or any other
//!   peer, is gated like any client's;
//! - a superuser session with the internal name (Citus's maintenance and
//!   deadlock-detection connections) is not gated even with
//!   `exempt_superusers = off`: a superuser can turn the gate off anyway.
//! - a session with the internal name, from a trusted peer, whose global
//!   PID names this node and a process of it that holds an admission or is
//!   exempt, rides on it statement by statement: Citus's shard tasks from a
//!   node to itself (`serves_local_holder`).
//!
//! The name and the call are what Citus itself trusts: Citus decides that
//! a backend is internal from its application name alone, and grants
//! `assign_distributed_transaction_id` to every role, so any client can do
//! both. The peer's address is what a client cannot choose: a client
//! connecting from elsewhere than a node is gated like any other, on the
//! coordinator and on the workers alike. One on a node's host, connecting
//! from that address, still passes; README "Running on Citus" says how to
//! narrow that (pg_hba.conf, `citus_peers`).
//!
//! Other autocommit statements that Citus sends outside a distributed
//! transaction (single-shard reads and writes outside a block, tasks from
//! other nodes) carry no transaction id and are gated like any client's:
//! they hold no locks while they wait.
//! Nothing here needs Citus to build or load: it is all run-time lookups.

use std::cell::Cell;
use std::ffi::CStr;

use gatekeeper_core::SlotState;
use pgrx::pg_sys::{self, NodeTag, Oid};

use crate::backend_local::BackendLocal;

/// The application-name prefix of Citus's executor connections.
const INTERNAL_PREFIX: &[u8] = b"citus_internal gpid=";
/// The prefixes of every connection Citus opens between nodes (executor,
/// rebalancer, run_command_on_*), for the superuser rule.
const ANY_PREFIX: [&[u8]; 3] = [INTERNAL_PREFIX, b"citus_rebalancer gpid=", b"citus_run_command gpid="];
const EXTENSION: &CStr = c"citus";
const ASSIGN: &CStr = c"assign_distributed_transaction_id";

/// The OID of Citus's `assign_distributed_transaction_id` last verified in
/// this session (a member of the `citus` extension).
static ASSIGN_OID: BackendLocal<Cell<Oid>> = BackendLocal::new(Cell::new(pg_sys::InvalidOid));

/// The global PID in an application name of the form `<prefix><digits>`,
/// as Citus parses it (a leading number, not zero).
fn global_pid(name: &[u8], prefix: &[u8]) -> Option<u64> {
    let rest = name.strip_prefix(prefix)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse::<u64>().ok().filter(|&g| g != 0)
}

/// This session's application name.
fn application_name() -> &'static [u8] {
    // SAFETY: application_name is a GUC string, NUL-terminated, owned by the
    // GUC machinery; it is read within the call (never kept).
    unsafe {
        let p = pg_sys::application_name;
        if p.is_null() {
            return b"";
        }
        CStr::from_ptr(p).to_bytes()
    }
}

/// Whether this session is named like Citus's executor connections.
fn named_internal() -> bool {
    global_pid(application_name(), INTERNAL_PREFIX).is_some()
}

/// Whether this session is a superuser's connection named as one of
/// Citus's between nodes: never gated. Needs a transaction.
pub fn is_internal_superuser() -> bool {
    let name = application_name();
    // SAFETY: superuser() reads the current user's role through syscache,
    // inside a transaction.
    ANY_PREFIX.iter().any(|p| global_pid(name, p).is_some()) && unsafe { pg_sys::superuser() }
}

/// Citus's global PIDs are the node id times this, plus the process id
/// (`GLOBAL_PID_NODE_ID_MULTIPLIER`).
const GLOBAL_PID_NODE_ID_MULTIPLIER: u64 = 10_000_000_000;

/// Whether this session is one of Citus's connections serving a process of
/// this node that holds an admission here or is exempt: a loopback shard
/// task. A multi-shard statement outside a transaction block, on a node
/// that holds shards itself, sends its local tasks over connections to
/// this same node, named with its global PID; queued, they would wait
/// behind the holders that wait for them. They ride on that process's
/// admission, as a distributed transaction's work rides on its
/// (docs/DESIGN.md §14): when the global PID's node is this node, and the
/// peer is one `citus_peers` trusts.
pub fn serves_local_holder() -> bool {
    // The cheap test first: every admission of every session passes here.
    let Some(gpid) = global_pid(application_name(), INTERNAL_PREFIX) else {
        return false;
    };
    // Sent by this node (looked up once per session): another node's
    // process ids may be this node's too (containers).
    if crate::peer::local_node_id() != Some(gpid / GLOBAL_PID_NODE_ID_MULTIPLIER) {
        return false;
    }
    // From a peer the setting trusts (decided once per session; it may
    // read pg_dist_node and log).
    if !crate::peer::trusted() {
        return false;
    }
    let Ok(pid) = i32::try_from(gpid % GLOBAL_PID_NODE_ID_MULTIPLIER) else {
        return false;
    };
    // SAFETY: MyProcPid is set at process start; BackendPidGetProc takes
    // ProcArrayLock itself and returns null or an entry of allProcs.
    let procno = unsafe {
        if pid == pg_sys::MyProcPid {
            return false;
        }
        let proc_ = pg_sys::BackendPidGetProc(pid);
        if proc_.is_null() {
            return false;
        }
        crate::procs::number(proc_)
    };
    crate::shmem::with_gate_shared(|l| {
        l.gate
            .slots()
            .get(procno)
            .is_some_and(|s| s.pid == pid && matches!(s.state, SlotState::Admitted | SlotState::Exempt))
    })
}

/// Whether `query`, about to be admitted, starts a distributed
/// transaction's work on this node: then the transaction rides on that
/// transaction's admission.
///
/// # Safety
/// `query` must be a valid analysed Query.
pub unsafe fn starts_distributed_transaction(query: *mut pg_sys::Query) -> bool {
    // The cheap tests first: every gated statement of every session that
    // holds no admission yet passes here.
    // SAFETY: IsTransactionBlock reads backend-local state.
    if !named_internal() || !unsafe { pg_sys::IsTransactionBlock() } {
        return false;
    }
    // SAFETY: per the caller.
    match unsafe { assignment_call(query) } {
        // The peer last: it may read pg_dist_node (once per session).
        Some(funcid) => is_assign_function(funcid) && crate::peer::trusted(),
        None => false,
    }
}

/// The function a `SELECT f(const, ...)` with nothing else in it calls.
///
/// SAFETY: `query` must be a valid analysed Query.
unsafe fn assignment_call(query: *mut pg_sys::Query) -> Option<Oid> {
    // SAFETY: per the caller; every cast below matches the node's tag.
    unsafe {
        let q = &*query;
        let plain = q.commandType == pg_sys::CmdType::CMD_SELECT
            && q.utilityStmt.is_null()
            && q.rtable.is_null()
            && q.cteList.is_null()
            && !q.hasSubLinks
            && !q.hasAggs
            && !q.hasWindowFuncs
            && !q.hasTargetSRFs
            && (q.jointree.is_null() || ((*q.jointree).fromlist.is_null() && (*q.jointree).quals.is_null()));
        if !plain || q.targetList.is_null() || (*q.targetList).length != 1 {
            return None;
        }
        let te = (*(*q.targetList).elements).ptr_value as *mut pg_sys::TargetEntry;
        let expr = (*te).expr as *mut pg_sys::Node;
        if (*expr).type_ != NodeTag::T_FuncExpr {
            return None;
        }
        let f = &*(expr as *mut pg_sys::FuncExpr);
        let args = f.args;
        let n = if args.is_null() { 0 } else { (*args).length };
        let constant = (0..n).all(|k| constant((*(*args).elements.add(k as usize)).ptr_value as *mut pg_sys::Node));
        (constant && !f.funcretset).then_some(f.funcid)
    }
}

/// A constant as parse analysis leaves it: a Const, or a built-in implicit
/// cast of one (Citus's transaction number is an integer literal that
/// becomes `int8` that way; the planner folds it later).
///
/// SAFETY: `node` must be a valid expression node.
unsafe fn constant(node: *mut pg_sys::Node) -> bool {
    // SAFETY: per the caller; the cast matches the node's tag.
    unsafe {
        match (*node).type_ {
            NodeTag::T_Const => true,
            NodeTag::T_FuncExpr => {
                let f = &*(node as *mut pg_sys::FuncExpr);
                f.funcformat == pg_sys::CoercionForm::COERCE_IMPLICIT_CAST
                    && u32::from(f.funcid) < pg_sys::FirstNormalObjectId
                    && !f.args.is_null()
                    && (*f.args).length == 1
                    && (*(*(*f.args).elements).ptr_value.cast::<pg_sys::Node>()).type_ == NodeTag::T_Const
            }
            _ => false,
        }
    }
}

/// Whether `funcid` is Citus's `assign_distributed_transaction_id`: that
/// name, and a member of the `citus` extension. Needs a transaction.
fn is_assign_function(funcid: Oid) -> bool {
    if ASSIGN_OID.with(|c| c.get()) == funcid {
        return true;
    }
    // SAFETY: syscache and index lookups (pg_proc, pg_extension, pg_depend)
    // inside a transaction; get_func_name returns a palloc'd copy or null.
    let ok = unsafe {
        let name = pg_sys::get_func_name(funcid);
        let named = !name.is_null() && CStr::from_ptr(name) == ASSIGN;
        named && {
            let citus = pg_sys::get_extension_oid(EXTENSION.as_ptr(), true);
            citus != pg_sys::InvalidOid && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, funcid) == citus
        }
    };
    if ok {
        ASSIGN_OID.with(|c| c.set(funcid));
    }
    ok
}
