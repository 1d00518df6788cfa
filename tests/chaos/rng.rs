//! A tiny PRNG (xorshift64*), seeded through splitmix64: every random choice
//! of a run comes from the seed (each thread has its own stream).

#[derive(Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// An independent generator for stream `n` of this seed.
    pub(crate) fn fork(seed: u64, n: u64) -> Rng {
        Rng::new(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F))
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }

    pub(crate) fn weighted<T: Copy>(&mut self, table: &[(u64, T)]) -> T {
        let total: u64 = table.iter().map(|(w, _)| w).sum();
        let mut r = self.next() % total;
        for (w, t) in table {
            if r < *w {
                return *t;
            }
            r -= w;
        }
        unreachable!()
    }
}
