//! The load average beside each figure, and latency percentiles.

use std::time::Duration;

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// p50, p99 and max of latencies, in seconds.
pub(crate) fn percentiles(mut l: Vec<Duration>) -> String {
    l.sort();
    if l.is_empty() {
        return "no samples".into();
    }
    let at = |q: f64| l[((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1].as_secs_f64();
    format!(
        "p50 {:.3} s, p99 {:.3} s, max {:.3} s ({} pods)",
        at(0.5),
        at(0.99),
        at(1.0),
        l.len()
    )
}
