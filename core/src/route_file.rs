//! The text of the routes file (docs/DESIGN.md §15): the DBA's routes of
//! query shapes, kept across restarts. The extension rewrites the file
//! whenever a route is set or ended and reads it back when the postmaster
//! lays out shared memory; this module only turns routes into text and
//! back.
//!
//! The format is one header line, then one line per route:
//!
//! ```text
//! pg_gatekeeper routes 1
//! <database oid> <query id> <class> <until, microseconds; 0: for good>
//! ```
//!
//! Query ids are written as the unsigned 64-bit numbers the table keeps;
//! `until` is on PostgreSQL's timestamp clock, so a route for a while
//! survives a restart only while it has time left.

use crate::classes::{self, ClassName};
use crate::shapes::{Shape, Shapes};

/// The first line of every routes file this version writes and reads.
pub const HEADER: &str = "pg_gatekeeper routes 1";

/// The most bytes a line of [`encode_to`] takes: a database OID, a query id,
/// a class name of at most 63 bytes and a time, with their separators.
pub const MAX_LINE_BYTES: usize = 10 + 1 + 20 + 1 + classes::MAX_NAME + 1 + 19 + 1;
/// The most routes a file holds: one per shape entry, and
/// `pg_gatekeeper.max_shapes` is at most a million.
pub const MAX_ROUTES: usize = 1_000_000;
/// The largest file [`encode_to`] writes. A larger one is no routes file of
/// ours, and is not read into memory.
pub const MAX_FILE_BYTES: usize = HEADER.len() + 1 + MAX_ROUTES * MAX_LINE_BYTES;

/// One route, as the file keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub db: u32,
    pub query_id: u64,
    pub class: ClassName,
    /// Until when (microseconds); 0: for good.
    pub until_us: i64,
}

/// What a file held: the routes still in force, and how many lines could
/// not be read or kept (the caller reports them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub routes: Vec<Route>,
    pub expired: usize,
    pub bad_lines: usize,
    /// Routes of queries beyond the first `max_routes`, not kept.
    pub over: usize,
}

/// The routes in force among the table's entries. The caller holds the
/// gate's lock, and a table may have a million entries: the copy is
/// reserved fallibly, so that running out of memory is an error to report
/// rather than an abort with the lock held.
pub fn in_force(entries: &[Shape], now_us: i64) -> Result<Vec<Route>, std::collections::TryReserveError> {
    let routed = || entries.iter().filter(|s| Shapes::routed_now(s, now_us));
    let mut out = Vec::new();
    out.try_reserve_exact(routed().count())?;
    out.extend(routed().map(|s| Route { db: s.db, query_id: s.query_id, class: s.route, until_us: s.route_until_us }));
    Ok(out)
}

/// Write the file's text for `routes` to `out`, line by line: a million
/// routes' text is never held whole.
pub fn encode_to(out: &mut impl std::io::Write, routes: &[Route]) -> std::io::Result<()> {
    writeln!(out, "{HEADER}")?;
    for r in routes {
        writeln!(out, "{} {} {} {}", r.db, r.query_id, r.class.as_str(), r.until_us)?;
    }
    Ok(())
}

fn line(l: &str) -> Option<Route> {
    let mut f = l.split_ascii_whitespace();
    let r = Route {
        db: f.next()?.parse().ok()?,
        query_id: f.next()?.parse().ok().filter(|&q: &u64| q != 0)?,
        class: f.next().filter(|&c| classes::is_valid_name(c)).map(ClassName::new)?,
        until_us: f.next()?.parse().ok().filter(|&u: &i64| u >= 0)?,
    };
    f.next().is_none().then_some(r)
}

/// Read a file's text. Routes whose time ran out by `now_us` are left out
/// and counted. A query's later line replaces its earlier one, in the
/// earlier one's place (as setting its route again would). At most
/// `max_routes` queries' routes are kept (the table cannot hold more), the
/// rest counted: the file's byte bound alone would let short lines decode
/// to over ten times [`MAX_ROUTES`], in the postmaster. A text without the
/// header is refused whole: it is not a routes file of this version.
pub fn decode(text: &str, now_us: i64, max_routes: usize) -> Result<Decoded, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim_end() == HEADER => {}
        Some(h) => {
            return Err(format!("its first line is \"{}\", not \"{HEADER}\"", h.chars().take(40).collect::<String>()))
        }
        None => return Err("it is empty".into()),
    }
    let mut d = Decoded::default();
    let mut at = std::collections::HashMap::new();
    for l in lines.filter(|l| !l.trim().is_empty()) {
        match line(l) {
            Some(r) if r.until_us != 0 && r.until_us <= now_us => d.expired += 1,
            Some(r) => match at.entry((r.db, r.query_id)) {
                std::collections::hash_map::Entry::Occupied(e) => d.routes[*e.get()] = r,
                std::collections::hash_map::Entry::Vacant(_) if d.routes.len() >= max_routes => d.over += 1,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(d.routes.len());
                    d.routes.push(r);
                }
            },
            None => d.bad_lines += 1,
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's text for `routes`, as [`encode_to`] writes it.
    fn encode(routes: &[Route]) -> String {
        let mut out = Vec::new();
        encode_to(&mut out, routes).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn route(db: u32, q: u64, class: &str, until_us: i64) -> Route {
        Route { db, query_id: q, class: ClassName::new(class), until_us }
    }

    #[test]
    fn routes_in_force_survive_the_round_trip() {
        let mut v = vec![Shape::default(); 64];
        let mut t = Shapes::new(&mut v);
        t.route(5, u64::MAX, ClassName::new("long"), 0, 10).unwrap();
        t.route(5, 7, ClassName::new("reports_2"), 5_000, 10).unwrap();
        t.route(6, 8, ClassName::new("default"), 20, 10).unwrap();
        t.route(6, 9, ClassName::new("long"), 0, 10).unwrap();
        assert!(t.unroute(6, 9, 10));
        // A shape the gate learned, with no route, is not written.
        t.record(6, 10, 11, 4_000_000, true, 10);
        let mut want = vec![route(5, u64::MAX, "long", 0), route(5, 7, "reports_2", 5_000), route(6, 8, "default", 20)];
        let mut got = in_force(t.entries(), 15).unwrap();
        got.sort_by_key(|r| r.query_id);
        want.sort_by_key(|r| r.query_id);
        assert_eq!(got, want);
        // Read back later: the route that ran out at 20 is counted, not kept.
        let d = decode(&encode(&got), 20, MAX_ROUTES).unwrap();
        let mut back = d.routes.clone();
        back.sort_by_key(|r| r.query_id);
        want.retain(|r| r.query_id != 8);
        assert_eq!((back, d.expired, d.bad_lines), (want, 1, 0));
        // Nothing in force: the header alone.
        assert_eq!(encode(&in_force(t.entries(), 10_000).unwrap()), format!("{HEADER}\n{} {} long 0\n", 5, u64::MAX));
    }

    #[test]
    fn the_longest_line_fits_the_bound() {
        let r = Route {
            db: u32::MAX,
            query_id: u64::MAX,
            class: ClassName::new(&"a".repeat(classes::MAX_NAME)),
            until_us: i64::MAX,
        };
        let text = encode(&[r]);
        assert_eq!(text.len(), HEADER.len() + 1 + MAX_LINE_BYTES);
        assert_eq!(decode(&text, 0, MAX_ROUTES).unwrap().routes, vec![r]);
    }

    #[test]
    fn a_later_line_of_the_same_query_replaces_the_earlier_in_its_place() {
        let text = format!("{HEADER}\n1 42 long 0\n1 43 long 0\n2 42 long 0\n1 42 reports 500\n");
        let d = decode(&text, 1, MAX_ROUTES).unwrap();
        assert_eq!(d.routes, vec![route(1, 42, "reports", 500), route(1, 43, "long", 0), route(2, 42, "long", 0)]);
    }

    #[test]
    fn no_more_queries_are_kept_than_the_table_holds() {
        // Short lines: the byte bound allows ten times MAX_ROUTES of them.
        assert!((MAX_FILE_BYTES - HEADER.len()) / "1 1 a 0\n".len() > 10 * MAX_ROUTES);
        // Past the cap a kept query's line still replaces its route; a new
        // query's is counted.
        let text =
            format!("{HEADER}\n1 42 long 0\n1 43 long 0\n1 44 long 0\n1 42 reports 0\n1 45 long 5\n1 44 long 1\n");
        let d = decode(&text, 1, 2).unwrap();
        assert_eq!(d.routes, vec![route(1, 42, "reports", 0), route(1, 43, "long", 0)]);
        assert_eq!((d.over, d.expired, d.bad_lines), (2, 1, 0));
        assert_eq!(decode(&text, 1, 0).unwrap().over, 5);
    }

    #[test]
    fn damaged_lines_are_counted_and_a_foreign_file_refused() {
        let text = format!(
            "{HEADER}\n1 42 long 0\n\n1 0 long 0\n1 43 Long 0\n1 44 long -5\n1 45 long 0 extra\nx 46 long 0\n1 47\n1 49 9a 0\n2 48 a_b9 99\n"
        );
        let d = decode(&text, 1, MAX_ROUTES).unwrap();
        assert_eq!(d.routes, vec![route(1, 42, "long", 0), route(2, 48, "a_b9", 99)]);
        assert_eq!((d.expired, d.bad_lines), (0, 7));
        assert!(decode("", 0, MAX_ROUTES).unwrap_err().contains("empty"));
        assert!(decode("pg_gatekeeper routes 2\n1 42 long 0\n", 0, MAX_ROUTES).unwrap_err().contains("routes 2"));
        let long_name = format!("{HEADER}\n1 42 {} 0\n", "a".repeat(64));
        assert_eq!(decode(&long_name, 0, MAX_ROUTES).unwrap().bad_lines, 1);
    }
}
