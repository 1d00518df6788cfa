//! Query shapes: what the gate learns about the transactions that start
//! with a given query (docs/DESIGN.md §15).
//!
//! A shape is a (database, role, query id) triple: the query id PostgreSQL
//! computes for the first statement that a transaction needs admission for
//! (the id pg_stat_statements shows), keyed by the role that ran it, as
//! pg_stat_statements keys its entries. Each transaction that ends records
//! into its shape whether it ran long (a statement of it was seen working
//! past `stall_timeout`) and how long it held its admission. From that a
//! shape is in the **long lane** or not:
//!
//! - it enters the lane at its first long run;
//! - it leaves after [`LEAVE_AFTER`] short runs in a row (hysteresis: one
//!   long report among short runs keeps it in, a shape that changed for
//!   good leaves within three runs, which it makes in the lane).
//!
//! What one role's runs teach moves only that role's transactions: no role
//! can send another's query into the lane by running the same query id
//! long.
//!
//! A DBA may also route a query id by hand to any class, for a while or for
//! good. A route is an entry of its own, for every role ([`ANY_ROLE`]), and
//! wins over what any role's runs taught.
//!
//! The table is a fixed array in shared memory (its size is a postmaster
//! setting). A key lives within [`PROBE`] entries of its hash home;
//! looking one up reads at most those. A new key takes a free entry
//! there, else the least recently seen one that has no route in force
//! (least recently used eviction within the window); when all of them are
//! routed, it is not recorded. The caller serialises every call (the
//! extension holds the gate's LWLock); this module has no locking.

use crate::classes::ClassName;

/// Entries a shape may live in, from its hash home on.
pub const PROBE: usize = 16;
/// Short runs in a row that take a shape out of the long lane.
pub const LEAVE_AFTER: u32 = 3;
/// Weight of the newest run in the smoothed run time.
const SMOOTHING: f64 = 0.2;
/// The role of a route's entry: every role (no role has OID 0).
pub const ANY_ROLE: u32 = 0;

/// One shape. Lives in shared memory; plain data. An entry with
/// `query_id == 0` is free (PostgreSQL never computes 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Shape {
    pub query_id: u64,
    /// Database OID.
    pub db: u32,
    /// The role whose transactions this entry learns from; [`ANY_ROLE`]
    /// for a route's entry, which learns nothing.
    pub user: u32,
    /// Transactions recorded.
    pub runs: u64,
    /// Of those, the ones that ran long.
    pub long_runs: u64,
    /// Transactions sent to the lane (a role's entry) or along the route
    /// (a route's entry) instead of their session's class
    /// ([`Shapes::count_routed`]).
    pub routed: u64,
    /// Short runs since the last long one (while in the lane).
    pub short_streak: u32,
    /// In the long lane.
    pub long: bool,
    /// The class a DBA routed the query id to (a route's entry); empty: none.
    pub route: ClassName,
    /// Until when the route holds (caller's clock, microseconds); 0: for good.
    pub route_until_us: i64,
    /// Smoothed time its transactions held their admission, microseconds.
    pub mean_us: f64,
    /// When a transaction of it last ended (or it was routed).
    pub last_us: i64,
    /// When it last entered the lane.
    pub entered_us: i64,
}

impl Shape {
    fn routed(&self, now_us: i64) -> bool {
        !self.route.is_empty() && (self.route_until_us == 0 || now_us < self.route_until_us)
    }
}

/// Where a shape's next transaction goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// No shape, or not long: the session's class.
    Short,
    /// The long lane.
    Long,
    /// A DBA's route to this class.
    Routed(ClassName),
}

/// What a record changed, for the caller to log once the lock is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Entered,
    Left,
}

/// Why a route could not be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// Every entry of the shape's window holds a route.
    NoRoom,
    /// Query id 0 names no shape.
    NoQueryId,
}

/// A view of the table, borrowed under the caller's lock.
pub struct Shapes<'a> {
    e: &'a mut [Shape],
}

fn home(db: u32, user: u32, query_id: u64, n: usize) -> usize {
    // splitmix64's finaliser over the whole key.
    let mut x = query_id ^ ((db as u64) << 32 | user as u64).rotate_left(17);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x % n as u64) as usize
}

impl<'a> Shapes<'a> {
    pub fn new(e: &'a mut [Shape]) -> Self {
        Shapes { e }
    }

    pub fn entries(&self) -> &[Shape] {
        self.e
    }

    /// The entry a route of the query id looks from first (its window's
    /// start).
    pub fn route_home(&self, db: u32, query_id: u64) -> usize {
        match self.e.len() {
            0 => 0,
            n => home(db, ANY_ROLE, query_id, n),
        }
    }

    /// The entry indices of a key's window.
    fn window(&self, db: u32, user: u32, query_id: u64) -> impl Iterator<Item = usize> {
        let n = self.e.len();
        let h = if n == 0 { 0 } else { home(db, user, query_id, n) };
        (0..PROBE.min(n)).map(move |k| (h + k) % n)
    }

    /// The entry of a key: a role's shape, or with [`ANY_ROLE`] the
    /// query id's route.
    pub fn find(&self, db: u32, user: u32, query_id: u64) -> Option<usize> {
        if query_id == 0 {
            return None;
        }
        self.window(db, user, query_id)
            .find(|&i| self.e[i].query_id == query_id && self.e[i].db == db && self.e[i].user == user)
    }

    /// The entry for a key, taking one for it if it has none (a free one,
    /// else the least recently seen unrouted short one, else the least
    /// recently seen long one). None when the window is all routed, or the
    /// key has no query id. A short shape's entry only counts its runs (a
    /// shape without one goes where a short one goes); a long one's is
    /// what sends its next run into the lane, and long work such as a
    /// nightly report runs seldom, so short entries go first.
    fn find_or_take(&mut self, db: u32, user: u32, query_id: u64, now_us: i64) -> Option<usize> {
        if let Some(i) = self.find(db, user, query_id) {
            return Some(i);
        }
        if query_id == 0 {
            return None;
        }
        let i = self.window(db, user, query_id).filter(|&i| !self.e[i].routed(now_us)).min_by_key(|&i| {
            let e = &self.e[i];
            // Free: never used, or an ended route's (it holds nothing).
            if e.query_id == 0 || e.user == ANY_ROLE {
                (false, i64::MIN)
            } else {
                (e.long, e.last_us)
            }
        })?;
        self.e[i] = Shape { query_id, db, user, last_us: now_us, ..Shape::default() };
        Some(i)
    }

    /// Where a transaction of role `user` starting with this query goes: a
    /// route in force for the query id wins; else what that role's own runs
    /// taught.
    pub fn lane(&self, db: u32, user: u32, query_id: u64, now_us: i64) -> Lane {
        if let Some(s) = self.find(db, ANY_ROLE, query_id).map(|i| &self.e[i]) {
            if s.routed(now_us) {
                return Lane::Routed(s.route);
            }
        }
        self.learned(db, user, query_id)
    }

    /// What role `user`'s own runs of this query taught, routes aside: the
    /// lane of a query whose route names a class no longer defined.
    pub fn learned(&self, db: u32, user: u32, query_id: u64) -> Lane {
        match self.find(db, user, query_id).map(|i| &self.e[i]) {
            Some(s) if s.long => Lane::Long,
            _ => Lane::Short,
        }
    }

    /// A transaction of role `user` starting with this query was sent where
    /// its [`lane`] said instead of its session's class (or, with the lane
    /// in dry run, would have been): count it in the route's entry or the
    /// role's. The caller decides, since only it knows whether the lane is
    /// followed and the route's class exists.
    ///
    /// [`lane`]: Shapes::lane
    pub fn count_routed(&mut self, db: u32, user: u32, query_id: u64, lane: Lane) {
        let key = match lane {
            Lane::Routed(_) => ANY_ROLE,
            Lane::Long => user,
            Lane::Short => return,
        };
        if let Some(i) = self.find(db, key, query_id) {
            self.e[i].routed += 1;
        }
    }

    /// A transaction of role `user` starting with this query ended: it held
    /// its admission `held_us` and `ran_long` says whether it was seen
    /// working past `stall_timeout`. Only that role's shape learns.
    pub fn record(
        &mut self,
        db: u32,
        user: u32,
        query_id: u64,
        held_us: u64,
        ran_long: bool,
        now_us: i64,
    ) -> Option<Change> {
        if user == ANY_ROLE {
            return None;
        }
        let i = self.find_or_take(db, user, query_id, now_us)?;
        let s = &mut self.e[i];
        s.mean_us = if s.runs == 0 { held_us as f64 } else { s.mean_us + SMOOTHING * (held_us as f64 - s.mean_us) };
        s.runs += 1;
        s.last_us = now_us;
        if ran_long {
            s.long_runs += 1;
            s.short_streak = 0;
            if !s.long {
                s.long = true;
                s.entered_us = now_us;
                return Some(Change::Entered);
            }
        } else if s.long {
            s.short_streak += 1;
            if s.short_streak >= LEAVE_AFTER {
                s.long = false;
                s.short_streak = 0;
                return Some(Change::Left);
            }
        }
        None
    }

    /// Route the query id, for every role, to `class` until `until_us`
    /// (0: for good).
    pub fn route(
        &mut self,
        db: u32,
        query_id: u64,
        class: ClassName,
        until_us: i64,
        now_us: i64,
    ) -> Result<(), RouteError> {
        if query_id == 0 {
            return Err(RouteError::NoQueryId);
        }
        let i = self.find_or_take(db, ANY_ROLE, query_id, now_us).ok_or(RouteError::NoRoom)?;
        let s = &mut self.e[i];
        if !s.routed(now_us) {
            // An ended route's entry: a new route counts from nothing.
            *s = Shape { query_id, db, user: ANY_ROLE, last_us: now_us, ..Shape::default() };
        }
        s.route = class;
        s.route_until_us = until_us;
        s.last_us = s.last_us.max(now_us);
        Ok(())
    }

    /// End the query id's route, freeing its entry. Returns whether a
    /// route was in force.
    pub fn unroute(&mut self, db: u32, query_id: u64, now_us: i64) -> bool {
        match self.find(db, ANY_ROLE, query_id) {
            Some(i) => {
                let had = self.e[i].routed(now_us);
                self.e[i] = Shape::default();
                had
            }
            None => false,
        }
    }

    /// Forget every shape; routes too when `routes` is set (a route kept
    /// starts its count again).
    pub fn reset(&mut self, routes: bool, now_us: i64) {
        for s in self.e.iter_mut() {
            *s = if routes || !s.routed(now_us) {
                Shape::default()
            } else {
                Shape {
                    query_id: s.query_id,
                    db: s.db,
                    user: s.user,
                    route: s.route,
                    route_until_us: s.route_until_us,
                    last_us: s.last_us,
                    ..Shape::default()
                }
            };
        }
    }

    /// Forget every shape and route of database `db` (it was dropped: its
    /// OID may be given to a new database). Returns whether a route in force
    /// was among them.
    pub fn forget_db(&mut self, db: u32, now_us: i64) -> bool {
        self.forget_where(|s| s.db == db, now_us) > 0
    }

    /// Free every entry in use that `which` picks; returns how many routes
    /// in force were among them.
    fn forget_where(&mut self, which: impl Fn(&Shape) -> bool, now_us: i64) -> usize {
        let mut routes = 0;
        for s in self.e.iter_mut().filter(|s| s.query_id != 0 && which(s)) {
            routes += usize::from(s.routed(now_us));
            *s = Shape::default();
        }
        routes
    }

    /// Forget the shapes and routes of every database that `exists` denies
    /// (found missing from the catalog: dropped where no backend of this
    /// server forgot them, see `forget_db`). Only entries last seen before
    /// `listed_at_us`, when the caller listed the databases, are judged: a
    /// database created since may already have entries, and its OID may be
    /// one the list lacks. Returns how many routes in force were among the
    /// forgotten.
    pub fn forget_absent(&mut self, exists: impl Fn(u32) -> bool, listed_at_us: i64, now_us: i64) -> usize {
        self.forget_where(|s| s.last_us < listed_at_us && !exists(s.db), now_us)
    }

    /// Whether [`Shapes::forget_absent`] would forget anything: a read, for
    /// the shared lock, so that the exclusive one is taken only when a
    /// database went (the table may be large).
    pub fn any_absent(&self, exists: impl Fn(u32) -> bool, listed_at_us: i64) -> bool {
        self.e.iter().any(|s| s.query_id != 0 && s.last_us < listed_at_us && !exists(s.db))
    }

    /// Whether any entry is in use (an ended route's included): the
    /// databases need checking only then.
    pub fn any(&self) -> bool {
        self.e.iter().any(|s| s.query_id != 0)
    }

    /// Whether the entry holds something to show: a role's shape, or a
    /// route in force (an expired route's entry is only waiting for reuse).
    pub fn in_use(s: &Shape, now_us: i64) -> bool {
        s.query_id != 0 && (s.user != ANY_ROLE || s.routed(now_us))
    }

    /// Whether the entry is a route in force now.
    pub fn routed_now(s: &Shape, now_us: i64) -> bool {
        s.routed(now_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: usize) -> Vec<Shape> {
        vec![Shape::default(); n]
    }

    #[test]
    fn a_shape_enters_at_its_first_long_run_and_leaves_after_three_short_ones() {
        let mut v = table(64);
        let mut t = Shapes::new(&mut v);
        assert_eq!(t.lane(1, 10, 42, 0), Lane::Short);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 1), None);
        assert_eq!(t.lane(1, 10, 42, 1), Lane::Short);
        assert_eq!(t.record(1, 10, 42, 4_000_000, true, 2), Some(Change::Entered));
        assert_eq!(t.lane(1, 10, 42, 2), Lane::Long);
        t.count_routed(1, 10, 42, Lane::Long);
        assert_eq!(t.lane(1, 10, 43, 2), Lane::Short);
        // No such shape: nothing to count.
        t.count_routed(1, 10, 43, Lane::Long);
        // Another database's same query id is another shape.
        assert_eq!(t.lane(2, 10, 42, 2), Lane::Short);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 3), None);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 4), None);
        // A long run resets the streak.
        assert_eq!(t.record(1, 10, 42, 4_000_000, true, 5), None);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 6), None);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 7), None);
        assert_eq!(t.lane(1, 10, 42, 7), Lane::Long);
        assert_eq!(t.record(1, 10, 42, 1_000, false, 8), Some(Change::Left));
        assert_eq!(t.lane(1, 10, 42, 8), Lane::Short);
        let s = &t.entries()[t.find(1, 10, 42).unwrap()];
        assert_eq!((s.runs, s.long_runs, s.routed), (8, 2, 1));
    }

    #[test]
    fn the_smoothed_time_follows_the_runs() {
        let mut v = table(16);
        let mut t = Shapes::new(&mut v);
        t.record(1, 10, 7, 1000, false, 1);
        let i = t.find(1, 10, 7).unwrap();
        assert_eq!(t.entries()[i].mean_us, 1000.0);
        t.record(1, 10, 7, 2000, false, 2);
        assert!((t.entries()[i].mean_us - 1200.0).abs() < 1e-9);
    }

    #[test]
    fn the_least_recently_seen_shape_of_a_full_window_is_evicted() {
        // A table no larger than the window: every key shares it.
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        for q in 1..=PROBE as u64 {
            t.record(1, 10, q, 1, false, q as i64);
        }
        // Refresh shape 1: shape 2 is now the least recently seen.
        t.record(1, 10, 1, 1, false, 100);
        t.record(1, 10, 999, 1, false, 101);
        assert!(t.find(1, 10, 999).is_some());
        assert!(t.find(1, 10, 2).is_none());
        assert!(t.find(1, 10, 1).is_some());
        assert_eq!(t.entries().iter().filter(|s| Shapes::in_use(s, 0)).count(), PROBE);
    }

    #[test]
    fn a_full_window_evicts_short_shapes_before_long_ones() {
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        // A report that ran long once, then a window's worth of short work.
        assert_eq!(t.record(1, 10, 1, 4_000_000, true, 1), Some(Change::Entered));
        for q in 2..=PROBE as u64 + 4 {
            t.record(1, 10, q, 1, false, q as i64);
        }
        assert_eq!(t.lane(1, 10, 1, 100), Lane::Long, "the report's next run still goes to the lane");
        // With every entry long, the least recently seen long one goes.
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        for q in 1..=PROBE as u64 {
            t.record(1, 10, q, 4_000_000, true, q as i64);
        }
        t.record(1, 10, 999, 1, false, 100);
        assert!(t.find(1, 10, 999).is_some());
        assert!(t.find(1, 10, 1).is_none());
        assert_eq!(t.lane(1, 10, 2, 100), Lane::Long);
    }

    #[test]
    fn routes_win_over_the_lane_for_every_role_and_expire() {
        let mut v = table(64);
        let mut t = Shapes::new(&mut v);
        let reports = ClassName::new("reports");
        t.record(1, 10, 5, 9_000_000, true, 1);
        assert_eq!(t.lane(1, 10, 5, 1), Lane::Long);
        t.route(1, 5, reports, 1_000, 2).unwrap();
        assert_eq!(t.lane(1, 10, 5, 999), Lane::Routed(reports));
        // A role that never ran it follows the route too.
        assert_eq!(t.lane(1, 11, 5, 999), Lane::Routed(reports));
        // Counted in the route's entry, not the role's.
        t.count_routed(1, 10, 5, Lane::Routed(reports));
        assert_eq!(t.entries()[t.find(1, ANY_ROLE, 5).unwrap()].routed, 1);
        assert_eq!(t.entries()[t.find(1, 10, 5).unwrap()].routed, 0);
        // Expired: back to what each role learnt, and out of sight.
        assert_eq!(t.lane(1, 10, 5, 1_000), Lane::Long);
        assert_eq!(t.lane(1, 11, 5, 1_000), Lane::Short);
        assert!(!Shapes::in_use(&t.entries()[t.find(1, ANY_ROLE, 5).unwrap()], 1_000));
        // Ended by hand: the same.
        t.route(1, 5, reports, 0, 2_000).unwrap();
        assert!(t.unroute(1, 5, 3_000));
        assert!(!t.unroute(1, 5, 3_000));
        assert_eq!(t.lane(1, 10, 5, 3_000), Lane::Long);
        assert!(t.find(1, ANY_ROLE, 5).is_none());
        assert_eq!(t.route(1, 0, reports, 0, 1), Err(RouteError::NoQueryId));
    }

    #[test]
    fn an_ended_routes_entry_is_free_and_a_new_route_counts_from_nothing() {
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        let c = ClassName::new("c");
        // A role's shape seen at 1, a route set at 2 that ends at 5.
        t.record(1, 10, 7, 1, false, 1);
        t.route(1, 5, c, 5, 2).unwrap();
        t.count_routed(1, 10, 5, Lane::Routed(c));
        for q in 100..100 + PROBE as u64 - 2 {
            t.record(1, 10, q, 1, false, 3);
        }
        // The table is full: a new shape takes the ended route's entry,
        // not the least recently seen shape.
        t.record(1, 10, 999, 1, false, 6);
        assert!(t.find(1, ANY_ROLE, 5).is_none());
        assert!(t.find(1, 10, 7).is_some());
        // Set again after it ended, a route counts from nothing.
        let mut v = table(64);
        let mut t = Shapes::new(&mut v);
        t.route(1, 5, c, 5, 2).unwrap();
        t.count_routed(1, 10, 5, Lane::Routed(c));
        t.route(1, 5, c, 0, 6).unwrap();
        assert_eq!(t.entries()[t.find(1, ANY_ROLE, 5).unwrap()].routed, 0);
        // While in force, set again: the same route, its count kept.
        t.count_routed(1, 10, 5, Lane::Routed(c));
        t.route(1, 5, ClassName::new("d"), 0, 7).unwrap();
        assert_eq!(t.entries()[t.find(1, ANY_ROLE, 5).unwrap()].routed, 1);
    }

    #[test]
    fn a_route_is_never_evicted() {
        // A table no larger than the window: every key shares it.
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        let reports = ClassName::new("reports");
        t.route(1, 5, reports, 0, 1).unwrap();
        for q in 100..200u64 {
            t.record(1, 10, q, 1, false, 3_000 + q as i64);
        }
        assert_eq!(t.lane(1, 10, 5, 10_000), Lane::Routed(reports));
    }

    #[test]
    fn what_one_role_teaches_moves_only_its_own_transactions() {
        let mut v = table(64);
        let mut t = Shapes::new(&mut v);
        // Role 10 runs query 42 long: its own next transactions go long.
        assert_eq!(t.record(1, 10, 42, 9_000_000, true, 1), Some(Change::Entered));
        assert_eq!(t.lane(1, 10, 42, 2), Lane::Long);
        // Role 11's transactions of the same query id do not.
        assert_eq!(t.lane(1, 11, 42, 2), Lane::Short);
        // Its short runs are its own shape, and do not take 10's out.
        for now in 3..10 {
            assert_eq!(t.record(1, 11, 42, 1_000, false, now), None);
        }
        assert_eq!(t.lane(1, 10, 42, 10), Lane::Long);
        let (a, b) = (t.find(1, 10, 42).unwrap(), t.find(1, 11, 42).unwrap());
        assert_ne!(a, b);
        assert_eq!((t.entries()[a].runs, t.entries()[b].runs), (1, 7));
        // Nothing learns into a route's entry.
        assert_eq!(t.record(1, ANY_ROLE, 42, 9_000_000, true, 11), None);
        assert!(t.find(1, ANY_ROLE, 42).is_none());
        assert_eq!(t.lane(1, 12, 42, 12), Lane::Short);
    }

    #[test]
    fn a_window_of_routes_has_no_room() {
        let mut v = table(PROBE);
        let mut t = Shapes::new(&mut v);
        let c = ClassName::new("c");
        for q in 1..=PROBE as u64 {
            t.route(1, q, c, 0, 1).unwrap();
        }
        assert_eq!(t.route(1, 1000, c, 0, 2), Err(RouteError::NoRoom));
        assert_eq!(t.record(1, 10, 1000, 1, true, 2), None);
        assert!(t.find(1, 10, 1000).is_none());
        // An expired route frees its entry again.
        t.route(1, 1, c, 5, 3).unwrap();
        assert!(t.route(1, 1000, c, 0, 6).is_ok());
    }

    #[test]
    fn forget_db_drops_that_databases_shapes_and_routes_only() {
        let mut v = table(32);
        let mut t = Shapes::new(&mut v);
        let c = ClassName::new("c");
        t.record(1, 10, 1, 1, true, 1);
        t.record(2, 10, 1, 1, true, 1);
        t.route(1, 2, c, 0, 1).unwrap();
        t.route(2, 2, c, 0, 1).unwrap();
        assert!(t.forget_db(1, 2), "a route in force was forgotten");
        assert!(t.find(1, 10, 1).is_none());
        assert!(t.find(1, ANY_ROLE, 2).is_none());
        assert_eq!(t.lane(1, 10, 2, 3), Lane::Short);
        assert!(t.find(2, 10, 1).is_some(), "another database's shape stays");
        assert_eq!(t.lane(2, 10, 2, 3), Lane::Routed(c), "and its route");
        assert!(!t.forget_db(1, 3), "nothing left to forget");
        t.record(3, 10, 1, 1, true, 1);
        assert!(!t.forget_db(3, 3), "a shape alone is no route");
        assert!(t.find(3, 10, 1).is_none());
    }

    #[test]
    fn forget_absent_drops_missing_databases_seen_before_the_list() {
        let mut v = table(32);
        let mut t = Shapes::new(&mut v);
        let c = ClassName::new("c");
        t.record(1, 10, 1, 1, true, 1);
        t.route(1, 2, c, 0, 1).unwrap();
        t.route(2, 2, c, 0, 1).unwrap();
        assert!(t.any());
        // Database 3 is created after the list was taken: its entries wait
        // for the next list.
        t.record(3, 10, 1, 1, true, 5);
        let exists = |db: u32| db == 2;
        assert!(t.any_absent(exists, 4));
        assert!(!t.any_absent(|db| db != 3, 4), "database 3's entries are not judged");
        assert_eq!(t.forget_absent(exists, 4, 6), 1, "database 1's route in force was forgotten");
        assert!(!t.any_absent(exists, 4));
        assert!(t.find(1, 10, 1).is_none());
        assert_eq!(t.lane(1, 10, 2, 7), Lane::Short);
        assert_eq!(t.lane(2, 10, 2, 7), Lane::Routed(c), "a database that exists keeps its route");
        assert!(t.find(3, 10, 1).is_some(), "seen after the list: not judged");
        assert_eq!(t.forget_absent(exists, 10, 11), 0, "a shape alone is no route");
        assert!(t.find(3, 10, 1).is_none());
        assert_eq!(t.forget_absent(|_| false, 0, 11), 0, "nothing was seen before 0");
        assert!(t.find(2, ANY_ROLE, 2).is_some());
        t.unroute(2, 2, 12);
        assert!(!t.any());
    }

    #[test]
    fn reset_keeps_routes_unless_asked() {
        let mut v = table(32);
        let mut t = Shapes::new(&mut v);
        let c = ClassName::new("c");
        t.record(1, 10, 1, 1, true, 1);
        t.record(1, 10, 2, 1, true, 1);
        t.route(1, 2, c, 0, 1).unwrap();
        t.count_routed(1, 10, 2, Lane::Routed(c));
        t.reset(false, 2);
        assert!(t.find(1, 10, 1).is_none());
        assert!(t.find(1, 10, 2).is_none());
        assert_eq!(t.lane(1, 10, 2, 3), Lane::Routed(c));
        assert_eq!(t.entries()[t.find(1, ANY_ROLE, 2).unwrap()].routed, 0, "its count starts again");
        t.reset(true, 3);
        assert!(t.find(1, ANY_ROLE, 2).is_none());
        assert_eq!(t.lane(1, 10, 2, 3), Lane::Short);
    }

    #[test]
    fn an_empty_table_records_nothing() {
        let mut v = table(0);
        let mut t = Shapes::new(&mut v);
        assert_eq!(t.record(1, 1, 1, 1, true, 1), None);
        assert_eq!(t.lane(1, 10, 1, 1), Lane::Short);
    }
}
