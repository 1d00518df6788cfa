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

use std::collections::HashSet;
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
}
