//! `pg_gatekeeper.citus_peers`: which peers may do Citus's work between
//! nodes on this node without the gate.
//!
//! The connections Citus opens between nodes serve work already admitted
//! where its client connected, and ride on that admission
//! (docs/DESIGN.md §14). Citus marks such connections by their application
//! name alone, which any client can set; the peer's address is what a
//! client cannot choose. The setting lists the peers trusted with that
//! name, pg_hba.conf style:
//! - `nodes`: the addresses of the nodes in this database's `pg_dist_node`,
//!   and loopback peers (this host) while there are any;
//! - `local`: connections over a Unix-domain socket;
//! - `*`: any peer;
//! - an IPv4 or IPv6 address, alone or as a CIDR range (`10.0.0.0/24`).
//!
//! Parsing and address matching live here; finding the peer's address and
//! the nodes' addresses is the glue's.

use std::net::IpAddr;

/// One entry of the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// `*`: any peer.
    Any,
    /// `local`: a Unix-domain socket.
    Local,
    /// `nodes`: the nodes of the Citus cluster.
    Nodes,
    /// An address range: the address with its host bits cleared, and the
    /// prefix length.
    Net(IpAddr, u8),
}

/// The parsed list. An empty list trusts no peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers(pub Vec<Peer>);

/// Where a connection comes from, as far as the list is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A Unix-domain socket.
    Local,
    /// A TCP peer.
    Address(IpAddr),
}

/// The most entries the list may hold.
pub const MAX_ENTRIES: usize = 64;

/// Parse a `citus_peers` value: entries separated by commas, spaces around
/// them ignored, keywords in any case.
pub fn parse(text: &str) -> Result<Peers, String> {
    if text.trim().is_empty() {
        return Ok(Peers::default());
    }
    let mut out = vec![];
    for raw in text.split(',') {
        let entry = raw.trim();
        if entry.is_empty() {
            return Err("An entry of the list is empty.".into());
        }
        let peer = match entry.to_ascii_lowercase().as_str() {
            "*" => Peer::Any,
            "local" => Peer::Local,
            "nodes" => Peer::Nodes,
            _ => net(entry)?,
        };
        if !out.contains(&peer) {
            // Refused as soon as it is too long: the duplicate check above
            // costs the square of the entries kept.
            if out.len() == MAX_ENTRIES {
                return Err(format!(
                    "The list has more than {MAX_ENTRIES} entries; at most {MAX_ENTRIES} are allowed."
                ));
            }
            out.push(peer);
        }
    }
    Ok(Peers(out))
}

/// An address or a CIDR range.
fn net(entry: &str) -> Result<Peer, String> {
    let (addr, bits) = match entry.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (entry, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("\"{entry}\" is not an IP address, a CIDR range, \"nodes\", \"local\" or \"*\"."))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        // Digits only: Rust's parse would also take a leading '+'.
        Some(b) => match b.parse::<u8>() {
            Ok(n) if n <= max && b.bytes().all(|c| c.is_ascii_digit()) => n,
            _ => return Err(format!("\"{entry}\": the prefix length must be 0 to {max}.")),
        },
    };
    // An IPv4-mapped range (`::ffff:10.0.0.0/104`) is the IPv4 range it
    // maps; one wider than the mapped space would mix the families.
    let (ip, bits) = match (ip, canonical(ip)) {
        (IpAddr::V6(_), v4 @ IpAddr::V4(_)) if bits >= 96 => (v4, bits - 96),
        (IpAddr::V6(_), IpAddr::V4(_)) => {
            return Err(format!("\"{entry}\": an IPv4-mapped range needs a prefix length of 96 to 128."));
        }
        _ => (ip, bits),
    };
    Ok(Peer::Net(masked(ip, bits), bits))
}

/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`, what a dual-stack socket
/// reports for an IPv4 peer) compare as the IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `bits` bits cleared.
fn masked(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl Peers {
    /// Whether the list names `nodes` (the glue then looks the nodes up).
    pub fn names_nodes(&self) -> bool {
        self.0.contains(&Peer::Nodes)
    }

    /// Whether a connection from `from` is trusted without looking at the
    /// cluster's nodes: `*`, `local` for a socket, or a listed range.
    pub fn trusts(&self, from: Origin) -> bool {
        self.0.iter().any(|p| match (p, from) {
            (Peer::Any, _) => true,
            (Peer::Local, Origin::Local) => true,
            (Peer::Net(net, bits), Origin::Address(ip)) => {
                let ip = canonical(ip);
                ip.is_ipv4() == net.is_ipv4() && masked(ip, *bits) == *net
            }
            _ => false,
        })
    }
}

/// The nodes of the cluster, as `pg_dist_node` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nodes {
    /// `pg_dist_node` lists some node, whatever its name resolves to.
    pub listed: bool,
    /// Their addresses: those given as addresses, and those that their
    /// host names resolve to.
    pub addresses: Vec<IpAddr>,
    /// Some node is registered by a socket directory (a name starting with
    /// `/`), or this node reaches itself through one
    /// (`citus.local_hostname`): those connections arrive over Unix-domain
    /// sockets.
    pub by_socket: bool,
}

/// Whether `from` is one of the nodes. A loopback peer is this host, and
/// so a node whenever the cluster has nodes at all: every node reaches
/// itself through `citus.local_hostname` (`localhost` by default) for its
/// rebalancer's commands, `run_command_on_all_nodes` and the executor's
/// local placeholder, whatever address `pg_dist_node` gives it; and a node
/// registered on a loopback address is reached from 127.0.0.1, the source
/// Linux gives every connection into 127.0.0.0/8. So a loopback peer needs
/// no host name resolved: a cluster registered by names that do not
/// resolve at this moment still trusts its own connections.
pub fn is_node(from: Origin, nodes: &Nodes) -> bool {
    match from {
        Origin::Local => nodes.by_socket,
        Origin::Address(ip) => {
            let ip = canonical(ip);
            (ip.is_loopback() && (nodes.listed || nodes.by_socket || !nodes.addresses.is_empty()))
                || nodes.addresses.iter().any(|n| canonical(*n) == ip)
        }
    }
}

/// The verdict for a peer that does Citus's work between nodes: trusted
/// by an entry of the list, or, where the list names `nodes`, one of the
/// nodes. `nodes` is called only when the entries did not decide
/// (it reads the catalog and may resolve host names).
pub fn decide(list: &Peers, from: Origin, nodes: impl FnOnce() -> Nodes) -> bool {
    list.trusts(from) || (list.names_nodes() && is_node(from, &nodes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn at(s: &str) -> Origin {
        Origin::Address(ip(s))
    }

    #[test]
    fn keywords_addresses_and_ranges_parse() {
        let p = parse(" Nodes, LOCAL ,*, 10.1.2.3, 10.0.0.0/8, ::1, fe80::/10 ").unwrap();
        assert_eq!(
            p.0,
            vec![
                Peer::Nodes,
                Peer::Local,
                Peer::Any,
                Peer::Net(ip("10.1.2.3"), 32),
                Peer::Net(ip("10.0.0.0"), 8),
                Peer::Net(ip("::1"), 128),
                Peer::Net(ip("fe80::"), 10),
            ]
        );
        assert!(p.names_nodes());
        assert_eq!(parse("").unwrap(), Peers::default());
        assert_eq!(parse("   ").unwrap(), Peers::default());
        // Host bits are cleared, as pg_hba.conf does; duplicates collapse.
        assert_eq!(parse("10.1.2.3/16, 10.1.0.0/16").unwrap().0, vec![Peer::Net(ip("10.1.0.0"), 16)]);
        // An IPv4-mapped address is the IPv4 address.
        assert_eq!(parse("::ffff:10.0.0.1").unwrap().0, vec![Peer::Net(ip("10.0.0.1"), 32)]);
    }

    #[test]
    fn bad_entries_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("nodes,,local", "empty"),
            ("nodes,", "empty"),
            ("example.com", "is not an IP address"),
            ("10.0.0.0/33", "0 to 32"),
            ("::/129", "0 to 128"),
            ("10.0.0.0/-1", "0 to 32"),
            ("10.0.0.0/+24", "0 to 32"),
            ("10.0.0.0/", "0 to 32"),
            ("10.0.0/8", "is not an IP address"),
            ("all", "is not an IP address"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let many: Vec<String> = (0..=MAX_ENTRIES).map(|k| format!("10.0.{}.{}", k / 256, k % 256)).collect();
        assert!(parse(&many.join(",")).unwrap_err().contains("at most"));
        assert!(parse(&many[..MAX_ENTRIES].join(",")).is_ok());
    }

    #[test]
    fn ranges_match_their_addresses_only() {
        let p = parse("10.0.0.0/8, 192.168.1.7, 2001:db8::/32").unwrap();
        assert!(p.trusts(at("10.200.3.4")));
        assert!(p.trusts(at("::ffff:10.200.3.4")));
        assert!(!p.trusts(at("11.0.0.1")));
        assert!(p.trusts(at("192.168.1.7")));
        assert!(!p.trusts(at("192.168.1.8")));
        assert!(p.trusts(at("2001:db8:ffff::1")));
        assert!(!p.trusts(at("2001:db9::1")));
        assert!(!p.trusts(Origin::Local));
        // /0 of one family is not the other family.
        let all4 = parse("0.0.0.0/0").unwrap();
        assert!(all4.trusts(at("203.0.113.9")));
        assert!(!all4.trusts(at("2001:db8::1")));
    }

    #[test]
    fn keywords_match_what_they_name() {
        assert!(parse("*").unwrap().trusts(Origin::Local));
        assert!(parse("*").unwrap().trusts(at("203.0.113.9")));
        assert!(parse("local").unwrap().trusts(Origin::Local));
        assert!(!parse("local").unwrap().trusts(at("127.0.0.1")));
        // `nodes` alone trusts nothing until the nodes are looked up.
        assert!(!parse("nodes").unwrap().trusts(at("127.0.0.1")));
        assert!(!parse("").unwrap().trusts(Origin::Local));
        assert!(!parse("").unwrap().trusts(at("127.0.0.1")));
    }

    #[test]
    fn ipv4_mapped_ranges_are_ipv4_ranges() {
        assert_eq!(parse("::ffff:10.0.0.0/104").unwrap().0, vec![Peer::Net(ip("10.0.0.0"), 8)]);
        assert_eq!(parse("::ffff:10.1.2.3/128").unwrap().0, vec![Peer::Net(ip("10.1.2.3"), 32)]);
        assert!(parse("::ffff:10.0.0.0/95").unwrap_err().contains("96 to 128"));
        assert!(parse("::ffff:10.0.0.0/104").unwrap().trusts(at("10.9.9.9")));
    }

    #[test]
    fn the_nodes_are_looked_up_only_when_the_entries_do_not_decide() {
        let nodes = || Nodes { listed: true, addresses: vec![ip("10.0.0.5")], by_socket: false };
        let never = || -> Nodes { panic!("looked up") };
        let list = parse("nodes, 192.168.0.0/16").unwrap();
        assert!(decide(&list, at("192.168.3.4"), never));
        assert!(decide(&list, at("10.0.0.5"), nodes));
        assert!(!decide(&list, at("10.0.0.6"), nodes));
        assert!(!decide(&list, Origin::Local, nodes));
        assert!(decide(&list, Origin::Local, || Nodes { listed: false, addresses: vec![], by_socket: true }));
        // Without `nodes`, the nodes do not count.
        let list = parse("192.168.0.0/16").unwrap();
        assert!(!decide(&list, at("10.0.0.5"), never));
        assert!(!decide(&Peers::default(), Origin::Local, never));
    }

    #[test]
    fn nodes_match_by_address() {
        let nodes =
            Nodes { listed: true, addresses: vec![ip("127.0.0.1"), ip("::1"), ip("10.0.0.5")], by_socket: false };
        assert!(is_node(at("127.0.0.1"), &nodes));
        assert!(is_node(at("::ffff:10.0.0.5"), &nodes));
        assert!(is_node(at("::1"), &nodes));
        assert!(!is_node(at("10.0.0.6"), &nodes));
        assert!(!is_node(Origin::Local, &nodes));
        assert!(!is_node(at("127.0.0.1"), &Nodes::default()));
        assert!(is_node(Origin::Local, &Nodes { listed: false, addresses: vec![], by_socket: true }));
        // A node on a loopback address is reached from 127.0.0.1.
        let hosts = Nodes { listed: true, addresses: vec![ip("127.0.1.1")], by_socket: false };
        assert!(is_node(at("127.0.0.1"), &hosts));
        assert!(is_node(at("::1"), &hosts));
        assert!(!is_node(at("10.0.0.1"), &hosts));
        // Nodes registered by their network addresses: a loopback peer is
        // this host, which reaches itself through citus.local_hostname.
        let lan = Nodes { listed: true, addresses: vec![ip("10.0.0.5"), ip("10.0.0.6")], by_socket: false };
        assert!(is_node(at("127.0.0.1"), &lan));
        assert!(is_node(at("::1"), &lan));
        assert!(is_node(at("::ffff:127.0.0.1"), &lan));
        assert!(!is_node(at("10.0.0.7"), &lan));
        // Nodes registered by host names that did not resolve: this host
        // is still a node, and only this host.
        let unresolved = Nodes { listed: true, addresses: vec![], by_socket: false };
        assert!(is_node(at("127.0.0.1"), &unresolved));
        assert!(is_node(at("::1"), &unresolved));
        assert!(!is_node(at("10.0.0.5"), &unresolved));
        assert!(!is_node(Origin::Local, &unresolved));
    }
}
