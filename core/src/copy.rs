//! Copies out of shared memory that fail softly where memory runs short.

/// Collect `items` as `collect` would, but return `Err(n)` (the number of
/// items it asked room for, at least) where an allocation fails, rather
/// than aborting the process: the caller holds a lock and raises the error
/// after releasing it.
pub fn try_collect<T>(items: impl Iterator<Item = T>) -> Result<Vec<T>, usize> {
    let mut out = Vec::new();
    let hint = items.size_hint().0;
    out.try_reserve(hint).map_err(|_| hint)?;
    for item in items {
        if out.len() == out.capacity() {
            out.try_reserve(1).map_err(|_| out.len() + 1)?;
        }
        out.push(item);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_what_fits() {
        assert_eq!(try_collect(1..=5), Ok(vec![1, 2, 3, 4, 5]));
        assert_eq!(try_collect((0..100).filter(|x| x % 10 == 0)).map(|v| v.len()), Ok(10));
        assert_eq!(try_collect(std::iter::empty::<u8>()), Ok(vec![]));
    }

    /// An iterator that claims more items than any allocation can hold.
    struct Endless;
    impl Iterator for Endless {
        type Item = u64;
        fn next(&mut self) -> Option<u64> {
            Some(0)
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (usize::MAX / 4, None)
        }
    }

    #[test]
    fn an_allocation_that_cannot_be_met_is_an_error_not_an_abort() {
        assert_eq!(try_collect(Endless), Err(usize::MAX / 4));
    }
}
