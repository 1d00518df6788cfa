//! The progress guarantee (docs/DESIGN.md §13): the queue never waits
//! forever.
//!
//! A parked session waits for a place, and a place frees up only when a
//! holder that counts ends its transaction. If every such holder waits for
//! something that itself waits for the queue, nothing ever frees up: a lock
//! holder idle in transaction whose client waits for a query the gate
//! parked, a `dblink` call into the same server, a distributed transaction
//! whose other half is parked on another node. PostgreSQL's deadlock
//! detector sees none of these cycles, because one of its edges runs
//! through the queue, a client or another server, and the gate cannot see
//! the other edges.
//!
//! So instead of looking for cycles, the worker watches for their effect,
//! as MySQL's thread pool does with `thread_pool_stall_limit`: a *scope*
//! (the whole gate, or one class with sessions queued) that has sessions
//! queued, has admitted nobody, and none of whose counting holders has
//! worked for `progress_timeout`, is stuck; its head is admitted over the
//! limit (or, for a class held back by the gate rather than its cap, goes
//! first at the next free place), and the clock starts again. A holder
//! *works* when it is on a CPU or doing I/O; waiting on a lock, on its
//! client, on a sleep or on anything outside the server is not work.
//!
//! The bound: the rule admits one batch per `progress_timeout` and scope,
//! and only while no counting holder of that scope works. Batches double
//! while the scope stays stuck (1, 2, 4, ... at most the limit), so that a
//! session parked behind others that will only wait too (lock waiters
//! parked at BEGIN) gets in after a few timeouts, not one per waiter ahead
//! of it. Sessions admitted this way are holders like any other: one that
//! goes on to compute stops the next batch, and ordinary admissions wait
//! until the holders that count are below the tickets again. So the gate
//! can be pushed over its limit only by holders that all do nothing for a
//! whole timeout, a batch at a time. Work that moves, however slowly,
//! never triggers it.

/// How long a scope must be quiet before its computing-looking holders are
/// probed for CPU time (the glue reads `/proc` only then), at most half the
/// timeout.
pub const PROBE_AFTER_US: i64 = 100_000;

/// Where a scope stands after a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Sessions move (or none wait): nothing to do.
    Moving,
    /// Nothing moved for a while. With `probe`, the glue should probe the
    /// scope's holders that show no wait event (are they really on a CPU?).
    Quiet { probe: bool },
    /// Nothing moved for the whole timeout: admit this many sessions from
    /// the scope's queue, head first.
    Stuck { batch: u32 },
}

/// What one sample saw of one scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeSample {
    /// Sessions wait that this scope holds back (the gate is full, or the
    /// class is at its cap or held back by the gate).
    pub blocked: bool,
    /// The scope's admissions within the limits so far (any counter that
    /// rises with each): the batches of a stuck scope, and the deadlock
    /// breaker's admissions, are over the limit and do not count, so that
    /// neither ends a streak nor hides a stuck queue.
    pub admitted: u64,
    /// A counting holder of the scope works: shows an I/O or LWLock wait,
    /// or was found on a CPU by a probe.
    pub working: bool,
    /// A holder shows no wait event and no probe has told yet whether it
    /// is on a CPU: no verdict of `Stuck` until one has.
    pub unverified: bool,
}

/// The watch over one scope, kept by the worker between samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    quiet_since: Option<i64>,
    admitted: u64,
    /// Stuck verdicts in a row: the next batch is 2^streak.
    streak: u32,
}

impl Watch {
    /// Fold in a sample taken at `now_us`. Batches are at most `max_batch`
    /// (the limit; at least 1).
    pub fn observe(&mut self, now_us: i64, s: ScopeSample, timeout_us: i64, max_batch: u32) -> Verdict {
        // Admissions within the limits move the scope; those over it (a
        // batch's, the deadlock breaker's) are not counted. A counter that
        // went back was reset (`gatekeeper.reset()`): that counts as moving
        // once, or admissions would not count until they passed the old
        // value.
        let moved = s.admitted != self.admitted;
        self.admitted = s.admitted;
        if !s.blocked || moved || s.working {
            self.quiet_since = s.blocked.then_some(now_us);
            self.streak = 0;
            return Verdict::Moving;
        }
        // A clock that stepped back starts the quiet time again.
        let since = match self.quiet_since {
            Some(t) if t <= now_us => t,
            _ => *self.quiet_since.insert(now_us),
        };
        let quiet = now_us - since;
        if quiet >= timeout_us && !s.unverified {
            // The next one needs another whole timeout of quiet.
            self.quiet_since = Some(now_us);
            let batch = 1u32.checked_shl(self.streak).unwrap_or(u32::MAX).min(max_batch.max(1));
            self.streak = self.streak.saturating_add(1);
            return Verdict::Stuck { batch };
        }
        Verdict::Quiet { probe: quiet >= PROBE_AFTER_US.min(timeout_us / 2) }
    }
}

/// What a process's `/proc/PID/stat` says about its use of the CPU: its
/// scheduler state (`R` running or runnable, `D` in uninterruptible I/O,
/// `S` asleep...) and its CPU time so far in clock ticks (user + system).
pub fn parse_proc_stat(text: &str) -> Option<(char, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: the fields after it follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // After the state: ppid pgrp session tty_nr tpgid flags minflt cminflt
    // majflt cmajflt utime stime.
    let mut f = f.skip(10);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((state, utime + stime))
}

/// Microseconds in one tick of `/proc/PID/stat`'s CPU times (`USER_HZ`,
/// 100 on Linux whatever the kernel's own tick).
const TICK_US: i64 = 10_000;
/// The least share of one CPU that a process must have used between two
/// readings to count as computing: a fifth.
const SHARE_DIVISOR: i64 = 5;

/// A probe's answer for one process, from two readings of its
/// `/proc/PID/stat` `window_us` apart: in disk I/O now, or it used at
/// least a fifth of a CPU in between, or it is on a CPU now and used some.
///
/// A process that sleeps without a wait event and wakes often to poll
/// (Citus's `run_command_on_*` waits for its connections in a
/// `pg_usleep` loop) crosses a tick boundary now and then, and is caught
/// running at times; counting either alone as work let a handful of such
/// pollers keep a stuck scope looking busy for seconds at a time, and a
/// wait cycle through them moved one session per 5-20 s. Computing takes
/// ticks by the window's worth.
pub fn probe_works(state: char, ticks: u64, last_ticks: u64, window_us: i64) -> bool {
    let used_us = (ticks.saturating_sub(last_ticks) as i64).saturating_mul(TICK_US);
    state == 'D' || used_us.saturating_mul(SHARE_DIVISOR) >= window_us.max(1) || (state == 'R' && ticks > last_ticks)
}

/// The answer of a first reading, or of one too soon after the last to
/// compare: only disk I/O tells; a running state may be a poller's
/// moment awake.
pub fn probe_works_now(state: char) -> Option<bool> {
    (state == 'D').then_some(true)
}

/// How long the worker must have been away, and a queue still, before its
/// head admits itself ([`HeadWatch`]), at least; see [`workerless_bound`].
pub const WORKERLESS_AFTER_US: i64 = 10_000_000;

/// The bound of [`HeadWatch`]: 10 s, or `progress_timeout` if longer, or
/// three of the worker's sample intervals if longer still (a worker that
/// samples every 10 s is not away after 10 s).
pub fn workerless_bound(progress_timeout_us: i64, sample_interval_us: i64) -> i64 {
    WORKERLESS_AFTER_US.max(progress_timeout_us).max(sample_interval_us.saturating_mul(3))
}

/// How often a parked session behind its queue's head looks while the
/// worker is away ([`HeadWatch`]): the head ahead of it may leave, or be
/// admitted, without waking it, and the bound counts from the queue's last
/// admission as the session saw it.
pub const BEHIND_LOOK_US: i64 = 1_000_000;

/// What a parked session at the head of its class's queue does next, by
/// [`HeadWatch::look`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// Admit itself over the limit: the worker is away and the queue stood
    /// still for the bound.
    Admit,
    /// Look again at this time (microseconds) at the latest.
    Again { at_us: i64 },
}

/// The progress guarantee while the worker is away (docs/DESIGN.md §13,
/// "Without the worker"). The guarantee and the deadlock breaker run in the
/// worker; without it (not started because `max_worker_processes` was
/// full, ended and not yet back, or wedged) a cycle through a client would
/// hold the queue forever. So each parked session watches its class's
/// admissions: once the worker has not sampled for the bound
/// ([`workerless_bound`]) and its class
/// admitted nobody for as long, the queue's head admits itself over the
/// limit. Without the worker's view of the holders it cannot tell a queue
/// held by waiting holders from one held by working ones, so it takes one
/// session per bound and class, never a batch: a slow drip that ends every
/// wait, not a way around the limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadWatch {
    /// The class's admissions at the last look that changed them.
    seen: Option<u64>,
    /// Since when they have not changed.
    since_us: i64,
}

impl HeadWatch {
    /// One look at `now`: `admitted`, the session's class's admissions so
    /// far; `sampled_at_us`, when the worker last sampled (0: never);
    /// `head`, whether the session is its class's queue's head.
    /// `bound`: [`workerless_bound`]. `now` and `sampled_at_us` are read
    /// from a clock that never steps, the same in every process: a step of
    /// the wall clock neither hides a worker that is away (a stamp that
    /// seemed to lie ahead, for as long as the step) nor shows one that is
    /// there as away (a stamp that seemed to lie a step behind).
    pub fn look(&mut self, now: i64, admitted: u64, sampled_at_us: i64, head: bool, bound: i64) -> Look {
        if self.seen != Some(admitted) {
            self.seen = Some(admitted);
            self.since_us = now;
        }
        // Never sampled: not there since the server started.
        let away = sampled_at_us == 0 || now.saturating_sub(sampled_at_us) >= bound;
        let still = now - self.since_us >= bound;
        if head && away && still {
            self.since_us = now;
            return Look::Admit;
        }
        // Behind the head while the worker is away: nobody wakes this
        // session when the head ahead of it leaves (a timeout, a cancel, a
        // hand-off), so it looks often enough to start its watch in time.
        if !head && away {
            return Look::Again { at_us: now + BEHIND_LOOK_US.min(bound) };
        }
        Look::Again { at_us: (self.since_us + bound).max(sampled_at_us.min(now) + bound) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_000_000;

    fn quiet(admitted: u64) -> ScopeSample {
        ScopeSample { blocked: true, admitted, working: false, unverified: false }
    }

    #[test]
    fn a_scope_that_moves_is_never_stuck() {
        let mut w = Watch::default();
        for step in 0..100 {
            // One admission every 10 samples of 50 ms: slow, but moving.
            let v = w.observe(step * 50_000, quiet(step as u64 / 10), T, 8);
            assert!(!matches!(v, Verdict::Stuck { .. }), "step {step}");
        }
    }

    #[test]
    fn a_working_holder_keeps_the_scope_from_being_stuck() {
        let mut w = Watch::default();
        for step in 0..100 {
            let s = ScopeSample { working: step % 7 == 0, ..quiet(5) };
            assert!(!matches!(w.observe(step * 50_000, s, T, 8), Verdict::Stuck { .. }), "step {step}");
        }
    }

    #[test]
    fn a_quiet_scope_is_stuck_once_per_timeout_with_doubling_batches() {
        let mut w = Watch::default();
        let mut stuck = vec![];
        for step in 0..=100 {
            let now = step * 50_000;
            // The batches' admissions are over the limit: not counted.
            if let Verdict::Stuck { batch } = w.observe(now, quiet(0), T, 4) {
                stuck.push((now, batch));
            }
        }
        assert_eq!(stuck, vec![(1_000_000, 1), (2_000_000, 2), (3_000_000, 4), (4_000_000, 4), (5_000_000, 4)]);
    }

    #[test]
    fn an_admission_by_others_ends_the_streak() {
        let mut w = Watch::default();
        assert_eq!(w.observe(0, quiet(0), T, 8), Verdict::Quiet { probe: false });
        assert_eq!(w.observe(1_000_000, quiet(0), T, 8), Verdict::Stuck { batch: 1 });
        assert_eq!(w.observe(2_000_000, quiet(0), T, 8), Verdict::Stuck { batch: 2 });
        // Somebody else got in: moving, and the next batch starts at 1.
        assert_eq!(w.observe(2_050_000, quiet(1), T, 8), Verdict::Moving);
        assert_eq!(w.observe(3_050_000, quiet(1), T, 8), Verdict::Stuck { batch: 1 });
    }

    #[test]
    fn probes_start_after_a_short_quiet_and_unverified_holders_defer_the_verdict() {
        let mut w = Watch::default();
        assert_eq!(w.observe(0, quiet(1), T, 8), Verdict::Moving);
        assert_eq!(w.observe(50_000, quiet(1), T, 8), Verdict::Quiet { probe: false });
        assert_eq!(w.observe(100_000, quiet(1), T, 8), Verdict::Quiet { probe: true });
        let unverified = ScopeSample { unverified: true, ..quiet(1) };
        assert_eq!(w.observe(1_200_000, unverified, T, 8), Verdict::Quiet { probe: true });
        assert_eq!(w.observe(1_250_000, quiet(1), T, 8), Verdict::Stuck { batch: 1 });
    }

    #[test]
    fn a_queue_that_empties_without_admissions_starts_afresh() {
        let mut w = Watch::default();
        w.observe(0, quiet(3), T, 8);
        w.observe(900_000, quiet(3), T, 8);
        // The waiters time out: nothing queued, nobody admitted.
        assert_eq!(w.observe(950_000, ScopeSample { blocked: false, ..quiet(3) }, T, 8), Verdict::Moving);
        // A new queue, long after: not stuck before a whole timeout of its own.
        assert_eq!(w.observe(5_000_000, quiet(3), T, 8), Verdict::Quiet { probe: false });
        assert_eq!(w.observe(5_900_000, quiet(3), T, 8), Verdict::Quiet { probe: true });
        assert_eq!(w.observe(6_000_000, quiet(3), T, 8), Verdict::Stuck { batch: 1 });
    }

    #[test]
    fn admissions_after_a_reset_of_the_counters_still_count() {
        let mut w = Watch::default();
        w.observe(0, quiet(500), T, 8);
        // The statistics are reset; sessions go on being admitted, slowly,
        // below the old count.
        for step in 1..100 {
            let v = w.observe(step * 50_000, quiet(step as u64 / 10), T, 8);
            assert!(!matches!(v, Verdict::Stuck { .. }), "step {step}");
        }
    }

    #[test]
    fn nothing_waits_nothing_to_do() {
        let mut w = Watch::default();
        for step in 0..100 {
            let s = ScopeSample { blocked: false, ..quiet(0) };
            assert_eq!(w.observe(step * 100_000, s, T, 8), Verdict::Moving);
        }
    }

    #[test]
    fn a_clock_that_steps_back_restarts_the_quiet_time() {
        let mut w = Watch::default();
        w.observe(5_000_000, quiet(1), T, 8);
        w.observe(5_500_000, quiet(1), T, 8);
        assert_eq!(w.observe(1_000_000, quiet(1), T, 8), Verdict::Quiet { probe: false });
        assert_eq!(w.observe(1_900_000, quiet(1), T, 8), Verdict::Quiet { probe: true });
        assert_eq!(w.observe(2_000_000, quiet(1), T, 8), Verdict::Stuck { batch: 1 });
    }

    #[test]
    fn proc_stat_is_parsed_past_a_command_name_with_parentheses() {
        let line = "4242 (postgres: app (x) 1) S 1 4242 4242 0 -1 4194560 983 0 0 0 17 5 0 0 20 0 1 0 1234 0 0";
        assert_eq!(parse_proc_stat(line), Some(('S', 22)));
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(parse_proc_stat("1 (x) R 1 2"), None);
    }

    #[test]
    fn a_probe_counts_disk_io_or_a_share_of_a_cpu_not_a_pollers_moments() {
        const W: i64 = 100_000;
        // Disk I/O, or a fifth of a CPU over the window (2 ticks of 10 ms in
        // 100 ms), whatever the state.
        assert!(probe_works('D', 10, 10, W));
        assert!(probe_works('S', 12, 10, W));
        assert!(probe_works('R', 30, 10, W));
        // A poller: one tick crossed in the window, asleep or caught awake
        // without CPU time used.
        assert!(!probe_works('S', 11, 10, W));
        assert!(!probe_works('R', 10, 10, W));
        assert!(!probe_works('S', 10, 10, W));
        // Awake and using some: on a CPU it shares with others.
        assert!(probe_works('R', 11, 10, W));
        // A longer window needs more: 2 ticks in a second is a fiftieth.
        assert!(!probe_works('S', 12, 10, 10 * W));
        assert!(probe_works('S', 30, 10, 10 * W));
        // Ticks that went back (a reused PID) are no work; a zero window is
        // taken as the shortest.
        assert!(!probe_works('S', 5, 10, W));
        assert!(probe_works('S', 11, 10, 0));
        assert_eq!(probe_works_now('D'), Some(true));
        assert_eq!(probe_works_now('R'), None);
        assert_eq!(probe_works_now('S'), None);
    }

    // -- HeadWatch: the guarantee without the worker ------------------------

    const S: i64 = 1_000_000;
    /// The bound at the defaults (progress_timeout 1 s, samples every 5 ms).
    const B: i64 = 10 * S;

    #[test]
    fn a_head_admits_itself_once_the_worker_is_away_and_its_queue_still_for_the_bound() {
        let mut w = HeadWatch::default();
        // The worker never sampled (0); the queue starts still at 5 s.
        assert_eq!(w.look(5 * S, 7, 0, true, B), Look::Again { at_us: 15 * S });
        assert_eq!(w.look(14 * S, 7, 0, true, B), Look::Again { at_us: 15 * S });
        assert_eq!(w.look(15 * S, 7, 0, true, B), Look::Admit);
        // Its own admission moves the count: the next head waits a bound again.
        assert_eq!(w.look(15 * S, 8, 0, true, B), Look::Again { at_us: 25 * S });
    }

    #[test]
    fn nobody_admits_itself_while_the_worker_samples() {
        let mut w = HeadWatch::default();
        for t in 0..100 {
            // The worker sampled a moment ago at every look.
            assert!(matches!(w.look(t * S, 7, t * S - 100_000, true, B), Look::Again { .. }));
        }
        // It stops: a bound after its last sample, and not before.
        assert_eq!(w.look(105 * S, 7, 99 * S, true, B), Look::Again { at_us: 109 * S });
        assert_eq!(w.look(109 * S, 7, 99 * S, true, B), Look::Admit);
    }

    #[test]
    fn a_queue_that_moves_or_a_session_behind_the_head_admits_nobody() {
        let mut w = HeadWatch::default();
        for t in 0..100 {
            assert!(matches!(w.look(t * S, t as u64, 0, true, B), Look::Again { .. }), "moving at {t}");
        }
        let mut behind = HeadWatch::default();
        // From 10 s on: the worker, which never sampled, is away a bound.
        for t in 10..100 {
            // Behind the head, it looks again within a second: nobody
            // wakes it when the head leaves.
            assert_eq!(behind.look(t * S, 7, 0, false, B), Look::Again { at_us: t * S + S }, "behind at {t}");
        }
        // Once it is the head, after the bound it has watched already.
        assert_eq!(behind.look(100 * S, 7, 0, true, B), Look::Admit);
    }

    #[test]
    fn behind_the_head_the_watch_counts_from_the_admission_it_saw_within_a_second() {
        let mut behind = HeadWatch::default();
        // The worker never sampled (0): at 20 s it is away.
        assert_eq!(behind.look(20 * S, 7, 0, false, B), Look::Again { at_us: 21 * S });
        // The head ahead was admitted at 20.5 s, waking nobody; seen at 21 s.
        assert_eq!(behind.look(21 * S, 8, 0, false, B), Look::Again { at_us: 22 * S });
        // Now the head, it admits itself a bound after it saw the admission.
        assert_eq!(behind.look(22 * S, 8, 0, true, B), Look::Again { at_us: 31 * S });
        assert_eq!(behind.look(31 * S, 8, 0, true, B), Look::Admit);
        // While the worker samples, a session behind the head waits to be woken.
        let mut w = HeadWatch::default();
        assert_eq!(w.look(50 * S, 7, 50 * S - 1000, false, B), Look::Again { at_us: 60 * S });
    }

    #[test]
    fn the_bound_is_10_s_or_progress_timeout_or_three_samples() {
        assert_eq!(workerless_bound(S, 5_000), 10 * S);
        assert_eq!(workerless_bound(60 * S, 5_000), 60 * S);
        assert_eq!(workerless_bound(S, 10 * S), 30 * S);
        let mut w = HeadWatch::default();
        let b = workerless_bound(60 * S, 5_000);
        assert_eq!(w.look(0, 7, 0, true, b), Look::Again { at_us: 60 * S });
        assert!(matches!(w.look(59 * S, 7, 0, true, b), Look::Again { .. }));
        assert_eq!(w.look(60 * S, 7, 0, true, b), Look::Admit);
    }

    #[test]
    fn a_worker_that_never_sampled_is_away_from_the_start() {
        // The monotonic clock starts when the server does: a second into
        // it, a sample taken "at 0" would be a second old, but 0 means none.
        let mut behind = HeadWatch::default();
        assert_eq!(behind.look(S, 7, 0, false, B), Look::Again { at_us: 2 * S });
        let mut head = HeadWatch::default();
        assert_eq!(head.look(S, 7, 0, true, B), Look::Again { at_us: 11 * S });
        assert_eq!(head.look(11 * S, 7, 0, true, B), Look::Admit);
    }

    #[test]
    fn a_stamp_from_a_clock_that_seems_ahead_still_reads_as_a_sample() {
        // The clocks never step; a stamp past `now` can only be a sample
        // taken between the reads: the worker is there.
        let mut w = HeadWatch::default();
        assert_eq!(w.look(50 * S, 7, 50 * S + 10, true, B), Look::Again { at_us: 60 * S });
        assert_eq!(w.look(60 * S, 7, 60 * S + 10, true, B), Look::Again { at_us: 70 * S });
        // It stops sampling: a bound after its last sample, not later.
        assert_eq!(w.look(70 * S, 7, 60 * S + 10, true, B), Look::Again { at_us: 70 * S + 10 });
        assert_eq!(w.look(70 * S + 10, 7, 60 * S + 10, true, B), Look::Admit);
    }
}
