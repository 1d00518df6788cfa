//! Whether this session's peer may do Citus's work between nodes without
//! the gate (`pg_gatekeeper.citus_peers`, `gatekeeper_core::peers`).
//!
//! [`trusted`] is decided once per session, and again after a reload that
//! changed the setting or whether `citus.local_hostname` names a socket
//! directory (a connection's peer does not change): it may read
//! `pg_dist_node` and resolve host names, so it is kept off the path of
//! every transaction. A refusal is decided again after
//! [`RETRY_REFUSAL_US`], in case it came from a name that did not resolve
//! or a `pg_dist_node` not synced yet. Only sessions named as Citus's
//! connections between nodes (`citus::rides`) ever ask, and never an
//! exempt one.

use std::cell::Cell;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

use gatekeeper_core::peers::{self, Nodes, Origin};
use pgrx::pg_sys::{self, Oid};

use crate::backend_local::BackendLocal;
use crate::gucs;

unsafe extern "C" {
    /// src/peer.c: the peer's address, by kind: 0 no client, 1 Unix
    /// socket, 4 IPv4, 6 IPv6, 2 other.
    fn gk_peer_address(addr: *mut u8) -> i32;
}

/// How long a refusal by [`trusted`] stands before it is decided again.
pub const RETRY_REFUSAL_US: i64 = 10_000_000;

/// [`trusted`]'s verdict, the `citus_peers` generation it was reached
/// under, whether `citus.local_hostname` named a socket directory then,
/// and when (`crate::mono_us`).
static TRUSTED: BackendLocal<Cell<Option<(bool, u64, bool, i64)>>> = BackendLocal::new(Cell::new(None));
/// This session has logged a refusal.
static LOGGED: BackendLocal<Cell<bool>> = BackendLocal::new(Cell::new(false));

/// Whether this session's peer may do Citus's work between nodes here
/// without the gate. Needs a transaction (the `nodes` entry reads `pg_dist_node`).
/// Called with no borrow held and nothing half done: it may log.
pub fn trusted() -> bool {
    let generation = gucs::citus_peers_generation();
    // A reload that changes citus.local_hostname (Citus's setting, which
    // the gate's generation does not follow) changes the verdict too.
    let local_socket = local_hostname().is_some_and(|h| h.starts_with(b"/"));
    // Monotonic: a step back of the wall clock must not stretch a refusal.
    let now = crate::mono_us();
    if let Some((v, g, l, at)) = TRUSTED.with(|t| t.get()) {
        if g == generation && l == local_socket && (v || now - at < RETRY_REFUSAL_US) {
            return v;
        }
    }
    let list = gucs::citus_peers();
    let from = origin();
    let verdict = from.is_some_and(|o| peers::decide(&list, o, || nodes(o, local_socket)));
    TRUSTED.with(|t| t.set(Some((verdict, generation, local_socket, now))));
    if !verdict {
        log_refusal(from);
    }
    verdict
}

/// Say once per session, in the server log, that a peer was refused: a
/// node whose connections come from an address `citus_peers` does not
/// cover has its work gated here, queued behind the work it serves, and
/// so slow; the line says why. A log call serves a terminate (cancels are
/// held): called after the verdict is recorded, with no borrow held.
fn log_refusal(from: Option<Origin>) {
    if LOGGED.with(|l| l.replace(true)) {
        return;
    }
    let what = match from {
        None => "a process without a client connection".to_string(),
        Some(Origin::Local) => "a Unix-domain socket".to_string(),
        Some(Origin::Address(ip)) => ip.to_string(),
    };
    crate::log_held!(
        "pg_gatekeeper: process {} is named as Citus's connections between nodes are, but its peer ({what}) is not in pg_gatekeeper.citus_peers; it is gated like any client",
        // SAFETY: MyProcPid is set at process start.
        unsafe { pg_sys::MyProcPid }
    );
}

/// Where this session's connection comes from; `None` for a process with
/// no client connection or a family the list cannot name.
fn origin() -> Option<Origin> {
    let mut a = [0u8; 16];
    // SAFETY: gk_peer_address writes at most 16 bytes into `a` and reads
    // MyProcPort, which is set for the life of a client backend (or null).
    match unsafe { gk_peer_address(a.as_mut_ptr()) } {
        1 => Some(Origin::Local),
        4 => Some(Origin::Address(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])))),
        6 => Some(Origin::Address(IpAddr::V6(Ipv6Addr::from(a)))),
        _ => None,
    }
}

/// The nodes in this database's `pg_dist_node`, as far as `from` needs
/// them: names that are addresses first, and only when none of those is
/// `from`, the addresses the host names resolve to (a blocking lookup, as
/// libpq's own when Citus connects to them; a name that does not resolve
/// contributes nothing).
fn nodes(from: Origin, local_socket: bool) -> Nodes {
    let names = node_names();
    // A node reaches itself through citus.local_hostname: a socket
    // directory there brings its own connections over a Unix socket.
    let local_by_socket = !names.is_empty() && local_socket;
    let mut nodes = Nodes {
        listed: !names.is_empty(),
        addresses: vec![],
        by_socket: local_by_socket || names.iter().any(|n| n.starts_with('/')),
    };
    let mut hosts = vec![];
    for name in names.iter().filter(|n| !n.starts_with('/')) {
        match name.parse::<IpAddr>() {
            Ok(ip) => nodes.addresses.push(ip),
            Err(_) => hosts.push(name),
        }
    }
    if !peers::is_node(from, &nodes) && from != Origin::Local {
        for host in hosts {
            nodes.addresses.extend((host.as_str(), 0).to_socket_addrs().into_iter().flatten().map(|s| s.ip()));
            if peers::is_node(from, &nodes) {
                break;
            }
        }
    }
    nodes
}

/// `citus.local_hostname`, the name a node connects to itself by; `None`
/// without Citus loaded.
fn local_hostname() -> Option<Vec<u8>> {
    // SAFETY: GetConfigOption returns the setting's current string, owned by
    // the GUC machinery, or NULL for an unknown one (missing_ok); it is
    // copied at once.
    unsafe {
        let p = pg_sys::GetConfigOption(c"citus.local_hostname".as_ptr(), true, false);
        (!p.is_null()).then(|| CStr::from_ptr(p).to_bytes().to_vec())
    }
}

/// The `nodename` of every row of `pg_catalog.pg_dist_node`; none without
/// Citus.
fn node_names() -> Vec<String> {
    column_values(c"pg_dist_node", c"nodename")
}

/// The values of `column` in every row of `pg_catalog.<table>` (one of
/// Citus's) that has one, as its type's output function writes them. None
/// without the table or the column (no Citus here, or while it is being
/// dropped). Needs a transaction.
fn column_values(table: &CStr, column: &CStr) -> Vec<String> {
    let mut values = vec![];
    // SAFETY: catalog lookups and a heap scan inside a transaction, as Citus
    // itself reads its tables (systable_beginscan without an index, the
    // catalog snapshot). try_table_open returns null if the relation is
    // gone; it is closed here; every tuple is read while the scan holds it,
    // and OidOutputFunctionCall returns a palloc'd string, freed after it is
    // copied out.
    unsafe {
        let relid = pg_sys::get_relname_relid(table.as_ptr(), Oid::from(pg_sys::PG_CATALOG_NAMESPACE));
        if relid == pg_sys::InvalidOid {
            return values;
        }
        // Locked first: a DROP EXTENSION citus that commits between the
        // lookups would leave a column with no type (an XX000 "cache lookup
        // failed" from getTypeOutputInfo).
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::try_table_open(relid, lock);
        if rel.is_null() {
            return values;
        }
        let attnum = pg_sys::get_attnum(relid, column.as_ptr());
        let atttype = if attnum > 0 { pg_sys::get_atttype(relid, attnum) } else { pg_sys::InvalidOid };
        if atttype == pg_sys::InvalidOid {
            pg_sys::table_close(rel, lock);
            return values;
        }
        let (mut output, mut varlena) = (pg_sys::InvalidOid, false);
        pg_sys::getTypeOutputInfo(atttype, &mut output, &mut varlena);
        let scan =
            pg_sys::systable_beginscan(rel, pg_sys::InvalidOid, false, std::ptr::null_mut(), 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, attnum.into(), (*rel).rd_att, &mut isnull);
            if !isnull {
                let s = pg_sys::OidOutputFunctionCall(output, d);
                values.push(CStr::from_ptr(s).to_string_lossy().into_owned());
                pg_sys::pfree(s.cast());
            }
        }
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, lock);
    }
    values
}
