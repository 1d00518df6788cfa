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
//! It admits a parked blocker over the limit only when nothing else would
//! move its queue ([`stuck`]): while a holder runs that will give the
//! blocker's class a place, the blocker gets in in its turn. Without that
//! rule a role could stay over the limit and ahead of the queue: its
//! sessions take a session-level advisory lock in shared mode and loop
//! statements longer than the breaker's check, one of its admitted
//! sessions asks for the lock in exclusive mode, and each time a looping
//! session parks, holding the lock the waiter waits for, the breaker
//! admits it again.

use std::collections::HashSet;
use std::hash::Hash;

use crate::classes::MAX_CLASSES;

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

/// For each class, whether only the breaker can move its queue now.
/// `holders` gives each holder's class and whether it moves: it counts
/// against the places (not stalled) and waits on nothing that may be the
/// cycle (it computes, or waits on an LWLock, I/O or a sleep; not on a
/// heavyweight lock, its client, another process or another server), so
/// it will end and give its place back. Only a class's own holders count:
/// as one ends, the class holds fewer places, and so gets the next free
/// one within its cap and share. A place freed by another class's holder
/// may go anywhere by the shares (back to that class, if it holds fewer):
/// counting those, a class whose own holders all wait could stand still
/// for as long as another class stays busy.
pub fn stuck(holders: impl IntoIterator<Item = (usize, bool)>) -> [bool; MAX_CLASSES] {
    let mut moves = [false; MAX_CLASSES];
    for (k, _) in holders.into_iter().filter(|&(_, m)| m) {
        moves[k % MAX_CLASSES] = true;
    }
    moves.map(|m| !m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{DEFAULT, LONG};

    #[test]
    fn a_queue_is_stuck_only_while_none_of_its_own_holders_moves() {
        // Both holders wait on locks (or their clients): stuck.
        assert!(stuck([(DEFAULT, false), (DEFAULT, false)])[DEFAULT]);
        assert!(stuck(std::iter::empty())[DEFAULT]);
        // One runs: as it ends, the class holds fewer and gets a place.
        assert!(!stuck([(DEFAULT, false), (DEFAULT, true)])[DEFAULT]);
        // Another class's running holder frees a place the shares may
        // give to that class again.
        let s = stuck([(DEFAULT, false), (2, true), (LONG, true)]);
        assert!(s[DEFAULT]);
        assert!(!s[2]);
        assert!(!s[LONG]);
    }

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
