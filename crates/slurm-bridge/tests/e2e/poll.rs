//! The one polling wait of the tests: no dependency on the rest of the e2e harness, so tests
//! that do not link it (`#[path = "e2e/poll.rs"] mod poll;`) use the same wait.

use std::time::{Duration, Instant};

/// The one polling wait of the e2e tests: polls `check` every 100 ms until it returns `Ok`, and
/// returns what it found; after `timeout`, panics naming `what` and the last state it saw (the
/// `Err`). [`wait_some`] and [`wait_until`] are its shorthands.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(state) => assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; last seen: {state}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`wait_for`] a probe that finds `Some`.
pub async fn wait_some<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    wait_for(what, timeout, async || {
        probe().await.ok_or_else(|| "nothing yet".to_string())
    })
    .await
}

/// [`wait_for`] a check that holds.
pub async fn wait_until(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    wait_some(what, timeout, async || check().await.then_some(())).await
}
