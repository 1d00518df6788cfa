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
/// - A run that started before `floor_us`, the wall time at which the
///   worker saw the wall clock step forward ([`WallSteps`]), is measured
///   from there: its stamps were taken on the clock before the step, and
///   every statement in flight would read as running for the step's length
///   (stalled, and its shape long).
///
/// A wall clock stepped back between a grant and the wake-up reads as not
/// woken until the holder's next statement, and a run that started before
/// a step back reads as that much younger: it misses the stall check for
/// that long, and nothing else.
pub fn run_time_us(now_us: i64, run_start_us: i64, admitted_at_us: i64, activity: Activity, floor_us: i64) -> i64 {
    if run_start_us < admitted_at_us {
        return 0;
    }
    match activity {
        Activity::Between => 0,
        Activity::Since(t) => now_us - run_start_us.max(t).max(floor_us),
        Activity::Unknown => now_us - run_start_us.max(floor_us),
    }
}

/// The wall clock watched against the monotonic one, for its steps forward
/// (NTP, an administrator, a virtual machine resumed): run times are
/// measured on the wall clock, from the stamps the holders take
/// ([`run_time_us`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WallSteps {
    /// The wall and monotonic times of the last look.
    last: Option<(i64, i64)>,
    /// Runs that started before this wall time are measured from it.
    pub floor_us: i64,
}

impl WallSteps {
    /// What the wall clock may gain on the monotonic one between two looks
    /// without being taken for a step. NTP's slewing moves both clocks
    /// alike; this covers the worker losing its CPU between its two
    /// readings (a CPU quota's throttling lasts up to its period, 100 ms by
    /// default).
    pub const TOLERANCE_US: i64 = 250_000;

    /// One look, the two clocks read one right after the other; returns the
    /// step forward since the last, if any. A step back moves the floor
    /// back with the clock: left where it was, it would lie ahead, and
    /// every run, however long, would read as not yet started until the
    /// clock caught up with it.
    pub fn observe(&mut self, wall_us: i64, mono_us: i64) -> Option<i64> {
        let gained = self.last.map_or(0, |(w, m)| (wall_us - w) - (mono_us - m));
        self.last = Some((wall_us, mono_us));
        if gained < -Self::TOLERANCE_US {
            self.floor_us = self.floor_us.saturating_add(gained);
        }
        (gained > Self::TOLERANCE_US).then(|| {
            self.floor_us = wall_us;
            gained
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_granted_but_not_yet_awake_has_not_run() {
        // Granted at 1_000 while parked since 0: asleep still at 900_000.
        assert_eq!(run_time_us(900_000, 0, 1_000, Activity::Since(0), 0), 0);
        assert_eq!(run_time_us(900_000, 0, 1_000, Activity::Unknown, 0), 0);
        // Awake at 1_200, and its statement runs since.
        assert_eq!(run_time_us(900_000, 1_200, 1_000, Activity::Since(1_100), 0), 898_800);
        // Admitted at once: the grant and the wake-up are one instant.
        assert_eq!(run_time_us(5_000, 1_000, 1_000, Activity::Unknown, 0), 4_000);
    }

    #[test]
    fn a_statement_runs_from_its_own_start_not_from_the_last_one() {
        // Its last statement ran at 1_000; the client thought for 10 s.
        let (run_start, granted) = (1_000, 500);
        // It has read the next command and not started it.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Between, 0), 0);
        // Parse analysis of the command that became active at 9_990_000.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Since(9_990_000), 0), 10_000);
        // Without activity tracking, only the hooks' run start tells.
        assert_eq!(run_time_us(10_000_000, run_start, granted, Activity::Unknown, 0), 9_999_000);
    }

    #[test]
    fn a_step_forward_of_the_wall_clock_is_not_running_time() {
        let mut steps = WallSteps::default();
        assert_eq!(steps.observe(1_000_000, 500), None);
        // 100 ms on both clocks, and a slew within the tolerance.
        assert_eq!(steps.observe(1_100_000, 100_500), None);
        assert_eq!(steps.observe(1_210_000, 200_500), None);
        assert_eq!(steps.floor_us, 0);
        // The wall clock jumps 60 s ahead while 100 ms pass.
        assert_eq!(steps.observe(61_310_000, 300_500), Some(60_000_000));
        assert_eq!(steps.floor_us, 61_310_000);
        // A statement that started 50 ms before the step, granted before it:
        // not 60 s old, but measured from the step.
        let (granted, started) = (1_150_000, 1_160_000);
        let later = 61_410_000;
        assert_eq!(run_time_us(later, started, granted, Activity::Since(started), steps.floor_us), 100_000);
        assert_eq!(run_time_us(later, started, granted, Activity::Unknown, steps.floor_us), 100_000);
        // One that started after the step is measured from its own start.
        assert_eq!(run_time_us(later, 61_400_000, granted, Activity::Since(61_400_000), steps.floor_us), 10_000);
        // Set right 100 ms later: the floor goes back with the clock (left
        // ahead of it, every run would read as not started for a minute),
        // and a statement that started since is measured from its own start.
        assert_eq!(steps.observe(1_410_000, 400_500), None);
        assert_eq!(steps.floor_us, 1_310_000);
        let now = 3_410_000;
        assert_eq!(run_time_us(now, 1_400_000, 1_350_000, Activity::Since(1_400_000), steps.floor_us), 2_010_000);
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
