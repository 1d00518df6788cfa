//! Fixed-bucket histogram of queue waits.
//!
//! Only waits are recorded: a transaction admitted at once does not enter the
//! histogram. Bucket bounds are fixed so that the histogram can live in shared
//! memory and so that two snapshots can be subtracted to get the distribution
//! of one interval (the worker does that for `gatekeeper.history`).

/// Upper bounds of the buckets, in microseconds. The last bucket is open.
pub const BOUNDS_US: [u64; NBUCKETS - 1] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000, 30_000_000, 60_000_000,
];
/// Number of buckets, the open-ended last one included.
pub const NBUCKETS: usize = 19;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub counts: [u64; NBUCKETS],
    /// Longest wait recorded, in microseconds.
    pub max_us: u64,
}

impl Histogram {
    /// Lower bound of bucket `i` in microseconds.
    pub fn lower_us(i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            BOUNDS_US[i - 1]
        }
    }

    /// Upper bound of bucket `i` in microseconds, `None` for the open last bucket.
    pub fn upper_us(i: usize) -> Option<u64> {
        BOUNDS_US.get(i).copied()
    }

    pub fn record(&mut self, wait_us: u64) {
        // A bucket holds the waits up to and including its upper bound, as
        // Prometheus's `le` buckets do.
        let i = BOUNDS_US.partition_point(|&b| b < wait_us);
        self.counts[i] += 1;
        self.max_us = self.max_us.max(wait_us);
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The distribution of what was recorded since `earlier`, a previous copy
    /// of this histogram. `max_us` of the difference is the maximum when it
    /// grew since `earlier` (the longest wait is then one of these); else the
    /// interval's longest wait is unknown, and it is bounded by its highest
    /// bucket: the upper bound of a closed one, the lower bound of the open
    /// one (a floor), never a longer wait of an earlier interval.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut d = *self;
        for (c, e) in d.counts.iter_mut().zip(earlier.counts.iter()) {
            *c = c.saturating_sub(*e);
        }
        if self.max_us <= earlier.max_us {
            d.max_us = match (0..NBUCKETS).rev().find(|&i| d.counts[i] > 0) {
                None => 0,
                Some(i) => Self::upper_us(i).unwrap_or(Self::lower_us(i)).min(self.max_us),
            };
        }
        d
    }

    /// Estimated `q` quantile (0.0..=1.0) in microseconds, interpolating
    /// linearly inside the bucket; `None` when nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        // Rank of the wanted observation, 1-based.
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for i in 0..NBUCKETS {
            let c = self.counts[i];
            if c == 0 {
                continue;
            }
            if seen + c >= rank {
                let lo = Self::lower_us(i) as f64;
                let hi = Self::upper_us(i).map_or(self.max_us as f64, |u| u as f64);
                let hi = hi.min(self.max_us as f64).max(lo);
                let frac = (rank - seen) as f64 / c as f64;
                return Some(lo + (hi - lo) * frac);
            }
            seen += c;
        }
        Some(self.max_us as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_sorted_and_sized() {
        assert_eq!(BOUNDS_US.len() + 1, NBUCKETS);
        assert!(BOUNDS_US.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn records_into_the_right_bucket() {
        let mut h = Histogram::default();
        h.record(0);
        h.record(99);
        h.record(100); // a bound is inclusive, as Prometheus's `le`
        h.record(101);
        h.record(60_000_000);
        h.record(70_000_000);
        assert_eq!(h.counts[0], 3);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[NBUCKETS - 2], 1);
        assert_eq!(h.counts[NBUCKETS - 1], 1);
        assert_eq!(h.max_us, 70_000_000);
        assert_eq!(h.total(), 6);
    }

    #[test]
    fn quantiles_interpolate_and_respect_max() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for _ in 0..100 {
            h.record(2_000); // bucket 1_000..2_500
        }
        let p50 = h.quantile_us(0.5).unwrap();
        assert!((1_000.0..=2_000.0).contains(&p50), "{p50}");
        // Never above the largest wait seen.
        assert!(h.quantile_us(1.0).unwrap() <= 2_000.0);
        h.record(40_000);
        let p99 = h.quantile_us(0.99).unwrap();
        let p100 = h.quantile_us(1.0).unwrap();
        assert!(p99 <= 2_500.0, "bucket resolution: {p99}");
        assert!((25_000.0..=40_000.0).contains(&p100), "{p100}");
    }

    #[test]
    fn difference_of_snapshots() {
        let mut h = Histogram::default();
        h.record(10);
        let before = h;
        h.record(10);
        h.record(1_000_000);
        let d = h.since(&before);
        assert_eq!(d.total(), 2);
        assert_eq!(d.counts[0], 1);
        assert_eq!(d.max_us, 1_000_000, "the maximum grew: it is this interval's");
    }

    #[test]
    fn an_interval_never_borrows_an_earlier_intervals_longest_wait() {
        let mut h = Histogram::default();
        h.record(3_600_000_000); // an hour, in an earlier interval
        let before = h;
        h.record(61_000_000);
        let d = h.since(&before);
        // The interval's one wait is in the open bucket: reported at its
        // floor (60 s), not at the hour.
        assert_eq!(d.quantile_us(0.5), Some(60_000_000.0));
        let before = h;
        h.record(2_000);
        let d = h.since(&before);
        assert_eq!(d.quantile_us(1.0), Some(2_500.0), "a closed bucket: its upper bound");
        assert_eq!(h.since(&h).max_us, 0, "nothing recorded");
    }
}
