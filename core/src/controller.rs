//! How the worker moves the ticket count (docs/DESIGN.md §6).
//!
//! `limit` is the target number of *running* holders: admitted transactions
//! that use the server (running a statement, or blocked on a lock or I/O).
//! Holders that wait on their own client do not use the CPUs, so while
//! sessions are queued and the sampled running count stays below the
//! target, more tickets are issued: as many per step as the running count
//! falls short of the target (less the margin), at least one, and never
//! more than are queued. Slow clients that leave most holders idle get
//! their tickets within a few steps instead of one step per ticket. When the
//! running count goes above the target, as many tickets as there are
//! running holders too many are taken back at once, by not re-issuing them
//! at the next releases (proportional decrease): after slow clients have
//! been lent hundreds of tickets, a switch to CPU-bound work must not take
//! hundreds of steps to undo. Tickets never leave `[limit, ceiling]`.
//! With nobody queued, tickets beyond the recent demand (the most sessions
//! that held or waited for an admission at once over the last one to two
//! seconds, [`DemandWindow`]) plus a limit's worth are cut back at once: a
//! burst after slow clients have gone meets the target rather than a stale,
//! inflated ticket count, while slow clients that are still there keep the
//! tickets they use. Cutting to what is held *now* would churn: 1000 slow
//! clients whose holders come and go would lose hundreds of tickets every
//! time the queue emptied for a moment, queue again, and wait while the
//! count grew back.
//!
//! Optionally, lending also waits for the CPUs to have time to spare
//! (`Sample::lend_min_idle`, the `lend_min_cpu_idle` setting): tickets are
//! then added only while at least that fraction of the CPU time is idle,
//! and lent tickets are taken back while the idle fraction is below
//! [`RECLAIM_FRACTION`] of it. With 0 (the default) the running-holder rule
//! alone decides; bench/README.md ("Choosing the defaults") says why.
//!
//! The running count is smoothed ([`smooth`]) and compared with a margin of
//! half a session ([`HYSTERESIS`]). A holder caught in the fraction of a
//! millisecond between its BEGIN and its next statement looks idle to one
//! sample; acting on that single sample would lend its place while it is
//! about to run, and overshoot the target.

/// Margin around the target, in sessions, before the controller acts.
pub const HYSTERESIS: f64 = 0.5;
/// With a CPU-idle condition, lent tickets are taken back while the idle
/// fraction is below this share of `lend_min_idle`.
pub const RECLAIM_FRACTION: f64 = 0.3;

/// Length of one window of [`DemandWindow`], in microseconds.
pub const DEMAND_WINDOW_US: i64 = 1_000_000;

/// The recent demand for admissions: the most sessions that held or waited
/// for one at once, over the current window and the one before it (so
/// between one and two windows of history).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DemandWindow {
    start_us: i64,
    current: u32,
    previous: u32,
}

impl DemandWindow {
    /// Fold in the gate's peak since the last call; returns the recent demand.
    pub fn observe(&mut self, now_us: i64, peak: u32) -> u32 {
        // A clock that stepped back starts a new window too (the old one
        // counting as the one before), or the window would stay open, and
        // the demand stale, until the clock caught up.
        if now_us - self.start_us >= DEMAND_WINDOW_US || now_us < self.start_us {
            // A window with no observation at all counts as empty.
            self.previous = if now_us - self.start_us >= 2 * DEMAND_WINDOW_US { 0 } else { self.current };
            self.current = 0;
            self.start_us = now_us;
        }
        self.current = self.current.max(peak);
        self.current.max(self.previous)
    }
}

/// Where a measurement window stands (the worker's throughput and CPU
/// windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Still open: wait.
    Open,
    /// Ended after this many microseconds: measure, and start the next.
    Ended(i64),
    /// None yet, or it ran past twice its length (the worker slept while
    /// nothing was queued, so it would describe the quiet before a burst),
    /// or the clock stepped back: start afresh without a measurement.
    Restart,
}

/// Where a window of `len` µs that began at `start` stands at `now`, for a
/// caller that looks every `step` µs (the sampling interval). A window is
/// never shorter than one step: windows shorter than the steps between two
/// looks would never be seen to end in time, and every one would restart.
pub fn window(start: Option<i64>, now: i64, len: i64, step: i64) -> Window {
    let len = len.max(step);
    match start.map(|at| now - at) {
        Some(d) if (0..len).contains(&d) => Window::Open,
        Some(d) if (len..=2 * len).contains(&d) => Window::Ended(d),
        _ => Window::Restart,
    }
}

/// Weight of the newest sample in the running average.
pub const SMOOTHING: f64 = 0.1;

/// Fold a new sample of running holders into the running average. `None`
/// starts a new average (a queue just formed): it starts from the target,
/// so that the first sample alone cannot make the controller act.
pub fn smooth(avg: Option<f64>, running: u32, limit: u32) -> f64 {
    let avg = avg.unwrap_or(limit as f64);
    avg + SMOOTHING * (running as f64 - avg)
}

/// One sample of the gate, as the worker sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub limit: u32,
    /// Upper bound for tickets (`limit` disables lending).
    pub ceiling: u32,
    pub tickets: u32,
    pub holders: u32,
    /// Recent demand ([`DemandWindow`]): never less than `holders + queued`.
    pub demand: u32,
    /// Holders seen using the server (not waiting on their client),
    /// smoothed over recent samples.
    pub running: f64,
    /// Sessions queued that a ticket could admit (not those that only their
    /// class's cap holds back).
    pub queued: u32,
    /// Fraction of CPU time idle over the recent past (1.0 when unknown).
    pub cpu_idle: f64,
    /// Lend only while `cpu_idle` is at least this (0 = no CPU condition).
    pub lend_min_idle: f64,
}

/// The ticket count for the next interval.
pub fn next_tickets(s: Sample) -> u32 {
    let ceiling = s.ceiling.max(s.limit);
    let t = s.tickets.clamp(s.limit, ceiling);
    let target = s.limit as f64;
    let next = if s.running > target + HYSTERESIS {
        // Over the margin, so at least one; `running` is bounded by the
        // backends, so the cast holds.
        t.saturating_sub((s.running - target).ceil() as u32)
    } else if s.queued > 0 && s.running < target - HYSTERESIS && s.cpu_idle >= s.lend_min_idle {
        // As many as the running holders fall short of the target, and no
        // more than are waiting: at least one.
        let short = (target - HYSTERESIS - s.running).floor() as u32;
        t.saturating_add(short.clamp(1, s.queued))
    } else if s.lend_min_idle > 0.0 && s.cpu_idle < s.lend_min_idle * RECLAIM_FRACTION {
        t.saturating_sub(1)
    } else if s.queued == 0 && t > s.demand.max(s.holders).saturating_add(s.limit) {
        // Nobody waits: keep what was recently used and a limit's worth
        // more, so that tickets lent to clients that have gone are not there
        // for a burst.
        s.demand.max(s.holders).saturating_add(s.limit)
    } else {
        t
    };
    next.clamp(s.limit, ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tickets: u32, holders: u32, running: f64, queued: u32) -> Sample {
        Sample {
            limit: 4,
            ceiling: 16,
            tickets,
            holders,
            demand: holders + queued,
            running,
            queued,
            cpu_idle: 1.0,
            lend_min_idle: 0.0,
        }
    }

    #[test]
    fn grows_while_holders_idle_and_sessions_wait() {
        // Target 4, 1 running: 4 - 0.5 - 1 = 2.5, so two more.
        assert_eq!(next_tickets(s(4, 4, 1.0, 10)), 6);
        // Just under the margin: one.
        assert_eq!(next_tickets(s(4, 4, 3.4, 10)), 5);
        // No more than are waiting.
        assert_eq!(next_tickets(s(4, 4, 0.0, 1)), 5);
        assert_eq!(next_tickets(s(16, 16, 1.0, 10)), 16, "capped by the ceiling");
        assert_eq!(next_tickets(s(15, 15, 0.0, 10)), 16, "capped by the ceiling");
    }

    #[test]
    fn shrinks_when_too_many_run() {
        assert_eq!(next_tickets(s(8, 8, 6.0, 10)), 6, "two too many: two back");
        assert_eq!(next_tickets(s(4, 6, 6.0, 10)), 4, "never below the limit");
    }

    #[test]
    fn takes_back_as_many_as_run_too_many() {
        // 200 lent tickets, and 150 of the holders start running at once.
        let x = Sample { ceiling: 512, ..s(204, 204, 150.0, 10) };
        assert_eq!(next_tickets(x), 58);
        // Never below the limit, however many run.
        assert_eq!(next_tickets(Sample { ceiling: 512, ..s(30, 30, 100.0, 10) }), 4);
        // Just over the margin: one.
        assert_eq!(next_tickets(s(8, 8, 4.6, 10)), 7);
    }

    #[test]
    fn holds_at_target() {
        assert_eq!(next_tickets(s(8, 8, 4.0, 10)), 8);
        // Within half a session of the target: no change either way.
        assert_eq!(next_tickets(s(8, 8, 3.6, 10)), 8);
        assert_eq!(next_tickets(s(8, 8, 4.4, 10)), 8);
    }

    #[test]
    fn one_transient_dip_does_not_lend() {
        // Four holders run steadily; one sample catches one of them between
        // statements. The average stays within the margin.
        // Even two samples in a row that each catch two of four holders idle.
        let mut avg = smooth(None, 2, 4);
        avg = smooth(Some(avg), 2, 4);
        assert_eq!(next_tickets(s(4, 4, avg, 10)), 4);
        // A dip every tenth sample never adds up to a lent ticket.
        for k in 0..1000 {
            avg = smooth(Some(avg), if k % 10 == 0 { 3 } else { 4 }, 4);
            assert_eq!(next_tickets(s(4, 4, avg, 10)), 4, "sample {k}");
        }
        // A holder that stays idle is lent after a few samples.
        let mut n = 0;
        while next_tickets(s(4, 4, avg, 10)) == 4 {
            avg = smooth(Some(avg), 3, 4);
            n += 1;
        }
        assert!(n <= 10, "{n} samples");
    }

    #[test]
    fn a_new_average_starts_at_the_target() {
        assert_eq!(smooth(None, 0, 4), 3.6);
        assert_eq!(smooth(Some(0.0), 4, 4), 0.4);
        // An idle holder with limit 1 is lent within three samples.
        let mut avg = smooth(None, 0, 1);
        let mut n = 1;
        while next_tickets(Sample {
            limit: 1,
            ceiling: 8,
            tickets: 1,
            holders: 1,
            demand: 2,
            running: avg,
            queued: 1,
            cpu_idle: 1.0,
            lend_min_idle: 0.0,
        }) == 1
        {
            avg = smooth(Some(avg), 0, 1);
            n += 1;
        }
        assert!((3..=8).contains(&n), "{n} samples");
    }

    #[test]
    fn lock_waiters_count_as_running_so_contention_never_grows_tickets() {
        // Four holders blocked on a lock are sampled as running.
        assert_eq!(next_tickets(s(4, 4, 4.0, 50)), 4);
    }

    #[test]
    fn decays_towards_use_when_nobody_waits() {
        // Three holders and a limit of 4: at most 4 unheld tickets remain.
        assert_eq!(next_tickets(s(10, 3, 1.0, 0)), 7);
        assert_eq!(next_tickets(s(9, 5, 1.0, 0)), 9);
        assert_eq!(next_tickets(s(4, 0, 0.0, 0)), 4);
        // 800 tickets lent to slow clients that have gone: back to the limit.
        assert_eq!(next_tickets(Sample { ceiling: 1000, ..s(800, 0, 0.0, 0) }), 4);
    }

    #[test]
    fn keeps_the_tickets_recent_demand_used() {
        // 700 slow clients held 690 tickets a moment ago; now the queue is
        // empty and 300 hold one. Keep the recent peak and a limit's worth.
        let x = Sample { ceiling: 1000, demand: 690, ..s(800, 300, 1.0, 0) };
        assert_eq!(next_tickets(x), 694);
        assert_eq!(next_tickets(Sample { demand: 800, ..x }), 800, "all of them were used");
        // The demand never hides what is held now.
        assert_eq!(next_tickets(Sample { demand: 0, ..x }), 304);
    }

    #[test]
    fn windows_open_end_or_restart() {
        assert_eq!(window(None, 100, 10, 1), Window::Restart);
        assert_eq!(window(Some(100), 105, 10, 1), Window::Open);
        assert_eq!(window(Some(100), 110, 10, 1), Window::Ended(10));
        assert_eq!(window(Some(100), 120, 10, 1), Window::Ended(20));
        assert_eq!(window(Some(100), 121, 10, 1), Window::Restart, "ran long");
        assert_eq!(window(Some(100), 99, 10, 1), Window::Restart, "clock stepped back");
    }

    /// Looked at every step, windows end, however long the steps.
    #[test]
    fn windows_end_when_looked_at_less_often_than_their_length() {
        for (len, step) in [(500_000, 5_000), (500_000, 1_001_000), (200_000, 401_000), (500_000, 10_000_000)] {
            let (mut start, mut ended) = (None, 0);
            for k in 0..100 {
                let now = k * step;
                match window(start, now, len, step) {
                    Window::Open => continue,
                    Window::Ended(_) => ended += 1,
                    Window::Restart => {}
                }
                start = Some(now);
            }
            assert!(ended >= 100 * step / len.max(step) / 2 - 1, "len {len} step {step}: {ended} ended");
        }
    }

    #[test]
    fn demand_window_remembers_one_to_two_windows() {
        let w = DEMAND_WINDOW_US;
        let mut d = DemandWindow::default();
        assert_eq!(d.observe(w, 500), 500);
        assert_eq!(d.observe(w + w / 2, 20), 500, "same window");
        assert_eq!(d.observe(2 * w + 1, 30), 500, "the window before");
        assert_eq!(d.observe(3 * w + 2, 40), 40, "two windows on: forgotten");
        // A long silence (the worker sleeps while nobody is queued) forgets all.
        assert_eq!(d.observe(3 * w + w / 2, 900), 900);
        assert_eq!(d.observe(10 * w, 10), 10);
        // The clock steps back an hour: a new window at once, the old one
        // remembered as the one before, then forgotten a window later.
        let back = 10 * w - 3600 * w;
        assert_eq!(d.observe(back, 5), 10);
        assert_eq!(d.observe(back + w / 2, 6), 10, "same window");
        assert_eq!(d.observe(back + w + 1, 7), 7);
    }

    #[test]
    fn ceiling_equal_to_limit_disables_lending() {
        let x = Sample {
            limit: 2,
            ceiling: 2,
            tickets: 2,
            holders: 2,
            demand: 7,
            running: 0.0,
            queued: 5,
            cpu_idle: 1.0,
            lend_min_idle: 0.0,
        };
        assert_eq!(next_tickets(x), 2);
    }

    #[test]
    fn out_of_range_tickets_are_pulled_back() {
        let x = Sample {
            limit: 4,
            ceiling: 6,
            tickets: 20,
            holders: 0,
            demand: 0,
            running: 0.0,
            queued: 0,
            cpu_idle: 1.0,
            lend_min_idle: 0.0,
        };
        // Nobody holds them: back to the limit.
        assert_eq!(next_tickets(x), 4);
    }

    #[test]
    fn with_a_cpu_condition_lends_only_while_the_cpus_have_time_to_spare() {
        let busy = |idle: f64| Sample { cpu_idle: idle, lend_min_idle: 0.10, ..s(8, 8, 1.0, 50) };
        assert_eq!(next_tickets(busy(0.5)), 10, "idle CPUs: lend");
        assert_eq!(next_tickets(busy(0.05)), 8, "nearly busy: hold");
        assert_eq!(next_tickets(busy(0.01)), 7, "saturated: take lent tickets back");
        let at_limit = Sample { cpu_idle: 0.0, lend_min_idle: 0.10, ..s(4, 4, 1.0, 50) };
        assert_eq!(next_tickets(at_limit), 4, "never below the limit");
    }

    #[test]
    fn without_a_cpu_condition_the_holders_alone_decide() {
        let busy = |idle: f64| Sample { cpu_idle: idle, ..s(8, 8, 1.0, 50) };
        assert_eq!(next_tickets(busy(0.0)), 10, "idle holders: lend, however busy the CPUs");
        assert_eq!(next_tickets(Sample { cpu_idle: 0.0, ..s(8, 8, 4.0, 50) }), 8, "on target: hold");
    }
}
