//! Whether this session's peer may open Citus's internal transactions
//! without the gate (`pg_gatekeeper.citus_peers`, `gatekeeper_core::peers`).
//!
//! Decided once per session, and again after a reload changed the setting:
//! a connection's peer does not change, and the lookup reads
//! `pg_dist_node` and may resolve host names, so it is kept off the path of
//! every transaction. Only sessions that work as Citus's connections between
//! nodes do (`citus::starts_distributed_transaction`,
//! `citus::serves_local_holder`) ever ask.

use std::cell::Cell;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

use gatekeeper_core::peers::{self, Origin};
use pgrx::pg_sys::{self, Oid};

use crate::backend_local::BackendLocal;
use crate::gucs;

unsafe extern "C" {
    /// src/peer.c: 0 no client, 1 Unix socket, 4 IPv4, 6 IPv6, 2 other.
    fn gk_peer_address(addr: *mut u8) -> i32;
}

/// The verdict for this session and the `citus_peers` generation it was
/// reached under.
static TRUSTED: BackendLocal<Cell<Option<(bool, u64)>>> = BackendLocal::new(Cell::new(None));

/// Whether this session's peer is trusted with Citus's internal form.
/// Needs a transaction (the `nodes` entry reads `pg_dist_node`).
///
/// Logs, once per decision, a peer that is refused: a node whose
/// connections come from an address `citus_peers` does not cover has its
/// distributed transactions gated on this node, which makes them slow
/// (queued behind their own work, freed by the progress guarantee), and the
/// log line says why. Called with no borrow held and nothing half done
/// (a logged message serves interrupts).
pub fn trusted() -> bool {
    let generation = gucs::citus_peers_generation();
    if let Some((v, g)) = TRUSTED.with(|t| t.get()) {
        if g == generation {
            return v;
        }
    }
    let list = gucs::citus_peers();
    let from = origin();
    let verdict = from.is_some_and(|o| list.trusts(o) || (list.names_nodes() && is_node(o)));
    TRUSTED.with(|t| t.set(Some((verdict, generation))));
    if !verdict {
        let what = match from {
            None => "a process without a client connection".to_string(),
            Some(Origin::Local) => "a Unix-domain socket".to_string(),
            Some(Origin::Address(ip)) => ip.to_string(),
        };
        pgrx::log!(
            "pg_gatekeeper: process {} works as Citus's connections between nodes do, but its peer ({what}) is not in pg_gatekeeper.citus_peers; it is gated like any client",
            // SAFETY: MyProcPid is set at process start.
            unsafe { pg_sys::MyProcPid }
        );
    }
    verdict
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

/// Whether `from` is one of the nodes in this database's `pg_dist_node`:
/// a node registered by address matches that address, one registered by
/// host name every address the name resolves to (as pg_hba.conf's host
/// names do), and one registered by a socket directory (a name starting
/// with `/`) matches Unix-socket peers.
fn is_node(from: Origin) -> bool {
    let names = node_names();
    if from == Origin::Local {
        return names.iter().any(|n| n.starts_with('/'));
    }
    let mut addresses = vec![];
    for name in names.iter().filter(|n| !n.starts_with('/')) {
        match name.parse::<IpAddr>() {
            Ok(ip) => addresses.push(ip),
            // A name that does not resolve contributes nothing: the node it
            // names cannot connect from it either.
            Err(_) => addresses.extend((name.as_str(), 0).to_socket_addrs().into_iter().flatten().map(|s| s.ip())),
        }
    }
    peers::is_node(from, &addresses)
}

/// The `nodename` of every row of `pg_catalog.pg_dist_node`; none without Citus.
fn node_names() -> Vec<String> {
    let mut names = vec![];
    // SAFETY: catalog lookups and a heap scan inside a transaction, as Citus
    // itself reads pg_dist_node (systable_beginscan without an index, the
    // catalog snapshot). The relation is opened and closed here; every
    // tuple is read while the scan holds it, and text_to_cstring returns a
    // palloc'd copy, freed after it is copied out.
    unsafe {
        let relid = pg_sys::get_relname_relid(c"pg_dist_node".as_ptr(), Oid::from(pg_sys::PG_CATALOG_NAMESPACE));
        if relid == pg_sys::InvalidOid {
            return names;
        }
        let attnum = pg_sys::get_attnum(relid, c"nodename".as_ptr());
        if attnum == pg_sys::InvalidAttrNumber as pg_sys::AttrNumber {
            return names;
        }
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(relid, lock);
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
                let s = pg_sys::text_to_cstring(d.cast_mut_ptr());
                names.push(CStr::from_ptr(s).to_string_lossy().into_owned());
                pg_sys::pfree(s.cast());
            }
        }
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, lock);
    }
    names
}
