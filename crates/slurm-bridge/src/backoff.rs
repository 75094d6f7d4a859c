//! Exponential backoff per key (a pod, a node), on `backon`: each failure of a key waits longer,
//! up to a cap; a success or the key's deletion forgets it.

use crate::sync::MutexExt;
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Delays per key; share it behind the component's context.
pub struct Backoffs {
    policy: ExponentialBuilder,
    cap: Duration,
    keys: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Backoffs {
    /// `first` after the first failure, doubling up to `cap`, without jitter.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Backoffs {
            policy: ExponentialBuilder::new()
                .with_min_delay(first)
                .with_max_delay(cap)
                .with_factor(2.0)
                .without_max_times(),
            cap,
            keys: Mutex::new(HashMap::new()),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, ExponentialBackoff>> {
        self.keys.locked()
    }

    /// The wait after one more failure of `key`.
    pub fn next(&self, key: &str) -> Duration {
        self.keys()
            .entry(key.to_string())
            .or_insert_with(|| self.policy.build())
            .next()
            .unwrap_or(self.cap)
    }

    /// Forgets `key` (it succeeded, or is gone).
    pub fn forget(&self, key: &str) {
        self.keys().remove(key);
    }

    /// Keeps only the keys `keep` accepts (after a relist).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.keys().retain(|k, _| keep(k));
    }

    /// Keys with a failure count.
    pub fn len(&self) -> usize {
        self.keys().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_per_key_and_starts_over_when_forgotten() {
        let b = Backoffs::new(Duration::from_millis(500), Duration::from_secs(15));
        let secs: Vec<f64> = (0..7).map(|_| b.next("a").as_secs_f64()).collect();
        assert_eq!(secs, [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0]);
        assert_eq!(b.next("b"), Duration::from_millis(500), "keys are apart");
        b.forget("a");
        assert_eq!(b.next("a"), Duration::from_millis(500));
        b.retain(|k| k == "b");
        assert_eq!(b.len(), 1);
    }
}
