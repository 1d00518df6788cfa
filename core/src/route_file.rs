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
#[cfg(test)]
use crate::shapes::ANY_ROLE;
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
/// earlier one's place (as setting its route again would); a later line
/// that ran out ends it. The extension writes a query once: more are a
/// hand-edited file's. At most
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
    // Each query's place in `kept`; None once a later line of it ran out.
    let mut kept: Vec<Option<Route>> = Vec::new();
    let mut at = std::collections::HashMap::new();
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let Some(r) = line(l) else {
            d.bad_lines += 1;
            continue;
        };
        let ran_out = r.until_us != 0 && r.until_us <= now_us;
        if ran_out {
            d.expired += 1;
        }
        match at.entry((r.db, r.query_id)) {
            std::collections::hash_map::Entry::Occupied(e) => kept[*e.get()] = (!ran_out).then_some(r),
            std::collections::hash_map::Entry::Vacant(_) if ran_out => {}
            std::collections::hash_map::Entry::Vacant(_) if kept.len() >= max_routes => d.over += 1,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(kept.len());
                kept.push(Some(r));
            }
        }
    }
    d.routes = kept.into_iter().flatten().collect();
    Ok(d)
}

/// Put `routes` into a table that holds no route yet (the postmaster's,
/// at start), returning how many found room.
///
/// The order they go in matters: each takes the first free entry of its
/// window, so a route put in early can take the entry a later one needed.
/// The file's order cannot be trusted to be the right one (a route whose
/// window wraps past the table's end sits at a low index, so a file written
/// in table order puts it in early), and a hand-edited file has any order.
/// Here they go in by the entry their window starts at, counted round the
/// table from a start no run of routes crosses. That is the layout with
/// the shortest longest distance from a route's first entry to its own, so
/// routes that all had room in the table before (a table this size, any
/// order of setting and ending them, learned shapes beside them) all find
/// room again.
///
/// The start: walking round the table from it, the routes whose window
/// starts at or before each entry are never more than the entries walked
/// (the lowest point of the running count of routes less entries, plus one,
/// as for the petrol station round a circular road), so the last route in
/// never wraps past the first.
pub fn restore(shapes: &mut Shapes, routes: &[Route], now_us: i64) -> usize {
    let n = shapes.entries().len();
    if n == 0 || routes.is_empty() {
        return 0;
    }
    let put = |shapes: &mut Shapes, r: &Route| shapes.route(r.db, r.query_id, r.class, r.until_us, now_us).is_ok();
    // A million routes take 20 MB here, in the postmaster, where running
    // out of memory in Rust would abort it: without the memory, the file's
    // order.
    let (mut homes, mut starting_at, mut order) = (Vec::new(), Vec::new(), Vec::new());
    if homes.try_reserve_exact(routes.len()).is_err()
        || starting_at.try_reserve_exact(n).is_err()
        || order.try_reserve_exact(routes.len()).is_err()
    {
        return routes.iter().filter(|r| put(shapes, r)).count();
    }
    homes.extend(routes.iter().map(|r| shapes.route_home(r.db, r.query_id)));
    starting_at.resize(n, 0u32);
    for &h in &homes {
        starting_at[h] += 1;
    }
    let (mut running, mut lowest, mut start) = (0i64, 0i64, 0usize);
    for (i, &c) in starting_at.iter().enumerate() {
        running += i64::from(c) - 1;
        if running < lowest {
            (lowest, start) = (running, i + 1);
        }
    }
    let start = start % n;
    order.extend(0..routes.len());
    order.sort_unstable_by_key(|&k| ((homes[k] + n - start) % n, k));
    order.into_iter().filter(|&k| put(shapes, &routes[k])).count()
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

    /// A small generator for the tests' random tables (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    #[test]
    fn every_route_a_table_held_finds_room_again_in_a_table_its_size() {
        // Tables filled to 25-100 % with routes by random setting and
        // ending, learned shapes beside them, then written in table order,
        // read back and restored into a fresh table of the same size. Put
        // in in the file's order, a route whose window wrapped past the
        // table's end took a later route's place (tens of losses here).
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut lost_in_file_order = 0;
        for round in 0..240 {
            let n = [64, 97, 256, 1024][round % 4];
            let fill = [25, 50, 75, 90, 100][round % 5];
            let mut v = vec![Shape::default(); n];
            let mut t = Shapes::new(&mut v);
            let mut routed = 0;
            for step in 0..n * 8 {
                if routed * 100 >= n * fill {
                    break;
                }
                let (db, q) = (1 + rng.below(3) as u32, 1 + rng.below(1 << 40));
                match rng.below(10) {
                    0 => {
                        let q = t
                            .entries()
                            .iter()
                            .find(|s| s.user == ANY_ROLE && s.query_id != 0)
                            .map(|s| (s.db, s.query_id));
                        if let Some((db, q)) = q {
                            routed -= usize::from(t.unroute(db, q, 1));
                        }
                    }
                    1 => {
                        t.record(db, 10, q, 1_000, step % 2 == 0, 1);
                    }
                    _ => routed += usize::from(t.route(db, q, ClassName::new("long"), 0, 1).is_ok()),
                }
            }
            let kept = in_force(t.entries(), 2).unwrap();
            assert_eq!(kept.len(), routed);
            let d = decode(&encode(&kept), 2, n).unwrap();
            assert_eq!(d.routes.len(), routed);
            let mut fresh = vec![Shape::default(); n];
            assert_eq!(
                restore(&mut Shapes::new(&mut fresh), &d.routes, 3),
                routed,
                "round {round}: n {n}, fill {fill} %"
            );
            let mut back = in_force(&fresh, 4).unwrap();
            let mut want = d.routes.clone();
            back.sort_by_key(|r| (r.db, r.query_id));
            want.sort_by_key(|r| (r.db, r.query_id));
            assert_eq!(back, want);
            // What the file's order did.
            let mut plain = vec![Shape::default(); n];
            let mut p = Shapes::new(&mut plain);
            lost_in_file_order += d.routes.iter().filter(|r| p.route(r.db, r.query_id, r.class, 0, 3).is_err()).count();
        }
        assert!(lost_in_file_order > 0, "the file's order lost nothing: the test no longer shows the case");
    }

    #[test]
    fn routes_that_never_fitted_are_counted_not_forced() {
        // More routes than a window holds, all starting at one entry: the
        // first PROBE find room, in a table of any size; an empty table
        // holds none.
        let mut v = vec![Shape::default(); 4096];
        let home = Shapes::new(&mut v).route_home(1, 1);
        let mut q = 1u64;
        let mut same = Vec::new();
        while same.len() < crate::shapes::PROBE + 3 {
            if Shapes::new(&mut v).route_home(1, q) == home {
                same.push(route(1, q, "long", 0));
            }
            q += 1;
        }
        assert_eq!(restore(&mut Shapes::new(&mut v), &same, 1), crate::shapes::PROBE);
        assert_eq!(restore(&mut Shapes::new(&mut []), &same, 1), 0);
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
        // A later line that ran out ends the route; a line after that sets
        // it again, and a damaged line names no query to end.
        let text = format!(
            "{HEADER}\n1 42 long 0\n1 43 long 0\n1 42 long 5\n1 44 long 0\n1 43 long 5\n1 43 long 9\n1 44 lo\n"
        );
        let d = decode(&text, 6, MAX_ROUTES).unwrap();
        assert_eq!(d.routes, vec![route(1, 43, "long", 9), route(1, 44, "long", 0)]);
        assert_eq!((d.expired, d.bad_lines, d.over), (2, 1, 0));
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
