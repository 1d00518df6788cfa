//! The adaptive limit (docs/DESIGN.md §9): how the worker moves the target
//! number of running holders between a floor and a ceiling when the limit
//! is automatic (`max_active = 0`).
//!
//! The fixed automatic limit, `active_per_cpu` per CPU, fits CPU-bound work.
//! Transactions that wait inside the server (on I/O, a foreign server, a
//! sleep) count as running while they wait, so a fixed limit caps them at
//! `limit / wait` transactions a second while the CPUs idle. CPU signals
//! do not find the knee reliably: idle time counts WAL flushes (iowait) and
//! whatever a client on the same CPUs leaves, and CPU pressure is high under
//! every configuration (docs/DESIGN.md §9 has the measurements). So the
//! limit follows the one figure that says whether a limit helps: the gate's
//! own throughput, transactions ended per second (admissions less the growth
//! in holders: a step up admits a burst at once, which must not count as
//! gain before any of it is done), over windows of [`WINDOW_US`].
//!
//! [`Climber`] probes, as TCP's congestion control does:
//! - While sessions are queued (the limit binds), it tries a larger limit:
//!   an eighth more (at least one), and keeps going, doubling the step,
//!   while each step raises throughput by more than [`GAIN`]. A step that
//!   does not pay is taken back, and the limit holds for [`HOLD_WINDOWS`].
//! - Then it tries a smaller one, a sixteenth less, and keeps going while
//!   throughput stays within [`GAIN`] of where the descent began: a limit
//!   that work has outgrown comes back down (after wait-bound work, a
//!   CPU-bound burst). A step that costs more is taken back.
//! - Up and down probes alternate, each after a hold.
//!
//! It never probes up unless the places are used by holders that work
//! ([`Signals::working`], counted by [`crate::working`]: not waiting on
//! their client, nor on a heavyweight lock unless it is the first waiter
//! on a transaction at work, mostly one in its commit flush): a pile-up
//! behind a hot lock must not grow it, and idle holders' places are the
//! ticket controller's to lend. When fewer than half the places are used
//! so, above the floor, it comes down an eighth per window without
//! probing: TPC-B at 1000 clients after wait-bound work is such a pile-up
//! (on the branch rows), and probing down through it is slow, each step
//! judged on noisy throughput.
//!
//! While a tenth of the CPUs idles ([`IDLE_ROOM`]), holders that wait on
//! their client are left out of both rules: with a client sharing the CPUs
//! and the lending cap ([`crate::lending`]) they hold places unlent, which
//! kept a wait-bound workload's limit from ever stepping up, and brought it
//! down. There, the places count as used unless the holders that use the
//! server are a pile-up (fewer than half of them work), and only such a
//! pile-up brings the limit down.
//! No probe moves while nobody is queued: the limit does not bind, so
//! there is nothing to learn. One rule acts first, queue or not: while more
//! holders compute long than one and a half times the floor, the limit
//! comes down a quarter per window, and it never steps up while as many as
//! the floor do: holders computing long stay within [`cpu_cap`], twice the
//! floor. And with nobody queued, an overload of holders on a CPU brings
//! it down too ([`UnboundCheck`]).

/// Length of one window: throughput is compared window by window. At 2000
/// transactions a second a window counts about 1000, a few per cent of
/// noise.
pub const WINDOW_US: i64 = 500_000;
/// A step up pays when throughput rises by more than this share; a step
/// down is kept while throughput stays within it.
pub const GAIN: f64 = 0.03;
/// Windows to hold at a knee before the next probe.
pub const HOLD_WINDOWS: u32 = 4;
/// Places count as used while the working holders are within this share
/// of the limit (and at least half a session) of it.
pub const USED_SHARE: f64 = 0.125;
/// The step doubles with each paying step in a row, up to this many times.
const MAX_DOUBLINGS: u32 = 2;
/// The CPUs' idle share (iowait included) at or above which holders that
/// wait on their client count neither as places unused nor as a pile-up
/// (see [`Climber::next_limit`]).
/// Not a knee, which steps must still find by paying: over full CPUs the
/// worker measured 0-7 % idle with sysbench, and 8-12 % with TPC-B's
/// durable commits (whose flushes count as idle).
pub const IDLE_ROOM: f64 = 0.10;

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
    /// A larger limit raised throughput, or a smaller one cost too much
    /// and was taken back.
    Grow = 3,
    /// A smaller limit kept throughput, a larger one did not pay and was
    /// taken back, or most places were held by lock waiters.
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
    /// Holders that use the server (they do not wait on their client) and
    /// are not relieved; smoothed. The places are used while these fill
    /// them.
    pub running: f64,
    /// Holders that do work ([`crate::working::count`]): they wait neither
    /// on their client nor on a heavyweight lock (except for a transaction
    /// at work), and are not stalled; smoothed.
    pub working: f64,
    /// Transactions ended per second over the window (admissions less the
    /// growth in holders).
    pub tput: f64,
    /// The CPUs' idle share over the window (0 to 1).
    pub cpu_idle: f64,
    /// Holders whose statement has computed (no wait event, or an LWLock)
    /// for `stall_timeout` or longer, every class and the long lane
    /// included; smoothed. See [`cpu_cap`].
    pub computing: f64,
}

/// Most holders that may compute long at once by the limit's doing: twice
/// the floor (the floor is the CPU-bound optimum, `active_per_cpu` per
/// CPU). Above one and a half times the floor the limit comes down a
/// quarter per window, and from the floor up it never steps up, whatever
/// throughput says: after wait-bound work
/// has raised the limit, a turn to long CPU-bound statements brings it
/// back within a few windows (60 such sessions ran 50 at once at a limit
/// of 38 before). Only statements computing past `stall_timeout` count:
/// short ones waiting for a busy CPU show no wait event either, and
/// counting them held the wait-bound workload's limit at 40 where
/// throughput wanted 70-140.
pub fn cpu_cap(bounds: Bounds) -> f64 {
    2.0 * bounds.floor as f64
}

/// Above this many holders computing long (one and a half times the
/// floor), the limit comes down: far enough below [`cpu_cap`] that the
/// smoothing's lag and a sample's noise stay within it.
fn shrink_above(bounds: Bounds) -> f64 {
    1.5 * bounds.floor as f64
}

fn margin(n: u32) -> f64 {
    (n as f64 * USED_SHARE).max(0.5)
}

/// The probe in progress, kept by the worker between windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Climber {
    /// +1 while stepping up, -1 while stepping down, 0 between probes.
    dir: i8,
    /// The limit before the last step, and the throughput seen there.
    from_limit: u32,
    from_tput: f64,
    /// Throughput where a descent began: each step down is judged by it,
    /// so that small losses cannot add up.
    base_tput: f64,
    /// Paying steps in a row in this direction (the step doubles).
    streak: u32,
    /// Windows to wait before the next probe.
    hold: u32,
    /// The next probe goes up (else down).
    down_next: bool,
}

impl Climber {
    /// A probe is under way: its step is judged at the next window.
    pub fn probing(&self) -> bool {
        self.dir != 0
    }

    /// The limit for the next window, and why it moved; `None` to hold.
    pub fn next_limit(&mut self, s: Signals) -> Option<(u32, Reason)> {
        let Bounds { floor, ceiling } = s.bounds;
        if !s.bounds.adaptive() {
            *self = Climber::default();
            return None;
        }
        let limit = s.limit.clamp(floor, ceiling);
        if limit != s.limit {
            *self = Climber::default();
            return Some((limit, Reason::Reload));
        }
        if s.computing > shrink_above(s.bounds) && limit > floor {
            // More holders compute than the CPUs can serve: down a quarter.
            *self = Climber { hold: HOLD_WINDOWS, ..Climber::default() };
            return Some((limit.saturating_sub((limit / 4).max(1)).max(floor), Reason::Shrink));
        }
        if s.queued == 0 || !s.tput.is_finite() {
            // The limit does not bind: a step would teach nothing. A probe
            // under way stops where it stands.
            self.dir = 0;
            self.streak = 0;
            return None;
        }
        // Up only while the places are used: holders that use the server
        // fill them, and at least half of those work (fewer is a pile-up
        // behind a lock, brought down below). Lock waiters may hold the
        // rest: with durable commits a share of them always waits on rows
        // whose owners flush their commits, and a larger limit lets more
        // commits share a flush (the durable mixed workload did 1.47x
        // bare at a limit of 16 where its working holders kept it at 8-9).
        // No step up either while as many holders as the floor compute
        // long (the floor is the CPU-bound optimum): young statements do
        // not count yet, and stepping up on their account would overshoot
        // the cap once they do.
        //
        // With idle CPUs, holders that wait on their client are left out of
        // both rules: with a client that shares the CPUs and the lending
        // cap (crate::lending), they keep places unlent, the running count
        // stays short of the limit, and the working count under half of
        // it, so the limit neither tried a step nor stayed up (the
        // wait-bound workload stood at 11-21 with a fifth of the CPUs idle
        // and 155-177 sessions queued; with the first half of this rule, in
        // one round of three at 12 with pgbench's CPU per transaction
        // tripled). There, the places count as used unless the holders that
        // use the server are a pile-up, and only a pile-up brings the limit
        // down. Over full CPUs a client waits for a CPU, and a place held
        // for it is a place the limit may give up.
        let room = s.cpu_idle >= IDLE_ROOM;
        let pile_up = if room { s.working < s.running / 2.0 } else { s.working < limit as f64 / 2.0 };
        let filled = room || s.running >= limit as f64 - margin(limit);
        let used = filled && !pile_up && s.computing < floor as f64;
        if pile_up && limit > floor {
            // Most places are held by sessions waiting on locks (or, over
            // full CPUs, on their clients): admitting more behind a hot
            // lock only lengthens the pile-up. Down an eighth.
            *self = Climber { hold: HOLD_WINDOWS, ..Climber::default() };
            return Some((limit.saturating_sub((limit / 8).max(1)).max(floor), Reason::Shrink));
        }
        match self.dir {
            1 => {
                if s.tput > self.from_tput * (1.0 + GAIN) {
                    self.streak += 1;
                    if used && limit < ceiling {
                        return self.step(limit, s.tput, 1, s.bounds);
                    }
                    self.settle();
                    return None;
                }
                // Within the bounds in force: a reload may have moved them
                // since the step.
                let back = self.from_limit.clamp(floor, ceiling);
                self.settle();
                (back != limit).then_some((back, Reason::Shrink))
            }
            -1 => {
                if s.tput >= self.base_tput * (1.0 - GAIN) {
                    self.streak += 1;
                    if limit > floor {
                        return self.step(limit, s.tput, -1, s.bounds);
                    }
                    self.settle();
                    return None;
                }
                let back = self.from_limit.clamp(floor, ceiling);
                self.settle();
                (back != limit).then_some((back, Reason::Grow))
            }
            _ => {
                if self.hold > 0 {
                    self.hold -= 1;
                    return None;
                }
                let down = self.down_next;
                self.down_next = !down;
                self.base_tput = s.tput;
                if (!down || limit == floor) && used && limit < ceiling {
                    self.step(limit, s.tput, 1, s.bounds)
                } else if limit > floor {
                    self.step(limit, s.tput, -1, s.bounds)
                } else {
                    None
                }
            }
        }
    }

    /// Take a step from `limit` in direction `dir`, judged next window.
    fn step(&mut self, limit: u32, tput: f64, dir: i8, bounds: Bounds) -> Option<(u32, Reason)> {
        let base = if dir > 0 { limit / 8 } else { limit / 16 }.max(1);
        let step = base.saturating_mul(1 << self.streak.min(MAX_DOUBLINGS));
        let to = if dir > 0 {
            limit.saturating_add(step).min(bounds.ceiling)
        } else {
            limit.saturating_sub(step).max(bounds.floor)
        };
        self.dir = dir;
        self.from_limit = limit;
        self.from_tput = tput;
        Some((to, if dir > 0 { Reason::Grow } else { Reason::Shrink }))
    }

    /// The limit was brought down outside a probe: no probe for a while.
    pub fn after_shrink(&mut self) {
        *self = Climber { hold: HOLD_WINDOWS, ..Climber::default() };
    }

    /// A knee: no probe for a while.
    fn settle(&mut self) {
        self.dir = 0;
        self.streak = 0;
        self.hold = HOLD_WINDOWS;
    }
}

/// What the worker sees of a limit that does not bind, at one check
/// ([`UnboundCheck`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quiet {
    pub limit: u32,
    pub bounds: Bounds,
    /// Holders that use the server: all but those waiting on their client.
    pub busy: u32,
    /// Of those, the ones on a CPU or waiting for one (no wait event, or an
    /// LWLock), however long their statements have run: not sleepers, nor
    /// those waiting on I/O or a lock.
    pub on_cpu: u32,
    /// The CPUs' idle share over the last measured span.
    pub cpu_idle: f64,
}

/// Whether `q` is an overload: over full CPUs (under [`IDLE_ROOM`] idle),
/// more holders on a CPU than one and a half times the floor (the
/// CPU-bound optimum), and they the most of those that use the server.
/// Then the limit to take: a quarter less. The last condition keeps
/// wait-bound work out: its short statements wait for a busy CPU too,
/// which once held its limit at 39-42 (`computing`'s first measure), but
/// most of its holders sleep or wait on I/O.
pub fn unbound_overload(q: Quiet) -> Option<u32> {
    let floor = q.bounds.floor;
    let overloaded = q.cpu_idle < IDLE_ROOM && q.on_cpu as f64 > shrink_above(q.bounds) && 2 * q.on_cpu > q.busy;
    (q.bounds.adaptive() && overloaded && q.limit > floor)
        .then(|| q.limit.saturating_sub((q.limit / 4).max(1)).max(floor))
}

/// A limit that does not bind is never probed (probes need a queue), so
/// one that wait-bound work raised stayed above every client once the
/// clients turned to short CPU-bound transactions (none computing past
/// `stall_timeout`, the CPU cap's measure), and the gate gated nothing for
/// as long as they stayed fewer. The worker checks once a second while
/// nobody has been queued since the last check; two checks in a row that
/// see an [`unbound_overload`] take the limit down a quarter, so that
/// sessions queue and probing goes on from there. Wait-bound work that
/// has admitted every client is no overload, however busy the CPUs: most
/// of its holders are not on one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnboundCheck {
    /// Checks in a row that saw an overload.
    seen: u32,
}

impl UnboundCheck {
    /// One check; the limit to take, if any.
    pub fn check(&mut self, q: Quiet) -> Option<u32> {
        match unbound_overload(q) {
            Some(to) if self.seen >= 1 => {
                self.seen = 0;
                Some(to)
            }
            Some(_) => {
                self.seen += 1;
                None
            }
            None => {
                self.seen = 0;
                None
            }
        }
    }

    /// Someone queued: the limit binds, and checks start over.
    pub fn reset(&mut self) {
        self.seen = 0;
    }
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

    const B: Bounds = Bounds { floor: 8, ceiling: 400 };

    /// Every place held by a holder at work, nothing computing long.
    fn full(limit: u32, queued: u32, tput: f64) -> Signals {
        Signals {
            limit,
            bounds: B,
            queued,
            running: limit as f64,
            working: limit as f64,
            tput,
            cpu_idle: 0.0,
            computing: 0.0,
        }
    }

    /// Run a fresh climber from `start` for `windows` windows, each seeing
    /// `signals(limit)` at the limit it stands at; returns the limits it
    /// chose, window by window.
    fn drive(start: u32, windows: usize, mut signals: impl FnMut(u32) -> Signals) -> Vec<u32> {
        let mut c = Climber::default();
        let mut limit = start;
        let mut trail = vec![];
        for _ in 0..windows {
            if let Some((n, _)) = c.next_limit(signals(limit)) {
                limit = n;
            }
            trail.push(limit);
        }
        trail
    }

    /// The last limit of [`drive`].
    fn settle_at(start: u32, windows: usize, signals: impl FnMut(u32) -> Signals) -> u32 {
        *drive(start, windows, signals).last().unwrap()
    }

    /// Run the climber against a model server whose throughput at each
    /// limit is `x(limit)`, with multiplicative noise of up to `noise`;
    /// returns the limits it chose, window by window.
    fn climb(start: u32, windows: usize, noise: f64, x: impl Fn(u32) -> f64) -> Vec<u32> {
        let mut rng = 0x9E3779B97F4A7C15u64;
        drive(start, windows, |limit| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let jitter = 1.0 + noise * ((rng % 2001) as f64 / 1000.0 - 1.0);
            full(limit, 500, x(limit) * jitter)
        })
    }

    /// Wait-bound: each holder adds throughput until `knee`, then nothing.
    fn wait_bound(knee: f64) -> impl Fn(u32) -> f64 {
        move |l| 100.0 * (l as f64).min(knee)
    }

    /// CPU-bound: best at 10 running holders, worse by 1 % per holder past it.
    fn cpu_bound(l: u32) -> f64 {
        let l = l as f64;
        if l <= 10.0 {
            2000.0 * l / 10.0
        } else {
            2000.0 * (1.0 - 0.01 * (l - 10.0)).max(0.2)
        }
    }

    #[test]
    fn climbs_to_the_knee_of_wait_bound_work_fast_and_stays_near_it() {
        let trail = climb(8, 200, 0.0, wait_bound(150.0));
        let first = trail.iter().position(|&l| l >= 135).expect("reaches 90 % of the knee");
        assert!(first <= 12, "took {first} windows");
        // Later it holds near the knee; its probes cost one window each.
        let late = &trail[40..];
        let x = wait_bound(150.0);
        let mean_x = late.iter().map(|&l| x(l)).sum::<f64>() / late.len() as f64;
        let mean_l = late.iter().map(|&l| l as f64).sum::<f64>() / late.len() as f64;
        assert!(mean_x >= 0.95 * x(150), "mean throughput {mean_x}: {late:?}");
        assert!(mean_l <= 1.3 * 150.0, "mean limit {mean_l}: {late:?}");
    }

    #[test]
    fn with_idle_cpus_places_held_short_of_the_limit_count_as_used() {
        // The wait-bound workload beside a client on the same CPUs: holders
        // wait in the server (each adds throughput up to 80 of them), and
        // the running ones stay two short of the limit, because some wait
        // on the client between statements. Over full CPUs that reads as
        // places left unused, and the limit holds; with a fifth of the CPUs
        // idle it climbs to the knee, each step paying as before.
        let run = |cpu_idle: f64| {
            settle_at(10, 60, |limit| Signals {
                running: limit as f64 - 2.0,
                cpu_idle,
                ..full(limit, 170, 100.0 * limit.min(80) as f64)
            })
        };
        let with_room = run(0.2);
        assert!((64..=120).contains(&with_room), "limit {with_room}");
        assert_eq!(run(0.03), 10);
    }

    #[test]
    fn with_idle_cpus_holders_waiting_on_their_client_do_not_bring_it_down() {
        // Two thirds of the places held by holders that wait on a client
        // sharing the CPUs (unlent), the rest at work, throughput rising
        // with the limit up to 80. With a fifth of the CPUs idle it climbs;
        // over full CPUs it comes down to the floor, as before.
        let run = |cpu_idle: f64| {
            settle_at(24, 60, |limit| {
                let part = limit as f64 / 3.0;
                Signals { running: part, working: part, cpu_idle, ..full(limit, 170, 100.0 * limit.min(80) as f64) }
            })
        };
        let with_room = run(0.2);
        assert!((64..=120).contains(&with_room), "limit {with_room}");
        assert_eq!(run(0.03), B.floor);
        // With room, a pile-up behind a lock still comes down.
        let mut c = Climber::default();
        let s = Signals { running: 30.0, working: 10.0, cpu_idle: 0.3, ..full(32, 100, 1000.0) };
        assert_eq!(c.next_limit(s), Some((28, Reason::Shrink)));
    }

    #[test]
    fn with_idle_cpus_a_step_that_costs_is_still_taken_back() {
        // CPU-bound past 10, with CPUs that look idle (iowait, say).
        let trail = drive(8, 200, |limit| Signals { cpu_idle: 0.3, ..full(limit, 500, cpu_bound(limit)) });
        assert!(trail.iter().all(|&l| l <= 16), "{trail:?}");
    }

    #[test]
    fn stays_near_the_best_limit_of_cpu_bound_work() {
        let trail = climb(8, 400, 0.0, cpu_bound);
        let mean = trail.iter().map(|&l| cpu_bound(l)).sum::<f64>() / trail.len() as f64;
        assert!(mean >= 0.95 * cpu_bound(10), "mean throughput {mean}");
        assert!(trail.iter().all(|&l| l <= 16), "{trail:?}");
    }

    #[test]
    fn comes_down_when_work_turns_cpu_bound() {
        let trail = climb(200, 200, 0.0, cpu_bound);
        let first = trail.iter().position(|&l| l <= 16).expect("comes down");
        assert!(first <= 40, "took {first} windows: {:?}", &trail[..first]);
    }

    #[test]
    fn noise_does_not_lead_it_astray() {
        // Throughput noise of +-3 % per window, as seen here.
        let trail = climb(8, 600, 0.03, cpu_bound);
        let mean = trail.iter().map(|&l| cpu_bound(l)).sum::<f64>() / trail.len() as f64;
        assert!(mean >= 0.93 * cpu_bound(10), "mean throughput {mean}");
        let trail = climb(8, 300, 0.03, wait_bound(150.0));
        let late = &trail[100..];
        let mean = late.iter().map(|&l| l as f64).sum::<f64>() / late.len() as f64;
        assert!(mean >= 120.0, "mean limit {mean}");
    }

    #[test]
    fn a_lock_pile_up_or_an_empty_queue_never_grows_it() {
        let mut c = Climber::default();
        for k in 0..100 {
            // Eight holders wait on one lock: none works.
            let s = Signals { working: 0.0, ..full(8, 50, 100.0 + k as f64) };
            assert_eq!(c.next_limit(s), None);
            let s = full(8, 0, 100.0 * k as f64);
            assert_eq!(c.next_limit(s), None);
        }
    }

    #[test]
    fn lock_waiters_beside_working_holders_do_not_stop_a_climb_that_pays() {
        // A quarter of the places wait on row locks (behind commits in
        // their flush), the rest work, and throughput rises with the limit:
        // it grows. With more than half of them waiting it would not.
        let limit = settle_at(B.floor, 40, |limit| Signals {
            working: 0.75 * limit as f64,
            ..full(limit, 50, 100.0 * limit as f64)
        });
        assert!(limit >= 4 * B.floor, "only {limit}");
        let mut c = Climber::default();
        for _ in 0..40 {
            let s = Signals { working: 0.4 * B.floor as f64, ..full(B.floor, 50, 1000.0) };
            assert!(c.next_limit(s).is_none_or(|(n, _)| n <= B.floor), "a pile-up grew it");
        }
    }

    /// `clients` sessions at a limit: those over it queue; of those
    /// admitted, a share `cpu` is on a CPU (the rest sleep or wait on I/O),
    /// and throughput is [`cpu_bound`]'s for those on a CPU. The worker's
    /// way: while nobody queues, the unbound check, once per window; else
    /// the climber.
    fn quiet_or_probed(start: u32, windows: usize, clients: u32, cpu: f64, cpu_idle: f64) -> Vec<u32> {
        let (mut c, mut check) = (Climber::default(), UnboundCheck::default());
        let mut limit = start;
        let mut trail = vec![];
        for _ in 0..windows {
            let running = clients.min(limit);
            let on_cpu = (running as f64 * cpu).round() as u32;
            let queued = clients.saturating_sub(limit);
            if queued == 0 {
                if let Some(n) = check.check(Quiet { limit, bounds: B, busy: running, on_cpu, cpu_idle }) {
                    c.after_shrink();
                    limit = n;
                }
            } else {
                check.reset();
                let s = Signals {
                    queued,
                    running: running as f64,
                    working: running as f64,
                    cpu_idle,
                    ..full(limit, 0, cpu_bound(on_cpu))
                };
                if let Some((n, _)) = c.next_limit(s) {
                    limit = n;
                }
            }
            trail.push(limit);
        }
        trail
    }

    #[test]
    fn a_limit_above_every_client_comes_down_over_full_cpus() {
        // Wait-bound work raised the limit to 150; 120 clients now run short
        // CPU-bound transactions, none queued, none computing long.
        let trail = quiet_or_probed(150, 200, 120, 1.0, 0.0);
        let late = &trail[100..];
        assert!(late.iter().all(|&l| l < 120), "the limit stayed above the clients: {:?}", &trail[..40]);
        let mean = late.iter().map(|&l| l as f64).sum::<f64>() / late.len() as f64;
        assert!(mean <= 40.0, "mean limit {mean} against a knee at 10");
        // One check alone does not move it.
        let mut check = UnboundCheck::default();
        let q = Quiet { limit: 150, bounds: B, busy: 120, on_cpu: 120, cpu_idle: 0.0 };
        assert_eq!(check.check(q), None);
        check.reset();
        assert_eq!(check.check(q), None);
        assert_eq!(check.check(q), Some(113));
    }

    #[test]
    fn a_limit_that_does_not_bind_stays_with_idle_cpus_few_on_a_cpu_or_sleepers() {
        // Idle CPUs: the work is not CPU-bound.
        let trail = quiet_or_probed(150, 100, 120, 1.0, 0.3);
        assert!(trail.iter().all(|&l| l == 150), "{trail:?}");
        // Full CPUs, but fewer on a CPU than one and a half times the floor.
        let trail = quiet_or_probed(150, 100, 10, 1.0, 0.0);
        assert!(trail.iter().all(|&l| l == 150), "{trail:?}");
        // Full CPUs, every client admitted, a third of them on a CPU (three
        // times the floor's one and a half), the rest asleep or waiting on
        // I/O: wait-bound work at its best.
        let trail = quiet_or_probed(150, 100, 120, 0.33, 0.02);
        assert!(trail.iter().all(|&l| l == 150), "{trail:?}");
    }

    #[test]
    fn a_pile_up_above_the_floor_brings_it_down() {
        let mut c = Climber::default();
        let mut limit = 64;
        let mut windows = 0;
        while limit > B.floor {
            // Three quarters of the holders wait on a lock.
            let s = Signals { working: limit as f64 / 4.0, ..full(limit, 900, 1000.0) };
            let (n, why) = c.next_limit(s).expect("comes down");
            assert_eq!(why, Reason::Shrink);
            limit = n;
            windows += 1;
        }
        assert!(windows <= 20, "{windows} windows");
    }

    #[test]
    fn a_turn_to_cpu_bound_work_brings_it_down_within_ten_windows() {
        // Raised to 38 by wait-bound work; now 60 sessions compute, every
        // holder on a CPU, and throughput holds whatever the limit.
        let mut c = Climber::default();
        let mut limit = 38;
        let mut windows = 0;
        while windows < 10 {
            let s = Signals { computing: limit as f64, ..full(limit, 22, 500.0) };
            if let Some((n, _)) = c.next_limit(s) {
                limit = n;
            }
            windows += 1;
        }
        assert!(limit as f64 <= cpu_cap(B), "still {limit} after {windows} windows");
        // And it never steps up while as many as the floor compute long,
        // even when throughput would reward it.
        for k in 0..40 {
            let s = Signals { computing: B.floor as f64, ..full(limit, 22, 500.0 * (1.0 + k as f64)) };
            if let Some((n, _)) = c.next_limit(s) {
                assert!(n <= limit, "stepped up from {limit} to {n} with the CPU cap full");
                limit = n;
            }
        }
    }

    #[test]
    fn wait_bound_work_still_grows_past_the_cpu_cap() {
        // Holders that sleep do not compute: growth goes on past 2 x floor.
        let mut k = 0;
        let limit = settle_at(B.floor, 60, |limit| {
            k += 1;
            Signals { computing: 1.0 + ((k - 1) % 2) as f64, ..full(limit, 500, 100.0 * limit as f64) }
        });
        assert!(limit as f64 > cpu_cap(B), "only {limit}");
    }

    #[test]
    fn fixed_bounds_never_move_and_out_of_bounds_is_pulled_back() {
        let fixed = Bounds { floor: 8, ceiling: 8 };
        let mut c = Climber::default();
        for k in 0..50 {
            let s = Signals { bounds: fixed, ..full(8, 50, 100.0 * k as f64) };
            assert_eq!(c.next_limit(s), None);
        }
        assert_eq!(c.next_limit(full(500, 50, 1.0)), Some((400, Reason::Reload)));
        assert_eq!(c.next_limit(full(2, 50, 1.0)), Some((8, Reason::Reload)));
    }

    #[test]
    fn a_step_that_does_not_pay_is_taken_back_and_held() {
        let mut c = Climber::default();
        let s = |limit: u32, tput: f64| full(limit, 50, tput);
        assert_eq!(c.next_limit(s(16, 1000.0)), Some((18, Reason::Grow)), "an eighth up");
        assert_eq!(c.next_limit(s(18, 1100.0)), Some((22, Reason::Grow)), "paid: twice the step");
        assert_eq!(c.next_limit(s(22, 1110.0)), Some((18, Reason::Shrink)), "1 %: back");
        for _ in 0..HOLD_WINDOWS {
            assert_eq!(c.next_limit(s(18, 1100.0)), None, "holds");
        }
        assert_eq!(c.next_limit(s(18, 1100.0)), Some((17, Reason::Shrink)), "then a sixteenth down");
        assert_eq!(c.next_limit(s(17, 1095.0)), Some((15, Reason::Shrink)), "cost < 3 %: further");
        assert_eq!(c.next_limit(s(15, 1000.0)), Some((17, Reason::Grow)), "9 % below the start: back");
    }

    #[test]
    fn a_step_taken_back_after_a_reload_stays_within_the_new_bounds() {
        // Up from 8 to 9; a reload then raises the floor to 10 and pulls
        // the limit up to it. The step did not pay: going back to 8 would
        // put the limit below the floor.
        let mut c = Climber::default();
        let s = |limit, tput, bounds| Signals { bounds, ..full(limit, 500, tput) };
        assert_eq!(c.next_limit(s(8, 1000.0, B)), Some((9, Reason::Grow)));
        let raised = Bounds { floor: 10, ceiling: B.ceiling };
        assert_eq!(c.next_limit(s(10, 1000.0, raised)), None, "back to the floor it already stands at");
        // Down from 20 to 19; the ceiling falls to 15 and the limit with it.
        let mut c = Climber { down_next: true, ..Climber::default() };
        assert_eq!(c.next_limit(s(20, 1000.0, B)), Some((19, Reason::Shrink)));
        let lowered = Bounds { floor: B.floor, ceiling: 15 };
        assert_eq!(c.next_limit(s(15, 500.0, lowered)), None, "back to the ceiling it already stands at");
    }

    #[test]
    fn reload_keeps_where_adaptation_went() {
        let b = Bounds { floor: 8, ceiling: 64 };
        assert_eq!(on_reload(Some(5), b, 30, Reason::Grow), (5, Reason::Manual));
        assert_eq!(on_reload(None, Bounds { floor: 8, ceiling: 8 }, 30, Reason::Grow), (8, Reason::Fixed));
        assert_eq!(on_reload(None, b, 5, Reason::Manual), (8, Reason::Start), "switched on: from the floor");
        assert_eq!(on_reload(None, b, 8, Reason::Fixed), (8, Reason::Start));
        assert_eq!(on_reload(None, b, 30, Reason::Grow), (30, Reason::Grow), "unchanged bounds: kept");
        let narrower = Bounds { floor: 8, ceiling: 20 };
        assert_eq!(on_reload(None, narrower, 30, Reason::Grow), (20, Reason::Reload));
    }
}
