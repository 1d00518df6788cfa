//! The adaptive limit (docs/DESIGN.md §9): how the worker moves the target
//! number of running holders between a floor and a ceiling when the limit
//! is automatic (`max_active = 0`).
//!
//! The fixed automatic limit, `active_per_cpu` per CPU, fits CPU-bound work.
//! Transactions that wait inside the server (on I/O, a foreign server, a
//! sleep) count as running while they wait, so a fixed limit caps them at
//! `limit / wait` transactions a second while the CPUs idle. The one signal
//! that separates the two cases, and that the worker can read cheaply, is
//! the idle time of the CPUs the server may run on, over a window of
//! [`WINDOW_US`]:
//!
//! - **Grow** by an eighth (at least one) when sessions are queued, so the
//!   limit binds; the places are used by holders that do work ([`Signals::
//!   working`]: not waiting on their client, not waiting on a lock); and the
//!   CPUs were at least [`GROW_MIN_IDLE`] idle. Work waits while the CPUs
//!   have time to spare: more running holders can use it.
//!   And fewer holders compute ([`Signals::computing`]: on a CPU or waiting
//!   for one) than the floor: the places are taken by holders that wait.
//! - **Shrink** by a sixteenth (at least one) while the limit is above its
//!   floor and either the CPUs are saturated (idle below
//!   [`SHRINK_MAX_IDLE`]: more running holders only lengthen the run queue)
//!   or more holders compute at once than the floor allows (an eighth more,
//!   at least half a session): the work has turned CPU-bound, and the CPUs
//!   may still show idle time from lock and WAL waits. Idle time alone
//!   cannot tell the two apart: CPU-bound TPC-B with 1000 clients here
//!   leaves 4-5 % idle, as does wait-bound work at its knee.
//! - Otherwise **hold**. The band between the two thresholds, the smaller
//!   step down than up and one move per window keep it from oscillating.
//!
//! Lock waiters are not evidence for growth: a pile-up behind a hot lock
//! leaves the CPUs idle and sessions queued, and admitting more work behind
//! the lock only lengthens it (stall relief, §5, deals with long waits).
//! Nor are holders waiting on their clients: the ticket controller already
//! lends their places. So the limit never grows while places sit unused.
//!
//! The floor is `active_per_cpu` per CPU, the limit measured best for
//! CPU-bound work here (see the benchmark in bench/README.md); below it
//! the shrink rule has no signal to go by, because saturated CPUs look the
//! same at the knee and past it.

/// Window over which the CPUs' idle time is measured and the limit may move
/// once. /proc/stat counts in 10 ms ticks: 200 ms on one CPU is 20 ticks,
/// a 5 % resolution.
pub const WINDOW_US: i64 = 200_000;
/// Grow only while at least this fraction of the CPUs' time was idle.
pub const GROW_MIN_IDLE: f64 = 0.10;
/// Shrink while less than this fraction of the CPUs' time was idle.
pub const SHRINK_MAX_IDLE: f64 = 0.03;
/// Places count as used while the working holders are within this share
/// of the limit (and at least half a session) of it.
pub const USED_SHARE: f64 = 0.125;

/// Why the limit last changed; shown as `limit_reason`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reason {
    /// `max_active` is set by hand: no adaptation.
    #[default]
    Manual = 0,
    /// Automatic, with adaptation off (`active_per_cpu_max` at or below
    /// `active_per_cpu`).
    Fixed = 1,
    /// Automatic and adaptive, at its floor since the server started or
    /// adaptation was switched on.
    Start = 2,
    /// Sessions were queued while the CPUs had idle time.
    Grow = 3,
    /// The CPUs were saturated.
    Shrink = 4,
    /// A reload moved the bounds, and the limit with them.
    Reload = 5,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Manual => "manual",
            Reason::Fixed => "fixed",
            Reason::Start => "start",
            Reason::Grow => "grow",
            Reason::Shrink => "shrink",
            Reason::Reload => "reload",
        }
    }

    pub fn from_u8(v: u8) -> Reason {
        match v {
            1 => Reason::Fixed,
            2 => Reason::Start,
            3 => Reason::Grow,
            4 => Reason::Shrink,
            5 => Reason::Reload,
            _ => Reason::Manual,
        }
    }
}

/// The limit's range. `floor == ceiling` means no adaptation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    pub floor: u32,
    pub ceiling: u32,
}

impl Bounds {
    pub fn adaptive(&self) -> bool {
        self.ceiling > self.floor
    }
}

/// What the worker saw over one window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signals {
    pub limit: u32,
    pub bounds: Bounds,
    pub queued: u32,
    /// Holders that do work: they neither wait on their client nor on a
    /// lock, and are not relieved stalled holders; smoothed.
    pub working: f64,
    /// Holders that compute: on a CPU or waiting for one (no wait event);
    /// smoothed. The floor is how many of these the CPUs serve best.
    pub computing: f64,
    /// Fraction of the server's CPU time that was idle over the window.
    pub cpu_idle: f64,
}

/// The limit for the next window, and why it moved; `None` to hold.
pub fn next_limit(s: Signals) -> Option<(u32, Reason)> {
    let Bounds { floor, ceiling } = s.bounds;
    if !s.bounds.adaptive() {
        return None;
    }
    let limit = s.limit.clamp(floor, ceiling);
    if limit != s.limit {
        return Some((limit, Reason::Reload));
    }
    let margin = |n: u32| (n as f64 * USED_SHARE).max(0.5);
    let overcommitted = s.computing > floor as f64 + margin(floor);
    if (s.cpu_idle < SHRINK_MAX_IDLE || overcommitted) && limit > floor {
        let step = (limit / 16).max(1);
        return Some((limit.saturating_sub(step).max(floor), Reason::Shrink));
    }
    let used = s.working >= limit as f64 - margin(limit);
    let room = s.computing < floor as f64;
    if s.queued > 0 && used && room && s.cpu_idle >= GROW_MIN_IDLE && limit < ceiling {
        let step = (limit / 8).max(1);
        return Some((limit.saturating_add(step).min(ceiling), Reason::Grow));
    }
    None
}

/// Where the limit stands after a reload or at start: the manual value, or
/// the automatic one, kept where adaptation had taken it when it was
/// adaptive before and still is.
pub fn on_reload(manual: Option<u32>, bounds: Bounds, current: u32, was: Reason) -> (u32, Reason) {
    match manual {
        Some(n) => (n, Reason::Manual),
        None if !bounds.adaptive() => (bounds.floor, Reason::Fixed),
        None if matches!(was, Reason::Manual | Reason::Fixed) => (bounds.floor, Reason::Start),
        None => {
            let kept = current.clamp(bounds.floor, bounds.ceiling);
            (kept, if kept == current { was } else { Reason::Reload })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds { floor: 8, ceiling: 64 };

    fn sig(limit: u32, queued: u32, working: f64, cpu_idle: f64) -> Signals {
        // Two holders compute; the others wait.
        Signals { limit, bounds: B, queued, working, computing: 2.0, cpu_idle }
    }

    #[test]
    fn grows_while_work_waits_and_the_cpus_idle() {
        assert_eq!(next_limit(sig(8, 100, 8.0, 0.5)), Some((9, Reason::Grow)));
        assert_eq!(next_limit(sig(32, 100, 31.0, 0.5)), Some((36, Reason::Grow)), "an eighth");
        assert_eq!(next_limit(sig(60, 100, 60.0, 0.5)), Some((64, Reason::Grow)), "capped");
        assert_eq!(next_limit(sig(64, 100, 64.0, 0.5)), None, "at the ceiling");
    }

    #[test]
    fn never_grows_while_places_sit_unused() {
        assert_eq!(next_limit(sig(8, 100, 6.0, 0.9)), None, "two places unused");
        assert_eq!(next_limit(sig(32, 100, 20.0, 0.9)), None);
        assert_eq!(next_limit(sig(8, 0, 8.0, 0.9)), None, "nobody queued: the limit does not bind");
    }

    #[test]
    fn a_lock_pile_up_is_not_growth() {
        // Eight holders wait on one lock: they are not working, the CPUs
        // idle, fifty sessions queue. Growing would only lengthen the pile.
        assert_eq!(next_limit(sig(8, 50, 0.0, 0.95)), None);
    }

    #[test]
    fn busy_cpus_hold_saturated_cpus_shrink() {
        assert_eq!(next_limit(sig(16, 100, 16.0, 0.05)), None, "between the thresholds: hold");
        assert_eq!(next_limit(sig(16, 100, 16.0, 0.01)), Some((15, Reason::Shrink)));
        assert_eq!(next_limit(sig(64, 100, 64.0, 0.0)), Some((60, Reason::Shrink)), "a sixteenth");
        assert_eq!(next_limit(sig(8, 100, 8.0, 0.0)), None, "never below the floor");
        assert_eq!(next_limit(sig(9, 0, 0.0, 0.0)), Some((8, Reason::Shrink)), "queued or not");
    }

    #[test]
    fn holders_that_compute_past_the_floor_shrink_it_whatever_the_idle_time() {
        // After wait-bound work the limit is 40; CPU-bound work now has 20
        // holders computing while lock and WAL waits leave the CPUs 5 % idle.
        let s = Signals { computing: 20.0, ..sig(40, 900, 40.0, 0.05) };
        assert_eq!(next_limit(s), Some((38, Reason::Shrink)));
        // At the floor's worth of computing holders (and its margin): hold.
        assert_eq!(next_limit(Signals { computing: 9.0, ..s }), None);
        // Computing holders fill the floor: no growth, however idle.
        assert_eq!(next_limit(Signals { computing: 8.0, ..sig(16, 900, 16.0, 0.5) }), None);
    }

    #[test]
    fn out_of_bounds_is_pulled_back_first() {
        assert_eq!(next_limit(sig(100, 100, 100.0, 0.9)), Some((64, Reason::Reload)));
        assert_eq!(next_limit(sig(2, 100, 2.0, 0.0)), Some((8, Reason::Reload)));
    }

    #[test]
    fn fixed_bounds_never_move() {
        let s = Signals { bounds: Bounds { floor: 8, ceiling: 8 }, ..sig(8, 100, 8.0, 0.9) };
        assert_eq!(next_limit(s), None);
        assert_eq!(next_limit(Signals { cpu_idle: 0.0, ..s }), None);
    }

    #[test]
    fn reload_keeps_where_adaptation_went() {
        assert_eq!(on_reload(Some(5), B, 30, Reason::Grow), (5, Reason::Manual));
        assert_eq!(on_reload(None, Bounds { floor: 8, ceiling: 8 }, 30, Reason::Grow), (8, Reason::Fixed));
        assert_eq!(on_reload(None, B, 5, Reason::Manual), (8, Reason::Start), "switched on: from the floor");
        assert_eq!(on_reload(None, B, 8, Reason::Fixed), (8, Reason::Start));
        assert_eq!(on_reload(None, B, 30, Reason::Grow), (30, Reason::Grow), "unchanged bounds: kept");
        let narrower = Bounds { floor: 8, ceiling: 20 };
        assert_eq!(on_reload(None, narrower, 30, Reason::Grow), (20, Reason::Reload));
    }

    /// A model server: `cpus` CPUs; each transaction needs `cpu_ms` of CPU
    /// and waits `wait_ms` without it; more running than CPUs share them.
    /// Returns the CPUs' idle fraction at a given number of running holders.
    fn model_idle(running: u32, cpus: f64, cpu_ms: f64, wait_ms: f64) -> f64 {
        // Without contention each holder uses the CPU cpu/(cpu+wait) of the time.
        let demand = running as f64 * cpu_ms / (cpu_ms + wait_ms);
        (1.0 - demand / cpus).max(0.0)
    }

    /// Holders on a CPU or runnable at `running` holders: each computes
    /// cpu/(cpu+wait) of its time.
    fn model_computing(running: u32, cpu_ms: f64, wait_ms: f64) -> f64 {
        running as f64 * cpu_ms / (cpu_ms + wait_ms)
    }

    fn settle(cpus: f64, cpu_ms: f64, wait_ms: f64, bounds: Bounds) -> (u32, Vec<u32>) {
        let mut limit = bounds.floor;
        let mut trail = vec![];
        for _ in 0..400 {
            let idle = model_idle(limit, cpus, cpu_ms, wait_ms);
            let computing = model_computing(limit, cpu_ms, wait_ms);
            let s = Signals { limit, bounds, queued: 200, working: limit as f64, computing, cpu_idle: idle };
            if let Some((n, _)) = next_limit(s) {
                limit = n;
            }
            trail.push(limit);
        }
        (limit, trail)
    }

    #[test]
    fn finds_the_knee_of_wait_bound_work_and_stays_there() {
        // 2 CPUs, 0.3 ms of CPU and 5 ms of waiting per transaction: the
        // CPUs saturate at about 35 running holders.
        let (limit, trail) = settle(2.0, 0.3, 5.0, B);
        let knee = 2.0 * (0.3 + 5.0) / 0.3;
        assert!((limit as f64) >= 0.85 * knee && (limit as f64) <= knee * 1.1, "limit {limit}, knee {knee}");
        // Settled: the last 100 windows move within a few places.
        let tail = &trail[300..];
        let (lo, hi) = (tail.iter().min().unwrap(), tail.iter().max().unwrap());
        assert!(hi - lo <= 4, "oscillates between {lo} and {hi}");
        // It got there within about 5 s of windows.
        let first = trail.iter().position(|&l| l as f64 >= 0.85 * knee).unwrap();
        assert!(first <= 25, "{first} windows");
    }

    #[test]
    fn cpu_bound_work_stays_at_the_floor() {
        // All CPU: eight running holders on 2 CPUs leave no idle time.
        let (limit, trail) = settle(2.0, 1.0, 0.0, B);
        assert_eq!(limit, 8);
        assert!(trail.iter().all(|&l| l == 8));
    }

    #[test]
    fn shifts_from_wait_bound_to_cpu_bound_come_back_down() {
        let (grown, _) = settle(2.0, 0.3, 5.0, B);
        assert!(grown > 24);
        let mut limit = grown;
        let mut windows = 0;
        while limit > B.floor {
            let idle = model_idle(limit, 2.0, 1.0, 0.0);
            let computing = model_computing(limit, 1.0, 0.0);
            let s = Signals { limit, bounds: B, queued: 200, working: limit as f64, computing, cpu_idle: idle };
            limit = next_limit(s).map_or(limit, |(n, _)| n);
            windows += 1;
            assert!(windows < 100, "stuck at {limit}");
        }
        // From ~35 to 8 in about 4 s of windows.
        assert!(windows <= 25, "{windows} windows");
    }
}
