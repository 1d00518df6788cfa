//! Which holders do work for the server: the adaptive limit's
//! [`Signals::working`](crate::adaptive::Signals::working).
//!
//! A holder works while it computes, waits on I/O, an LWLock, a sleep or
//! another server. It does not while it waits on its own client (its place
//! is lent) or while it is stalled (its place goes to the queue).
//!
//! A holder waiting on a heavyweight lock does not work either, as a rule:
//! places held by a pile-up behind a hot lock are places the limit should
//! not grow for. One lock wait is different: a holder that waits for a
//! *transaction* to end (`Lock:transactionid`) whose owner is itself a
//! holder at work. With durable commits that owner is mostly in its commit
//! flush, so its first waiter waits on that I/O as surely as the owner
//! does, and a larger limit lets more commits share each flush. Only the
//! first waiter on a row waits on the transaction; the others queue behind
//! it on the row's tuple lock (`Lock:tuple`) and still count as a pile-up.
//! So a hot row adds at most one working waiter, however long its queue.

use std::collections::HashSet;

/// What a holder waits on, as far as counting work goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Its own client: idle in transaction, or reading COPY data.
    Client,
    /// A heavyweight lock on transaction `xid` (0: any other lock, or the
    /// transaction could not be read).
    Transaction { xid: u32 },
    /// Any other heavyweight lock (a tuple, a relation, an advisory lock).
    Lock,
    /// Anything else: no wait (computing), an LWLock, I/O, a timeout, an
    /// extension or another server.
    Other,
}

/// One holder as the worker sampled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub wait: Wait,
    /// Its top-level transaction id, 0 when it has none.
    pub xid: u32,
    /// Stalled: waiting (not computing) for `stall_timeout` or longer, so
    /// its place goes to the queue.
    pub stalled: bool,
}

impl Holder {
    /// It uses the server and does not wait on a lock, stalled or not: a
    /// transaction that waits for it waits on work.
    fn busy(&self) -> bool {
        matches!(self.wait, Wait::Other)
    }
}

/// How many of `holders` do work, by the rules above.
pub fn count(holders: &[Holder]) -> u32 {
    let busy: HashSet<u32> = holders.iter().filter(|h| h.xid != 0 && h.busy()).map(|h| h.xid).collect();
    holders
        .iter()
        .filter(|h| {
            !h.stalled
                && match h.wait {
                    Wait::Other => true,
                    Wait::Transaction { xid } => xid != 0 && busy.contains(&xid),
                    Wait::Client | Wait::Lock => false,
                }
        })
        .count() as u32
}

/// What a holder's activity (PostgreSQL's `pg_stat_activity` entry) says
/// about the statement it runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Running a statement (`active`, or a fastpath call) since this time.
    Since(i64),
    /// Between statements (`idle in transaction`): it has read a command
    /// and not yet started it, or it waits for one.
    Between,
    /// Not tracked (`track_activities = off`).
    Unknown,
}

/// How long a holder's statement has run, as the stall check measures it:
/// from the later of `run_start_us`, which the holder itself sets when it
/// wakes admitted and at each statement that reaches the executor or a
/// utility hook, and the start of the statement its activity shows.
///
/// - A holder granted at `admitted_at_us` that has not woken yet (its run
///   start is older than its grant) has not run. On a busy CPU a woken
///   backend may wait longer than `stall_timeout` to be scheduled, and its
///   park wait would read as a stall: its place would go to the queue
///   before it ever used it, and both would then run.
/// - A holder between statements has not run either. A command just read
///   runs parse analysis and planning before any hook moves the run
///   start: measured from the last statement, after a client's think time
///   longer than `stall_timeout`, it would read as a long run (and its
///   transaction's shape would enter the long lane).
///
/// A wall clock stepped back between a grant and the wake-up reads as not
/// woken until the holder's next statement: it misses the stall check for
/// that long, and nothing else.
pub fn run_time_us(now_us: i64, run_start_us: i64, admitted_at_us: i64, activity: Activity) -> i64 {
    if run_start_us < admitted_at_us {
        return 0;
    }
    match activity {
        Activity::Between => 0,
        Activity::Since(t) => now_us - run_start_us.max(t),
        Activity::Unknown => now_us - run_start_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_granted_but_not_yet_awake_has_not_run() {
        // Granted at 1_000 while parked since 0: asleep still at 900_000.
        assert_eq!(run_time_us(900_000, 0, 1_000, Activity::Since(0)), 0);
        assert_eq!(run_time_us(900_000, 0, 1_000, Activity::Unknown), 0);
        // Awake at 1_200, and its statement runs since.
        assert_eq!(run_time_us(900_000, 1_200, 1_000, Activity::Since(1_100)), 898_800);
        // Admitted at once: the grant and the wake-up are one instant.
        assert_eq!(run_time_us(5_000, 1_000, 1_000, Activity::Unknown), 4_000);
    }

    #[test]
    fn a_statement_runs_from_its_own_start_not_from_the_last_one() {
        // Its last statement ran at 1_000; the client thought for 10 s.
        let (run_start, granted) = (1_000, 500);
        // It has read the next command and not started it.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Between), 0);
        // Parse analysis of the command that became active at 9_990_000.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Since(9_990_000)), 10_000);
        // Without activity tracking, only the hooks' run start tells.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Unknown), 9_999_000);
    }

    fn h(wait: Wait, xid: u32) -> Holder {
        Holder { wait, xid, stalled: false }
    }

    #[test]
    fn computing_waiting_on_io_and_other_servers_is_work_the_client_is_not() {
        assert_eq!(count(&[h(Wait::Other, 0), h(Wait::Other, 7), h(Wait::Client, 8)]), 2);
        let stalled = Holder { stalled: true, ..h(Wait::Other, 9) };
        assert_eq!(count(&[stalled]), 0, "a stalled holder's place goes to the queue");
    }

    #[test]
    fn the_first_waiter_on_a_working_transaction_works_the_queue_behind_it_does_not() {
        // 10 flushes its commit; 11 waits for it; 12..=15 queue behind 11
        // on the row's tuple lock.
        let mut hs = vec![h(Wait::Other, 10), h(Wait::Transaction { xid: 10 }, 11)];
        hs.extend((12..=15).map(|x| h(Wait::Lock, x)));
        assert_eq!(count(&hs), 2);
    }

    #[test]
    fn a_wait_on_an_idle_waiting_absent_or_unknown_transaction_is_no_work() {
        let idle_owner = [h(Wait::Client, 20), h(Wait::Transaction { xid: 20 }, 21)];
        assert_eq!(count(&idle_owner), 0, "its owner waits on its client");
        let waiting_owner =
            [h(Wait::Transaction { xid: 99 }, 30), h(Wait::Transaction { xid: 30 }, 31), h(Wait::Other, 32)];
        assert_eq!(count(&waiting_owner), 1, "a chain of waits leads to no holder at work here");
        assert_eq!(count(&[h(Wait::Transaction { xid: 0 }, 40), h(Wait::Other, 0)]), 1, "xid 0 is no transaction");
    }

    #[test]
    fn a_stalled_owner_still_works_for_its_waiter() {
        let owner = Holder { stalled: true, ..h(Wait::Other, 50) };
        assert_eq!(count(&[owner, h(Wait::Transaction { xid: 50 }, 51)]), 1);
    }
}
