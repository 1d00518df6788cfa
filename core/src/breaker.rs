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
//! move its queue ([`stuck`]): while some holder that can give a place to
//! the blocker's class runs (on a CPU, on I/O, asleep, anything but a lock
//! or its client), that holder's release moves the queue and the blocker
//! gets in in its turn. Without that rule a role could stay over the limit
//! and ahead of the queue: its sessions take a session-level advisory lock
//! in shared mode and loop statements longer than the breaker's check,
//! one of its admitted sessions asks for the lock in exclusive mode, and
//! each time a looping session parks, holding the lock the waiter waits
//! for, the breaker admits it again.

use std::collections::HashSet;
use std::hash::Hash;

use crate::admission::{GateHeader, LONG};
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
/// `holders` gives each holder's class and whether it moves (runs, or waits
/// on anything but a heavyweight lock or its client): a holder that moves
/// will give its place back. A class held at its own cap waits for its own
/// holders; any other class for a place of the gate's, which any holder
/// outside the long lane gives back (the lane's holders take no place).
pub fn stuck(header: &GateHeader, holders: impl IntoIterator<Item = (usize, bool)>) -> [bool; MAX_CLASSES] {
    let (mut class_moves, mut gate_moves) = ([false; MAX_CLASSES], false);
    for (k, _) in holders.into_iter().filter(|&(_, moves)| moves) {
        class_moves[k % MAX_CLASSES] = true;
        gate_moves |= k != LONG;
    }
    std::array::from_fn(|k| if header.held_at_cap(k) { !class_moves[k] } else { !gate_moves })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::DEFAULT;

    #[test]
    fn a_queue_is_stuck_only_while_no_holder_that_frees_its_place_moves() {
        let mut h = GateHeader::default();
        (h.limit, h.tickets) = (2, 2);
        h.classes[DEFAULT].queued = 3;
        h.classes[DEFAULT].admitted = 2;
        // Both holders wait on locks (or their clients): stuck.
        assert!(stuck(&h, [(DEFAULT, false), (DEFAULT, false)])[DEFAULT]);
        assert!(stuck(&h, std::iter::empty())[DEFAULT]);
        // One runs: its release gives the queue's head a place.
        assert!(!stuck(&h, [(DEFAULT, false), (DEFAULT, true)])[DEFAULT]);
        // So does a holder of another class, but not the long lane's.
        assert!(!stuck(&h, [(DEFAULT, false), (2, true)])[DEFAULT]);
        assert!(stuck(&h, [(DEFAULT, false), (LONG, true)])[DEFAULT]);
        // A class held at its own cap waits for its own holders only.
        h.classes[2].params.max_active = 1;
        h.classes[2].admitted = 1;
        h.classes[2].queued = 1;
        assert!(stuck(&h, [(2, false), (DEFAULT, true)])[2]);
        assert!(!stuck(&h, [(2, true), (DEFAULT, false)])[2]);
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
