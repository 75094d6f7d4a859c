//! Figures the tests print (never assert): percentiles of measured durations.

use std::time::Duration;

/// The `p` quantile (0.0..=1.0, nearest rank) of `sorted`; zero when nothing was measured.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
