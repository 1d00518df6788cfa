//! Citus: the connections Citus opens between the nodes of a cluster.
//!
//! A client's work is admitted once, at the node its client connects to.
//! The connections Citus then opens into other nodes (and into this one)
//! serve work that is already admitted there: the transactions of a
//! distributed transaction, and the shard tasks of a statement outside one
//! (a multi-shard read, a single-shard statement). Queued behind the work
//! they serve, they would form wait cycles that run through two gates,
//! which neither PostgreSQL's nor Citus's deadlock detector sees: a
//! distributed transaction idle in transaction on one worker, queued on
//! another; a node's own shard tasks behind the holders that wait for
//! them; with clients on several nodes, each node's holders waiting for
//! tasks queued behind the other's. So every transaction of such a
//! connection rides on the admission of the work it serves, and is not
//! gated here (`rides`).
//!
//! Citus names every executor connection `citus_internal gpid=N`. That
//! name is what Citus itself trusts (it decides that a backend is internal
//! from its application name alone), and any client can set it. The
//! peer's address is what a client cannot choose: a session with that
//! name rides only from a peer that `pg_gatekeeper.citus_peers` trusts
//! (`peer`; by default the nodes in `pg_dist_node`). A client connecting
//! from elsewhere than a node is gated like any other, on the coordinator
//! and on the workers alike. One on a node's host, connecting from that
//! address or over loopback, still passes; README "Running on Citus" says
//! how to narrow that (pg_hba.conf, `citus_peers`).
//!
//! A superuser session named as one of Citus's connections between nodes
//! (Citus's maintenance and deadlock-detection connections, the
//! rebalancer's, `run_command_on_*`'s) is not gated even with
//! `exempt_superusers = off`: a superuser can turn the gate off anyway.
//! Nothing here needs Citus to build or load: it is all run-time lookups.

use std::cell::Cell;
use std::ffi::CStr;

use pgrx::pg_sys;

use crate::backend_local::BackendLocal;

/// The application-name prefix of Citus's executor connections.
const INTERNAL_PREFIX: &[u8] = b"citus_internal gpid=";
/// The prefixes of every connection Citus opens between nodes (executor,
/// rebalancer, run_command_on_*), for the superuser rule.
const ANY_PREFIX: [&[u8]; 3] = [INTERNAL_PREFIX, b"citus_rebalancer gpid=", RUN_COMMAND_PREFIX];

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

/// Whether this session is named like Citus's executor connections. The
/// names of `run_command_on_*`'s and the rebalancer's connections do not
/// ride: `master_run_on_worker`, executable by PUBLIC, opens one connection
/// per element of the arrays its caller passes, to any node and port
/// (`localhost` included), each running the caller's SQL; riding, one
/// admission would start any number of ungated transactions.
fn named_internal() -> bool {
    global_pid(application_name(), INTERNAL_PREFIX).is_some()
}

/// The name Citus gives `run_command_on_*`'s connections: with a global
/// PID since Citus 11.2 (`citus_run_command gpid=N`), without one before,
/// so the name's start alone is what counts.
const RUN_COMMAND_PREFIX: &[u8] = b"citus_run_command";

/// This session has been seen named as `run_command_on_*`'s connection.
static RAN_COMMANDS: BackendLocal<Cell<bool>> = BackendLocal::new(Cell::new(false));

/// Look at the session's name: once seen named as `run_command_on_*`'s
/// connection, it never rides. Called after every utility statement (a
/// SET, RESET or DISCARD among them) and at every admission.
///
/// Those connections start under the executor's name, like every
/// connection Citus opens, and Citus renames them with a `SET` of its own,
/// run before the caller's SQL. That SQL could name the session back
/// (`RESET application_name`, or `set_config('application_name', NULL,
/// false)` inside a query), and its next statement would ride; seen
/// renamed after Citus's `SET`, the session stays gated whatever name it
/// takes next.
pub fn note_name() {
    if !RAN_COMMANDS.with(Cell::get) && application_name().starts_with(RUN_COMMAND_PREFIX) {
        RAN_COMMANDS.with(|r| r.set(true));
    }
}

/// Whether this session is a superuser's connection named as one of
/// Citus's between nodes: never gated. Needs a transaction.
pub fn is_internal_superuser() -> bool {
    let name = application_name();
    // SAFETY: superuser() reads the current user's role through syscache,
    // inside a transaction.
    ANY_PREFIX.iter().any(|p| global_pid(name, p).is_some()) && unsafe { pg_sys::superuser() }
}

/// Whether this session is one of Citus's connections between nodes,
/// from a peer that `pg_gatekeeper.citus_peers` trusts: its transactions
/// ride on the admission of the work they serve, whatever they run.
/// Needs a transaction (the `nodes` entry reads `pg_dist_node`). Called
/// with no borrow held and nothing half done: the peer's verdict may log.
pub fn rides() -> bool {
    // The cheap tests first: every admission of every session passes here.
    // The peer's verdict is reached once per session.
    note_name();
    named_internal() && !RAN_COMMANDS.with(Cell::get) && crate::peer::trusted()
}
