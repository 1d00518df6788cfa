//! A fixed-capacity ring of periodic samples, for `gatekeeper.history`.

/// One periodic sample taken by the worker.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HistorySample {
    /// Sample time (microseconds, the caller's clock).
    pub at_us: i64,
    pub limit: u32,
    pub tickets: u32,
    /// Sessions holding an admission.
    pub admitted: u32,
    /// Holders using the server.
    pub running: u32,
    pub idle_in_transaction: u32,
    pub queued: u32,
    pub idle: u32,
    /// Admissions per second over the interval.
    pub admissions_per_s: f64,
    /// Queue timeouts during the interval.
    pub timeouts: u64,
    /// Wait percentiles over the interval, microseconds (NaN: no waits).
    pub wait_p50_us: f64,
    pub wait_p99_us: f64,
    /// Why the limit last changed (`adaptive::Reason`).
    pub limit_reason: u8,
}

/// Ring bookkeeping; the samples themselves live in a caller-owned slice.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ring {
    /// Samples written since start (the next write goes to `written % cap`).
    pub written: u64,
}

impl Ring {
    /// Store `s` into `buf`, overwriting the oldest sample when full.
    pub fn push(&mut self, buf: &mut [HistorySample], s: HistorySample) {
        if buf.is_empty() {
            return;
        }
        let i = (self.written % buf.len() as u64) as usize;
        buf[i] = s;
        self.written += 1;
    }

    /// The stored samples, oldest first.
    pub fn iter<'b>(&self, buf: &'b [HistorySample]) -> impl Iterator<Item = &'b HistorySample> + 'b {
        let cap = buf.len() as u64;
        let n = self.written.min(cap);
        let start = self.written - n;
        (start..self.written).map(move |k| &buf[(k % cap) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64) -> HistorySample {
        HistorySample { at_us: t, ..Default::default() }
    }

    #[test]
    fn keeps_the_newest_in_order() {
        let mut buf = vec![HistorySample::default(); 3];
        let mut r = Ring::default();
        assert_eq!(r.iter(&buf).count(), 0);
        for t in 1..=5 {
            r.push(&mut buf, at(t));
        }
        let got: Vec<i64> = r.iter(&buf).map(|s| s.at_us).collect();
        assert_eq!(got, vec![3, 4, 5]);
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let mut r = Ring::default();
        r.push(&mut [], at(1));
        assert_eq!(r.iter(&[]).count(), 0);
    }
}
