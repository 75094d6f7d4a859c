//! Which faults a proxy injects, at which rates, and what it has injected so far.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Rates (each the fraction of requests, 0..=1, summing to at most 1) of each fault kind, and
/// the durations of the slow ones. A request gets at most one fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Requests delayed by `latency_ms` before they are forwarded.
    pub latency: f64,
    pub latency_ms: u64,
    /// Requests whose connection is closed without an answer.
    pub reset: f64,
    /// Requests answered `503 Service Unavailable` by the proxy.
    pub error_5xx: f64,
    /// Requests answered `429 Too Many Requests` (`Retry-After: 1`) by the proxy.
    pub throttle_429: f64,
    /// Requests held `stall_ms` without an answer, then their connection closed.
    pub stall: f64,
    pub stall_ms: u64,
    /// Requests forwarded to the server, whose answer is then lost: the connection is closed
    /// instead (what a timeout or a reset after the write looks like to the client; the server
    /// has acted).
    pub lost_answer: f64,
    /// Requests forwarded to the server, whose answer is held `slow_answer_ms` before it is
    /// passed on.
    pub slow_answer: f64,
    pub slow_answer_ms: u64,
    /// Only requests whose `METHOD /path` contains one of these are faulted (e.g.
    /// `"POST /slurm/v0.0.44/job/submit"`, `"/binding"`); empty: every request.
    pub routes: Vec<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::none()
    }
}

impl Faults {
    /// No fault: every request is forwarded at once.
    pub fn none() -> Self {
        Faults {
            latency: 0.0,
            latency_ms: 500,
            reset: 0.0,
            error_5xx: 0.0,
            throttle_429: 0.0,
            stall: 0.0,
            stall_ms: 10_000,
            lost_answer: 0.0,
            slow_answer: 0.0,
            slow_answer_ms: 2_000,
            routes: Vec::new(),
        }
    }

    /// `rate` of the requests forwarded and their answers lost, on `routes` (empty: all).
    pub fn lost_answers(rate: f64, routes: &[&str]) -> Self {
        Faults {
            lost_answer: rate,
            routes: routes.iter().map(|r| r.to_string()).collect(),
            ..Faults::none()
        }
    }

    /// Whether a request (`method`, `path`) may be faulted: it is on one of the routes.
    pub fn applies_to(&self, method: &str, path: &str) -> bool {
        self.routes.is_empty() || {
            let line = format!("{method} {path}");
            self.routes.iter().any(|r| line.contains(r.as_str()))
        }
    }

    /// `total` of the requests faulted, split evenly over the five kinds.
    pub fn uniform(total: f64) -> Self {
        let each = total / 5.0;
        Faults {
            latency: each,
            reset: each,
            error_5xx: each,
            throttle_429: each,
            stall: each,
            ..Faults::none()
        }
    }

    /// Checks every rate is within 0..=1 and that they sum to at most 1.
    pub fn validate(&self) -> Result<()> {
        let rates = self.rates();
        for (name, r) in rates {
            if !(0.0..=1.0).contains(&r) {
                return Err(Error::InvalidFaults(format!(
                    "{name} = {r}: a rate is a fraction of requests from 0 to 1"
                )));
            }
        }
        let sum: f64 = rates.iter().map(|(_, r)| r).sum();
        if sum > 1.0 + 1e-9 {
            return Err(Error::InvalidFaults(format!(
                "the rates sum to {sum}: a request gets at most one fault, so at most 1"
            )));
        }
        Ok(())
    }

    fn rates(&self) -> [(&'static str, f64); 7] {
        [
            ("latency", self.latency),
            ("reset", self.reset),
            ("error_5xx", self.error_5xx),
            ("throttle_429", self.throttle_429),
            ("stall", self.stall),
            ("lost_answer", self.lost_answer),
            ("slow_answer", self.slow_answer),
        ]
    }

    /// The fault for a request drawn `u` (uniform in 0..1).
    pub fn pick(&self, u: f64) -> Option<Fault> {
        let mut edge = 0.0;
        for (kind, r) in [
            (
                Fault::Latency(Duration::from_millis(self.latency_ms)),
                self.latency,
            ),
            (Fault::Reset, self.reset),
            (Fault::Error5xx, self.error_5xx),
            (Fault::Throttle429, self.throttle_429),
            (
                Fault::Stall(Duration::from_millis(self.stall_ms)),
                self.stall,
            ),
            (Fault::LostAnswer, self.lost_answer),
            (
                Fault::SlowAnswer(Duration::from_millis(self.slow_answer_ms)),
                self.slow_answer,
            ),
        ] {
            edge += r;
            if u < edge {
                return Some(kind);
            }
        }
        None
    }
}

/// One injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Latency(Duration),
    Reset,
    Error5xx,
    Throttle429,
    Stall(Duration),
    LostAnswer,
    SlowAnswer(Duration),
}

/// Counts of requests and of the faults injected since the proxy started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub requests: u64,
    /// Requests that reached the server (the delayed ones included).
    pub forwarded: u64,
    /// Requests the server could not be reached for (answered 502).
    pub upstream_errors: u64,
    pub latency: u64,
    pub reset: u64,
    pub error_5xx: u64,
    pub throttle_429: u64,
    pub stall: u64,
    #[serde(default)]
    pub lost_answer: u64,
    #[serde(default)]
    pub slow_answer: u64,
}

impl Stats {
    /// Faults injected, every kind together.
    pub fn injected(&self) -> u64 {
        self.latency
            + self.reset
            + self.error_5xx
            + self.throttle_429
            + self.stall
            + self.lost_answer
            + self.slow_answer
    }
}

/// Live counters behind [`Stats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub forwarded: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub latency: AtomicU64,
    pub reset: AtomicU64,
    pub error_5xx: AtomicU64,
    pub throttle_429: AtomicU64,
    pub stall: AtomicU64,
    pub lost_answer: AtomicU64,
    pub slow_answer: AtomicU64,
}

impl Counters {
    pub fn count(&self, fault: Fault) {
        let c = match fault {
            Fault::Latency(_) => &self.latency,
            Fault::Reset => &self.reset,
            Fault::Error5xx => &self.error_5xx,
            Fault::Throttle429 => &self.throttle_429,
            Fault::Stall(_) => &self.stall,
            Fault::LostAnswer => &self.lost_answer,
            Fault::SlowAnswer(_) => &self.slow_answer,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            requests: g(&self.requests),
            forwarded: g(&self.forwarded),
            upstream_errors: g(&self.upstream_errors),
            latency: g(&self.latency),
            reset: g(&self.reset),
            error_5xx: g(&self.error_5xx),
            throttle_429: g(&self.throttle_429),
            stall: g(&self.stall),
            lost_answer: g(&self.lost_answer),
            slow_answer: g(&self.slow_answer),
        }
    }
}

/// A small seeded generator (splitmix64): a run with the same seed draws the same faults.
pub(crate) struct Draw(Mutex<u64>);

impl Draw {
    pub fn new(seed: u64) -> Self {
        Draw(Mutex::new(seed))
    }

    /// Uniform in 0..1.
    pub fn next(&self) -> f64 {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_out_of_range_or_over_one_are_refused_by_name() {
        let e = Faults {
            reset: 1.5,
            ..Faults::none()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("reset = 1.5"), "{e}");
        let e = Faults {
            reset: 0.6,
            stall: 0.6,
            ..Faults::none()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("sum to"), "{e}");
        Faults::uniform(1.0).validate().unwrap();
    }

    #[test]
    fn pick_follows_the_rates_in_order() {
        let f = Faults {
            reset: 0.25,
            error_5xx: 0.25,
            ..Faults::none()
        };
        assert_eq!(f.pick(0.1), Some(Fault::Reset));
        assert_eq!(f.pick(0.3), Some(Fault::Error5xx));
        assert_eq!(f.pick(0.6), None);
        assert_eq!(Faults::none().pick(0.0), None);
    }

    #[test]
    fn answers_lost_or_slow_are_drawn_after_the_others_and_routes_filter() {
        let f = Faults {
            stall: 0.5,
            lost_answer: 0.25,
            slow_answer: 0.25,
            ..Faults::none()
        };
        assert_eq!(f.pick(0.6), Some(Fault::LostAnswer));
        assert!(matches!(f.pick(0.9), Some(Fault::SlowAnswer(_))));
        let f = Faults::lost_answers(1.0, &["POST /slurm/v0.0.44/job/submit"]);
        assert!(f.applies_to("POST", "/slurm/v0.0.44/job/submit"));
        assert!(!f.applies_to("GET", "/slurm/v0.0.44/jobs/state/"));
        assert!(Faults::none().applies_to("GET", "/anything"));
        let e = Faults {
            lost_answer: 0.7,
            slow_answer: 0.7,
            ..Faults::none()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("sum to"), "{e}");
    }

    #[test]
    fn draws_are_uniform_enough() {
        let d = Draw::new(7);
        let n = 10_000;
        let below: usize = (0..n).filter(|_| d.next() < 0.05).count();
        assert!((350..650).contains(&below), "{below} of {n} below 0.05");
    }
}
