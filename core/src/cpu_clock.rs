//! How long a transaction computed, with as few reads of the CPU clock as
//! the answer needs.
//!
//! When a transaction ends, the long lane asks whether it computed for
//! `stall_timeout` or longer (`shapes`). Reading the backend thread's CPU
//! clock is a system call: about 0.6 µs in a loop on the project's machines, and
//! about 2 µs of a backend's throughput at 26,000 one-statement
//! transactions a second, where one read per transaction cost the gate
//! 6 % of its rate (bench/results/overhead-20261129/NOTE.md). A backend
//! computes on one thread, so its CPU clock never runs ahead of the wall
//! clock, and that bounds both reads:
//! - at the end, a transaction held for less than the stall cannot have
//!   computed that long: no read;
//! - at admission, a reading taken at most `max_slack` ago stands in for a
//!   new one. The CPU time measured from it is too long by at most its
//!   age, which the check at the end takes off: it may miss a transaction
//!   that computed less than that age past the stall, never count a
//!   shorter one as long.
//!
//! A backend that runs transactions back to back so reads the clock about
//! once per `max_slack`; one that idles between them, at each admission.

/// The last reading of this process's CPU clock and when it was taken
/// (both in microseconds; the wall clock the caller's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuClock {
    mark: Option<Mark>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark {
    wall_us: i64,
    cpu_us: i64,
}

/// Where a transaction's CPU time is counted from: a reading of the CPU
/// clock, taken at most `slack_us` of wall time before the admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub cpu_us: i64,
    pub slack_us: i64,
}

/// The oldest reading an admission reuses, for a given stall: a
/// sixty-fourth of it (about 8 ms at the default of 500 ms).
pub fn max_slack_us(stall_us: i64) -> i64 {
    stall_us / 64
}

impl CpuClock {
    /// No reading yet.
    pub const fn new() -> Self {
        CpuClock { mark: None }
    }

    /// A transaction is admitted at `now_us`: where its CPU time starts.
    /// `None` when nothing is long (`stall_us` 0): no read.
    pub fn start(&mut self, now_us: i64, stall_us: i64, read: impl FnOnce() -> i64) -> Option<Start> {
        if stall_us <= 0 {
            return None;
        }
        if let Some(m) = self.mark {
            let age = now_us - m.wall_us;
            // A wall clock set back leaves the age unknown: read again.
            if (0..=max_slack_us(stall_us)).contains(&age) {
                return Some(Start { cpu_us: m.cpu_us, slack_us: age });
            }
        }
        Some(Start { cpu_us: self.read(now_us, read), slack_us: 0 })
    }

    /// The transaction admitted at `admitted_us`, its CPU time counted from
    /// `start`, ends at `now_us`: whether it computed for `stall_us` or
    /// longer. Reads the clock only if it was held that long.
    pub fn computed_long(
        &mut self,
        start: Option<Start>,
        admitted_us: i64,
        now_us: i64,
        stall_us: i64,
        read: impl FnOnce() -> i64,
    ) -> bool {
        let Some(start) = start else { return false };
        if stall_us <= 0 || now_us - admitted_us < stall_us {
            return false;
        }
        self.read(now_us, read) - start.cpu_us - start.slack_us >= stall_us
    }

    fn read(&mut self, now_us: i64, read: impl FnOnce() -> i64) -> i64 {
        let cpu_us = read();
        self.mark = Some(Mark { wall_us: now_us, cpu_us });
        cpu_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const STALL: i64 = 500_000;

    /// A process's clocks: the CPU clock advances only while it computes.
    struct Process {
        wall: i64,
        cpu: i64,
        reads: Cell<u32>,
    }

    impl Process {
        fn new() -> Self {
            Process { wall: 1_000_000, cpu: 50_000, reads: Cell::new(0) }
        }
        fn compute(&mut self, us: i64) {
            self.wall += us;
            self.cpu += us;
        }
        fn idle(&mut self, us: i64) {
            self.wall += us;
        }
        fn reader(&self) -> impl FnOnce() -> i64 + '_ {
            move || {
                self.reads.set(self.reads.get() + 1);
                self.cpu
            }
        }
        /// One transaction: admitted, computes `busy`, waits `idle`, ends.
        fn transaction(&mut self, clock: &mut CpuClock, busy: i64, idle: i64) -> bool {
            let admitted = self.wall;
            let start = clock.start(self.wall, STALL, self.reader());
            self.compute(busy);
            self.idle(idle);
            clock.computed_long(start, admitted, self.wall, STALL, self.reader())
        }
    }

    #[test]
    fn back_to_back_short_transactions_read_the_clock_once_per_slack() {
        let mut p = Process::new();
        let mut clock = CpuClock::default();
        for _ in 0..10_000 {
            assert!(!p.transaction(&mut clock, 30, 10));
        }
        // 400 ms of wall time, one read per 7.8 ms at most.
        let reads = p.reads.get();
        assert!((40..=60).contains(&reads), "{reads} reads");
    }

    #[test]
    fn a_transaction_that_computes_past_the_stall_is_long_and_one_that_waits_is_not() {
        let mut p = Process::new();
        let mut clock = CpuClock::default();
        assert!(p.transaction(&mut clock, STALL, 0));
        assert!(p.transaction(&mut clock, STALL + 1_000, 5_000));
        assert!(!p.transaction(&mut clock, 1_000, STALL + 1_000), "held long, computed little");
        assert!(!p.transaction(&mut clock, STALL - 1, 0));
    }

    #[test]
    fn a_reused_reading_never_counts_a_shorter_transaction_as_long() {
        let mut p = Process::new();
        let mut clock = CpuClock::default();
        // A reading, then a computation outside any transaction (a free
        // statement) just inside the slack, then a transaction that
        // computes just under the stall: its start reuses the reading.
        clock.start(p.wall, STALL, p.reader());
        let slack = max_slack_us(STALL);
        p.compute(slack);
        let reads = p.reads.get();
        let admitted = p.wall;
        let start = clock.start(p.wall, STALL, p.reader());
        assert_eq!(p.reads.get(), reads, "a reading {slack} µs old is reused");
        assert_eq!(start, Some(Start { cpu_us: p.cpu - slack, slack_us: slack }));
        // Held for the stall, so the end reads the clock.
        p.compute(STALL - 1);
        p.idle(1);
        let reads = p.reads.get();
        assert!(!clock.computed_long(start, admitted, p.wall, STALL, p.reader()));
        assert_eq!(p.reads.get(), reads + 1);
        // One a slack older is read again.
        p.idle(slack + 1);
        let before = p.reads.get();
        clock.start(p.wall, STALL, p.reader());
        assert_eq!(p.reads.get(), before + 1);
    }

    #[test]
    fn a_wall_clock_set_back_reads_again() {
        let mut p = Process::new();
        let mut clock = CpuClock::default();
        clock.start(p.wall, STALL, p.reader());
        p.compute(10);
        p.wall -= 3_600_000_000;
        let start = clock.start(p.wall, STALL, p.reader());
        assert_eq!(start, Some(Start { cpu_us: p.cpu, slack_us: 0 }));
    }

    #[test]
    fn with_the_stall_off_nothing_is_read_and_nothing_is_long() {
        let mut p = Process::new();
        let mut clock = CpuClock::default();
        let start = clock.start(p.wall, 0, p.reader());
        assert_eq!(start, None);
        p.compute(10 * STALL);
        // The stall set in the middle of the transaction: no start, not long.
        assert!(!clock.computed_long(start, p.wall - 10 * STALL, p.wall, STALL, p.reader()));
        assert_eq!(p.reads.get(), 0);
    }
}
