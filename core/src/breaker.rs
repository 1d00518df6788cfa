//! Which lock waiters the deadlock breaker asks the lock manager about
//! (docs/DESIGN.md §6).
//!
//! The breaker looks for parked sessions that block a lock waiter, with
//! `pg_blocking_pids`, which holds every lock-manager partition lock while
//! it copies the waiter's lock's holders and queue. A parked session never
//! waits on a heavyweight lock itself (it waits in the gate's queue), so it
//! is never a soft blocker (one ahead in a lock's wait queue), and it is a
//! hard blocker of a waiter exactly when the mode it holds conflicts with
//! the mode asked for: it blocks every waiter that asks for the same lock
//! in the same mode, or none of them. (The lock manager's one exception,
//! members of one lock group, needs parallel workers of the parked
//! session, which has none.) So one waiter per lock and mode is enough: a
//! pile-up of W waiters on one row costs a call per mode asked, not W
//! calls that each copy the pile.
//!
//! A blocker admitted over the limit that parks again, still blocking,
//! ended nothing by its admission: most often it holds a session-level
//! lock across its transactions. It may need to run again to release it
//! (its unlock is a statement too), so it is not refused, but any repeat of
//! a blocker admitted over the limit in the last 10 s asks that its class's
//! queue has stood still longer ([`Repeats`]: 200 ms, 400 ms, 800 ms, then
//! 1.6 s). Sessions that hold a lock someone waits for then cannot loop
//! short statements over the limit: each gets there once or twice per
//! 10 s, and statements longer than 1.6 s about once each. A real cycle is
//! still broken: after that standstill, or, where other admissions keep
//! moving the class (the progress guarantee's batches among them), once
//! the count is forgotten 10 s after the blocker's last admission. The
//! count is not forgotten when one check fails to name the blocker: a
//! waiter that alternates between two locks held by two groups would then
//! reset each group's count in turn.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// The waiters to ask about, in the order given: `waiters` are each
/// waiter's PID and the lock and mode it waits on (`None` where that was
/// not read, which is asked about on its own). Keeps the first waiter of
/// each lock and mode.
pub fn one_per_lock<K: Eq + Hash>(waiters: impl IntoIterator<Item = (i32, Option<K>)>) -> Vec<i32> {
    let mut locks = HashSet::new();
    waiters
        .into_iter()
        .filter_map(|(pid, on)| match on {
            Some(k) => locks.insert(k).then_some(pid),
            None => Some(pid),
        })
        .collect()
}

/// The standstill asked of a blocker's class before its first repeat,
/// doubling with each repeat up to [`REPEAT_STOP_MAX_US`].
pub const REPEAT_STOP_US: i64 = 200_000;
/// The longest standstill a repeat asks for.
pub const REPEAT_STOP_MAX_US: i64 = 1_600_000;
/// How long after its last admission over the limit a blocker's count is
/// forgotten.
pub const REPEAT_FORGET_US: i64 = 10_000_000;

/// How often the breaker admitted each parked blocker over the limit
/// recently, so that a blocker whose admissions end nothing backs off.
/// Keyed by the blocker alone: a waiter that gives up and waits again (a
/// `lock_timeout` in a loop) must not start the count afresh. Times are
/// from a clock that never steps back.
#[derive(Default, Debug)]
pub struct Repeats {
    /// Per blocker PID: admissions, and when the last one was.
    admitted: HashMap<i32, (u32, i64)>,
}

impl Repeats {
    /// How long (µs) the blocker's class must have admitted nobody before
    /// `blocker` is admitted over the limit again: no more than for any
    /// blocker the first time (the class stood still since the previous
    /// check), then [`REPEAT_STOP_US`], doubling with each admission, at
    /// most [`REPEAT_STOP_MAX_US`].
    pub fn stop_needed_us(&self, blocker: i32) -> i64 {
        match self.admitted.get(&blocker) {
            None => 0,
            Some(&(n, _)) => REPEAT_STOP_US.saturating_mul(1 << (n - 1).min(62)).min(REPEAT_STOP_MAX_US),
        }
    }

    /// Whether `blocker`, parked in a class whose queue has admitted nobody
    /// for `still` µs (0: it moved since the previous check), may be
    /// admitted over the limit now: the queue must stand still, and for a
    /// repeat at least [`Repeats::stop_needed_us`].
    pub fn may_admit(&self, blocker: i32, still: i64) -> bool {
        still > 0 && still >= self.stop_needed_us(blocker)
    }

    /// `blocker` was admitted over the limit at `now`; returns how many
    /// times recently.
    pub fn admitted(&mut self, blocker: i32, now: i64) -> u32 {
        let e = self.admitted.entry(blocker).or_insert((0, now));
        *e = (e.0 + 1, now);
        e.0
    }

    /// Forget the blockers last admitted [`REPEAT_FORGET_US`] or more ago.
    pub fn expire(&mut self, now: i64) {
        self.admitted.retain(|_, &mut (_, at)| now - at < REPEAT_FORGET_US);
    }
}

/// Each class's admissions at the breaker's last check, and since when
/// they have not moved.
#[derive(Debug)]
pub struct Motion<const N: usize> {
    last: Option<[u64; N]>,
    since: [i64; N],
}

impl<const N: usize> Default for Motion<N> {
    fn default() -> Self {
        Motion { last: None, since: [0; N] }
    }
}

impl<const N: usize> Motion<N> {
    /// Record each class's admissions counted at `now` (a clock that never
    /// steps back). Returns, per class, how long (µs) its count has stood
    /// still: 0 where it moved since the previous check; `None` at the
    /// first check, which has nothing to compare with.
    pub fn observe(&mut self, admitted: [u64; N], now: i64) -> Option<[i64; N]> {
        let Some(last) = self.last.replace(admitted) else {
            self.since = [now; N];
            return None;
        };
        Some(std::array::from_fn(|k| {
            if admitted[k] != last[k] {
                self.since[k] = now;
            }
            now - self.since[k]
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_waiter_per_lock_and_mode() {
        // Ten waiters on one row's tuple lock (lock 1, mode 7), the first of
        // them also on the row's transaction (lock 2, mode 5), one on the
        // same tuple in another mode (8), one whose lock was not read.
        let mut waiters: Vec<(i32, Option<(usize, i32)>)> = (100..110).map(|pid| (pid, Some((1, 7)))).collect();
        waiters.insert(0, (99, Some((2, 5))));
        waiters.push((200, Some((1, 8))));
        waiters.push((300, None));
        waiters.push((301, None));
        assert_eq!(one_per_lock(waiters), vec![99, 100, 200, 300, 301]);
    }

    #[test]
    fn nothing_to_ask_about() {
        assert!(one_per_lock(Vec::<(i32, Option<u8>)>::new()).is_empty());
    }

    #[test]
    fn each_repeat_needs_a_longer_standstill() {
        let mut r = Repeats::default();
        assert_eq!(r.stop_needed_us(42), 0, "the first time: the check's own rule");
        let needed: Vec<i64> = (1..=6)
            .map(|n| {
                assert_eq!(r.admitted(42, n as i64 * 1000), n);
                r.stop_needed_us(42)
            })
            .collect();
        assert_eq!(needed, vec![200_000, 400_000, 800_000, 1_600_000, 1_600_000, 1_600_000]);
        assert_eq!(r.stop_needed_us(43), 0, "another blocker starts afresh");
    }

    #[test]
    fn a_count_is_forgotten_10_s_after_its_last_admission() {
        let mut r = Repeats::default();
        r.admitted(1, 0);
        r.admitted(1, 5_000_000);
        r.admitted(2, 1_000_000);
        r.expire(11_000_000);
        assert_eq!(r.stop_needed_us(2), 0, "last admitted 10 s ago");
        assert_eq!(r.stop_needed_us(1), 400_000, "the 5 s admission keeps the count");
        r.expire(15_000_000);
        assert_eq!(r.stop_needed_us(1), 0);
    }

    #[test]
    fn a_blocker_is_admitted_only_from_a_queue_standing_still_long_enough() {
        let mut r = Repeats::default();
        assert!(!r.may_admit(7, 0), "a queue that moved is not stuck, even the first time");
        assert!(r.may_admit(7, 1), "the first time, any standstill");
        r.admitted(7, 0);
        assert!(!r.may_admit(7, REPEAT_STOP_US - 1));
        assert!(r.may_admit(7, REPEAT_STOP_US));
        r.admitted(7, 1);
        assert!(!r.may_admit(7, REPEAT_STOP_US), "the second repeat needs twice as long");
        assert!(r.may_admit(7, 2 * REPEAT_STOP_US));
        assert!(r.may_admit(8, 1), "another blocker has its own count");
    }

    #[test]
    fn many_repeats_do_not_overflow() {
        let mut r = Repeats::default();
        for k in 0..100 {
            r.admitted(1, k);
        }
        assert_eq!(r.stop_needed_us(1), REPEAT_STOP_MAX_US);
    }

    #[test]
    fn motion_counts_the_standstill_per_class() {
        let mut m = Motion::<2>::default();
        assert_eq!(m.observe([5, 9], 1_000), None);
        assert_eq!(m.observe([5, 10], 1_100), Some([100, 0]));
        assert_eq!(m.observe([5, 10], 1_200), Some([200, 100]));
        assert_eq!(m.observe([6, 10], 1_300), Some([0, 200]));
        assert_eq!(m.observe([6, 10], 1_400), Some([100, 300]));
    }
}
