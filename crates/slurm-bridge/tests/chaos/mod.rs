//! The chaos suite's parts: the plan (short or full), the bridge process, the pod churn, the
//! observer (binds, live jobs) and the report. `chaos_e2e.rs` runs them together.

pub mod bridge;
pub mod churn;
pub mod observe;
pub mod plan;
pub mod report;

/// A small seeded generator (xorshift64*): the same seed gives the same churn and schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Runs `f`, giving up after `secs` (the API server may be paused: kube's own timeout is minutes).
pub async fn within<T, E: std::fmt::Display>(
    secs: u64,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(std::time::Duration::from_secs(secs), f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {secs} s")),
    }
}
