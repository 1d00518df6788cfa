//! How far the worker lends (docs/DESIGN.md §10): the lending cap.
//!
//! The running-holder rule ([`crate::controller`]) lends the places of
//! holders that wait on their clients. That pays when the clients are slow
//! by themselves (a network away, thinking between statements): more
//! transactions in flight, more done. It does not pay when the clients are
//! slow because the CPUs they share with the server are full. Then every
//! holder waits on its client because its client waits for a CPU, the rule
//! lends every place, and the gate admits everyone as bare PostgreSQL
//! would: the same throughput, with each transaction's statements spread
//! over a longer time (sysbench at 256 and 1000 threads on two CPUs:
//! tickets 220-320 against a limit of 8, p95 1.7-1.9 times a pool's).
//!
//! So lending is judged as the adaptive limit is, on throughput: the
//! controller lends up to a cap, and [`LendClimber`] moves the cap.
//! - It starts at the limit: nothing is lent until lending shows it pays.
//! - While the controller would lend past the cap (sessions queued, the
//!   running holders short of the limit), it tries twice the cap, and
//!   keeps doubling while each step raises throughput by more than
//!   [`GAIN_UP`]. A step that does not pay is taken back, and the cap holds
//!   for [`HOLD_WINDOWS`] windows. Doubling, because lending pays by the
//!   logarithm where it pays at all: a slow pgbench at 1000 clients did
//!   2628-3405 tps with 16-40 tickets and 3757-3877 with 64-358, so a step
//!   of a quarter gained less than a window's noise
//!   (bench/results/lend-quarter-20261125/).
//! - While places are lent (tickets above the limit), it also tries a cap
//!   an eighth lower, and keeps going, doubling the step, while throughput
//!   stays within [`GAIN_DOWN`] of where the descent began.
//! - Up and down probes alternate, each after a hold.
//!
//! Throughput here is transactions *ended* per second (admissions less the
//! growth in holders): a higher cap admits a burst at once, which would
//! count as throughput in admissions before any of it is done.
//!
//! A step up must pay more than a step down may cost: over full CPUs a
//! step gains nothing but a window's noise, which must not walk the cap
//! up.
//!
//! Except while the CPUs are spare: at least [`SPARE_ROOM`] of their time
//! idle, not counting iowait (a durable commit's flush is not room), with
//! sessions queued that the cap keeps out. Then holding places back only
//! leaves CPU time unused, so a step up taken with spare CPUs is kept if
//! it raised throughput at all, not only by [`GAIN_UP`], and no step down
//! is tried, nor kept if it leaves the CPUs spare. Lending that ends no
//! more transactions is still taken back: idle CPUs are no reason to admit
//! sessions that only idle in their transactions too. The cap settles
//! where the CPUs are busy or lending stops paying. Measured before this rule: sysbench at 64
//! threads lent 11 places with 5 % of the CPUs idle and did 0.87-0.94x of
//! lending every place (bench/results/sysbench-64-cap-20261126/); the
//! wait-bound workload, in one round of three, lent nothing with 16 % idle
//! (bench/results/wait-room3-20261127/: 0.56x of lending every place).

/// A step up pays when throughput rises by more than this share.
pub const GAIN_UP: f64 = 0.05;
/// A step down is kept while throughput stays within this share of where
/// the descent began.
pub const GAIN_DOWN: f64 = 0.03;
/// The idle share of the CPUs' time, iowait left out, at which a step up
/// of the cap that gains anything is kept (see the module's comment).
pub const SPARE_ROOM: f64 = 0.03;
/// Windows to hold at a knee before the next probe.
pub const HOLD_WINDOWS: u32 = 4;
/// A step down doubles with each kept step in a row, up to this many times.
const MAX_DOUBLINGS: u32 = 2;

/// What the worker saw over one window (the adaptive limit's windows).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signals {
    pub limit: u32,
    /// `max_tickets`, or the backends: the cap never goes above it.
    pub ceiling: u32,
    pub tickets: u32,
    /// The controller would have lent past the cap at some sample of the
    /// window.
    pub pressed: bool,
    /// Transactions ended per second over the window.
    pub tput: f64,
    /// The CPUs' idle share over the window, iowait left out.
    pub cpu_spare: f64,
}

/// The cap and the probe in progress, kept by the worker between windows.
///
/// The cap is kept as the places it lends beyond the limit, so that it
/// moves with the limit: a step of the adaptive limit admits that many
/// more (or fewer) running holders whatever the cap. Kept as a number of
/// tickets instead, a cap that bound made each step up of the limit admit
/// nobody: the step could not pay and was taken back, and the wait-bound
/// workload's limit stood at 31-43 where, lending every place, it climbed
/// to 61-135 (bench/results/wait-spare2-20261127/); kept relative, it
/// reached 44-72 in two rounds of three (bench/results/wait-relcap-20261127/).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LendClimber {
    /// Places lent beyond the limit at most: the cap is the limit plus
    /// this (0 until lending has paid).
    extra: u32,
    /// +1 while stepping up, -1 while stepping down, 0 between probes.
    dir: i8,
    /// [`LendClimber::extra`] before the step under way.
    from_extra: u32,
    from_tput: f64,
    /// The CPUs were spare when the step under way was taken.
    from_spare: bool,
    /// Throughput where a descent began.
    base_tput: f64,
    streak: u32,
    hold: u32,
    down_next: bool,
}

impl LendClimber {
    /// A worker that starts again (ended by a DBA's "terminate everyone",
    /// or failed) goes on from the cap its predecessor last set, `cap`
    /// (0: none), with no probe under way. Starting from nothing instead,
    /// its first sample took back every place lent (hundreds, with slow
    /// clients), and the cap climbed back over seconds.
    pub fn resumed(cap: u32, limit: u32) -> Self {
        LendClimber { extra: cap.saturating_sub(limit), ..Self::default() }
    }

    /// The ceiling for tickets now: the cap, within `[limit, ceiling]`.
    pub fn cap(&self, limit: u32, ceiling: u32) -> u32 {
        within(limit.saturating_add(self.extra), limit, ceiling)
    }

    /// A probe is under way: its step is judged at the next window.
    pub fn probing(&self) -> bool {
        self.dir != 0
    }

    /// The probe under way: 1 a step up, -1 a step down, 0 none.
    pub fn probe(&self) -> i8 {
        self.dir
    }

    /// Judge the window that ended; returns the new cap when it moved.
    pub fn next(&mut self, s: Signals) -> Option<u32> {
        let ceiling = s.ceiling.max(s.limit);
        let was = self.cap(s.limit, ceiling);
        // Lending the controller no longer uses is not kept: the cap follows
        // the tickets down, so that a probe down starts where lending is.
        let cap = if s.pressed { was } else { was.min(s.tickets.max(s.limit)) };
        self.extra = cap - s.limit;
        let moved = |c: &Self| {
            let c = c.cap(s.limit, ceiling);
            (c != was).then_some(c)
        };
        if !s.tput.is_finite() {
            self.dir = 0;
            self.streak = 0;
            return moved(self);
        }
        let spare = s.cpu_spare >= SPARE_ROOM;
        match self.dir {
            dir @ (1 | -1) => {
                // A step up must pay, anything if taken with spare CPUs; a
                // step down may cost a little, and must not leave them spare.
                let (kept, room) = if dir > 0 {
                    let gain = if self.from_spare { 0.0 } else { GAIN_UP };
                    (s.tput > self.from_tput * (1.0 + gain), s.pressed && cap < ceiling)
                } else {
                    (s.tput >= self.base_tput * (1.0 - GAIN_DOWN) && !spare, cap > s.limit && !spare)
                };
                if !kept {
                    self.extra = self.from_extra;
                } else if room {
                    self.streak += 1;
                    self.step(cap, s.tput, dir, s.limit, ceiling, spare);
                    return moved(self);
                }
                self.settle();
                moved(self)
            }
            _ => {
                if self.hold > 0 {
                    self.hold -= 1;
                    return moved(self);
                }
                let up = s.pressed && cap < ceiling;
                let down = cap > s.limit && !spare;
                let go_down = down && (self.down_next || !up);
                if go_down || up {
                    self.down_next = !go_down;
                    self.base_tput = s.tput;
                    self.step(cap, s.tput, if go_down { -1 } else { 1 }, s.limit, ceiling, spare);
                }
                moved(self)
            }
        }
    }

    /// Take a step from `cap` in direction `dir`, judged next window.
    fn step(&mut self, cap: u32, tput: f64, dir: i8, limit: u32, ceiling: u32, spare: bool) {
        let step = if dir > 0 { cap } else { (cap / 8).max(1).saturating_mul(1 << self.streak.min(MAX_DOUBLINGS)) };
        let to = if dir > 0 { cap.saturating_add(step).min(ceiling) } else { cap.saturating_sub(step).max(limit) };
        self.extra = to - limit;
        self.dir = dir;
        self.from_extra = cap - limit;
        self.from_tput = tput;
        self.from_spare = spare;
    }

    /// A knee: no probe for a while.
    fn settle(&mut self) {
        self.dir = 0;
        self.streak = 0;
        self.hold = HOLD_WINDOWS;
    }
}

/// A cap (0: none learnt yet, the limit) within `[limit, ceiling]`, the
/// ceiling never below the limit: what the tickets may reach.
pub fn within(cap: u32, limit: u32, ceiling: u32) -> u32 {
    cap.clamp(limit, ceiling.max(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the climber against a model: `x(in_flight)` is the throughput
    /// with that many tickets, `demand` the sessions that want one (the
    /// controller lends while any are left over), with multiplicative noise
    /// of up to `noise`. Returns the caps, window by window.
    fn run(limit: u32, demand: u32, windows: usize, noise: f64, x: impl Fn(u32) -> f64) -> Vec<u32> {
        run_spare(limit, demand, windows, noise, x, |_| 0.0)
    }

    /// [`run`], with `spare(in_flight)` the CPUs' idle share (no iowait).
    fn run_spare(
        limit: u32,
        demand: u32,
        windows: usize,
        noise: f64,
        x: impl Fn(u32) -> f64,
        spare: impl Fn(u32) -> f64,
    ) -> Vec<u32> {
        let mut c = LendClimber::default();
        let mut seed = 12345u64;
        let mut caps = vec![];
        for _ in 0..windows {
            let cap = c.cap(limit, 2000);
            let tickets = cap.min(demand).max(limit);
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (seed >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0;
            let tput = x(tickets) * (1.0 + noise * r);
            let cpu_spare = spare(tickets);
            c.next(Signals { limit, ceiling: 2000, tickets, pressed: demand > cap, tput, cpu_spare });
            caps.push(c.cap(limit, 2000));
        }
        caps
    }

    /// Drive `c` for `windows` windows with sessions pressing for more
    /// tickets than the cap and every ticket in use, no spare CPUs:
    /// `tput(cap)` is the throughput at that cap.
    fn press(c: &mut LendClimber, limit: u32, ceiling: u32, windows: usize, tput: impl Fn(u32) -> f64) {
        for _ in 0..windows {
            let cap = c.cap(limit, ceiling);
            c.next(Signals { limit, ceiling, tickets: cap, pressed: true, tput: tput(cap), cpu_spare: 0.0 });
        }
    }

    #[test]
    fn starts_at_the_limit_and_lends_nothing_until_it_pays() {
        let c = LendClimber::default();
        assert_eq!(c.cap(8, 1000), 8);
        // Full CPUs: throughput is flat however much is lent. Each probe
        // lends for one window and is taken back.
        let caps = run(8, 1000, 200, 0.0, |_| 900.0);
        assert!(caps.iter().all(|&c| c <= 16), "{caps:?}");
        assert!(caps.iter().filter(|&&c| c == 8).count() >= 150, "{caps:?}");
        // With a window's noise, a probe that seems to pay now and then
        // does not walk the cap up.
        let caps = run(8, 1000, 400, 0.05, |_| 900.0);
        let avg = caps.iter().map(|&c| c as f64).sum::<f64>() / caps.len() as f64;
        assert!(avg <= 16.0 && caps.iter().all(|&c| c <= 64), "average {avg}: {caps:?}");
    }

    #[test]
    fn slow_clients_get_their_places_within_a_few_seconds() {
        // Each transaction in flight adds throughput until 600 are in flight.
        let caps = run(8, 1000, 40, 0.05, |n| n.min(600) as f64 * 2.0);
        let at = caps.iter().position(|&c| c >= 400).expect("never lent 400 places");
        assert!(at <= 16, "took {at} windows: {caps:?}");
    }

    #[test]
    fn a_knee_holds_the_cap_near_it_under_noise() {
        // Throughput grows to 32 in flight, then falls slowly (the clients
        // compete for the CPUs).
        let x = |n: u32| if n <= 32 { n as f64 * 30.0 } else { 960.0 - (n - 32) as f64 };
        let caps = run(8, 1000, 400, 0.05, x);
        let late = &caps[100..];
        let avg = late.iter().map(|&c| c as f64).sum::<f64>() / late.len() as f64;
        assert!((20.0..=64.0).contains(&avg), "average cap {avg}: {caps:?}");
        assert!(late.iter().all(|&c| c <= 128), "{caps:?}");
    }

    #[test]
    fn lending_that_stopped_paying_comes_back_down() {
        let mut c = LendClimber::default();
        // Slow clients first: the cap climbs high.
        press(&mut c, 8, 2000, 40, |cap| cap.min(600) as f64);
        assert!(c.cap(8, 2000) >= 400, "{c:?}");
        // Then the CPUs fill: throughput flat at any cap. Nobody has to be
        // queued for the cap to come down: it starts from the tickets.
        for _ in 0..200 {
            let cap = c.cap(8, 2000);
            c.next(Signals {
                limit: 8,
                ceiling: 2000,
                tickets: cap.min(300),
                pressed: cap < 300,
                tput: 900.0,
                cpu_spare: 0.0,
            });
        }
        assert!(c.cap(8, 2000) <= 16, "{c:?}");
    }

    #[test]
    fn with_spare_cpus_lending_that_gains_a_little_is_kept() {
        // Each doubling of what is lent gains 3 % (less than GAIN_UP), and
        // with fewer than 40 in flight a tenth of the CPUs' time is idle:
        // places held back leave CPU time unused. The cap climbs past 40
        // and stays there; over full CPUs (the first test) it stays at the
        // limit.
        let spare = |n: u32| if n < 40 { 0.10 } else { 0.0 };
        let x = |n: u32| 900.0 * (1.0 + 0.03 * (n as f64).log2());
        let caps = run_spare(8, 1000, 400, 0.005, x, spare);
        let late = &caps[100..];
        assert!(late.iter().filter(|&&c| c >= 40).count() >= late.len() * 9 / 10, "{caps:?}");
        // Nor does a step down stay where it leaves the CPUs spare.
        let avg = late.iter().map(|&c| c as f64).sum::<f64>() / late.len() as f64;
        assert!(avg <= 160.0, "average cap {avg}: {caps:?}");
    }

    #[test]
    fn with_spare_cpus_lending_that_ends_nothing_is_taken_back() {
        // Idle CPUs, but the lent places end no transaction: no reason.
        let caps = run_spare(8, 1000, 200, 0.0, |_| 0.0, |_| 0.6);
        assert!(caps.iter().filter(|&&c| c == 8).count() >= 150, "{caps:?}");
        assert!(caps.iter().all(|&c| c <= 16), "{caps:?}");
    }

    #[test]
    fn with_spare_cpus_a_step_that_costs_is_still_taken_back() {
        // Idle CPUs, but each place lent past 16 costs a twentieth (a lock,
        // a slow disk): the cap stays near 16.
        let x = |n: u32| if n <= 16 { 900.0 } else { 900.0 * 0.95f64.powi((n - 16) as i32) };
        let caps = run_spare(8, 1000, 400, 0.0, x, |_| 0.2);
        assert!(caps[50..].iter().all(|&c| c <= 32), "{caps:?}");
    }

    #[test]
    fn a_step_that_costs_is_taken_back() {
        let mut c = LendClimber { extra: 56, ..LendClimber::default() };
        // Tickets at 64, lending in use; the first probe goes down (no one
        // presses for more) and costs a fifth.
        assert_eq!(
            c.next(Signals { limit: 8, ceiling: 1000, tickets: 64, pressed: false, tput: 1000.0, cpu_spare: 0.0 }),
            Some(56)
        );
        assert_eq!(
            c.next(Signals { limit: 8, ceiling: 1000, tickets: 56, pressed: true, tput: 800.0, cpu_spare: 0.0 }),
            Some(64)
        );
        // Then it holds.
        for _ in 0..HOLD_WINDOWS {
            assert_eq!(
                c.next(Signals { limit: 8, ceiling: 1000, tickets: 64, pressed: true, tput: 1000.0, cpu_spare: 0.0 }),
                None
            );
        }
    }

    #[test]
    fn a_step_of_the_limit_moves_the_cap_with_it() {
        // Lending pays at a limit of 8: the cap climbs to lend 16 or more.
        let mut c = LendClimber::default();
        press(&mut c, 8, 1000, 20, |cap| cap.min(24) as f64 * 10.0);
        let cap = c.cap(8, 1000);
        assert!(cap >= 24, "{c:?}");
        // The adaptive limit steps up by 4 and back down: the cap follows,
        // so the step admits 4 more running holders even while the cap
        // binds, and taking it back lends no more than before.
        assert_eq!(c.cap(12, 1000), cap + 4);
        assert_eq!(c.cap(8, 1000), cap);
        // Never past the ceiling, never below the limit.
        assert_eq!(c.cap(12, cap), cap);
        assert_eq!(c.cap(2000, 1000), 2000);
    }

    #[test]
    fn the_cap_stays_within_the_limit_and_the_ceiling() {
        let mut c = LendClimber::default();
        let mut top = 0;
        for _ in 0..100 {
            press(&mut c, 8, 40, 1, |cap| cap as f64 * 100.0);
            assert!((8..=40).contains(&c.cap(8, 40)));
            top = top.max(c.cap(8, 40));
        }
        assert_eq!(top, 40);
        // A limit raised above the cap carries it.
        assert_eq!(c.cap(60, 40), 60);
        // No throughput measured: no probe.
        let mut c = LendClimber::default();
        assert_eq!(
            c.next(Signals { limit: 8, ceiling: 40, tickets: 8, pressed: true, tput: f64::NAN, cpu_spare: 0.0 }),
            None
        );
        assert!(!c.probing());
    }

    #[test]
    fn a_worker_that_starts_again_goes_on_from_the_cap_left() {
        // 358 tickets lent at a limit of 16: kept, and moving with the limit.
        let c = LendClimber::resumed(358, 16);
        assert_eq!(c.cap(16, 1000), 358);
        assert_eq!(c.cap(20, 1000), 362);
        assert!(!c.probing());
        // None left (server start), or below the limit: nothing lent.
        assert_eq!(LendClimber::resumed(0, 16).cap(16, 1000), 16);
        assert_eq!(LendClimber::resumed(8, 16).cap(16, 1000), 16);
    }
}
