//! Groups of rows cut into statements of a few fixed sizes, each prepared once.

/// `rows` cut into chunks of 2^k rows (at most `largest`, a power of two), largest first: 34 rows
/// are 32 + 2. Each comes with its k, so that a statement per chunk size, prepared once, serves
/// groups of any size.
pub(crate) fn chunks<T>(rows: &[T], largest: usize) -> impl Iterator<Item = (usize, &[T])> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let k = (rest.len().ilog2()).min(largest.ilog2()) as usize;
        let (chunk, tail) = rest.split_at(1 << k);
        rest = tail;
        Some((k, chunk))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_cut_into_power_of_two_chunks_largest_first() {
        let sizes = |n: usize, largest: usize| -> Vec<(usize, usize)> {
            let rows: Vec<usize> = (0..n).collect();
            // Every row once, in order.
            let again: Vec<usize> = chunks(&rows, largest)
                .flat_map(|(_, c)| c.to_vec())
                .collect();
            assert_eq!(again, rows);
            chunks(&rows, largest).map(|(k, c)| (k, c.len())).collect()
        };
        assert_eq!(sizes(0, 64), []);
        assert_eq!(sizes(1, 64), [(0, 1)]);
        assert_eq!(sizes(7, 64), [(2, 4), (1, 2), (0, 1)]);
        assert_eq!(sizes(34, 64), [(5, 32), (1, 2)]);
        assert_eq!(sizes(200, 64), [(6, 64), (6, 64), (6, 64), (3, 8)]);
        assert_eq!(sizes(20, 8), [(3, 8), (3, 8), (2, 4)]);
    }
}
