//! Retry policy for transient failures: exponential backoff with jitter, bounded.

use std::time::Duration;

/// How transient failures are retried. Only [`crate::ErrorKind::Transient`] errors are
/// retried; calls that create something (submit, create node, cancel, delete) are retried
/// only when the request certainly never reached slurmrestd (connection refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: usize,
    /// Delay before the first retry.
    pub min_delay: Duration,
    /// Upper bound of one delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 4 retries, 100 ms doubling up to 2 s (about 3 s in all).
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Default::default()
        }
    }

    pub(crate) fn backoff(&self) -> backon::ExponentialBuilder {
        backon::ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries)
            .with_jitter()
    }
}
