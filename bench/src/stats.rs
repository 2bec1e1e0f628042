//! Percentiles and medians, plus the clock the latency figures share with the agent.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the UNIX epoch: the clock of the agent's `_meta.emittedAtUs`.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The `p`-th percentile (0..=100, nearest rank) of `values`; reorders them. `None` when empty.
pub fn percentile<T: Copy + Ord>(values: &mut [T], p: f64) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, values.len()) - 1;
    let (_, v, _) = values.select_nth_unstable(idx);
    Some(*v)
}

/// The median of `values` (the lower middle for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[(v.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50));
        assert_eq!(percentile(&mut v, 99.0), Some(99));
        assert_eq!(percentile(&mut v, 100.0), Some(100));
        assert_eq!(percentile(&mut [7u32], 99.0), Some(7));
        assert_eq!(percentile::<u32>(&mut [], 50.0), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
