//! Client-side request limits of the Kubernetes client (`--kube-api-qps`, `--kube-api-burst`),
//! as client-go's token bucket behind kube-scheduler's `clientConnection.qps` and `burst`: a
//! request starts when the bucket holds a token; the bucket holds at most `burst` tokens and
//! refills at `qps` per second. They keep a hot loop (a retry storm, a relist per event) from
//! flooding the API server; they are set high enough not to slow a burst of binds.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

/// Why the limits were refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum LimitError {
    #[error(
        "--kube-api-qps must be a finite number of requests per second (0 turns the limit off), got {0}"
    )]
    Qps(f64),
    #[error("--kube-api-burst must be at least 1 when --kube-api-qps is set, got {0}")]
    Burst(u32),
}

/// Requests per second and the burst above it; `qps == 0` means no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

impl Limits {
    /// Checks the flags' values.
    pub fn new(qps: f64, burst: u32) -> Result<Self, LimitError> {
        if !qps.is_finite() || qps < 0.0 {
            return Err(LimitError::Qps(qps));
        }
        if qps > 0.0 && burst == 0 {
            return Err(LimitError::Burst(burst));
        }
        Ok(Limits { qps, burst })
    }

    /// False when `qps` is 0 (no limit).
    pub fn limited(&self) -> bool {
        self.qps > 0.0
    }
}

/// The token bucket: pure, so its arithmetic is tested without a clock.
#[derive(Debug)]
struct Bucket {
    limits: Limits,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(limits: Limits, now: Instant) -> Self {
        Bucket {
            limits,
            tokens: f64::from(limits.burst),
            at: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limits.qps).min(f64::from(self.limits.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.limits.qps,
            ))
        }
    }
}

/// A tower layer limiting how fast requests start (kube's client serializes `poll_ready` behind
/// its buffer, so one bucket serves the whole client).
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer(pub Limits);

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Bucket::new(self.0, Instant::now()),
            sleep: None,
            permit: false,
        }
    }
}

/// The service [`RateLimitLayer`] makes.
pub struct RateLimited<S> {
    inner: S,
    bucket: Bucket,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token was taken for the next call.
    permit: bool,
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.permit {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.permit = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.permit = false;
        self.inner.call(req)
    }
}

/// A Kubernetes client from the default config (KUBECONFIG or in-cluster) with these limits,
/// over HTTP/2 ([`super::client`]). Behind a proxy, or with `DISABLE_HTTP2` set to anything
/// (client-go's switch, for a load balancer that mishandles HTTP/2), kube's HTTP/1.1 stack.
pub async fn client(limits: Limits) -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let http1 = std::env::var_os("DISABLE_HTTP2").is_some_and(|v| !v.is_empty());
    // Two stacks of two types: kube's knows proxies, ours speaks HTTP/2.
    if http1 || config.proxy_url.is_some() {
        let builder = kube::client::ClientBuilder::try_from(config)?;
        return Ok(if limits.limited() {
            builder.with_layer(&RateLimitLayer(limits)).build()
        } else {
            builder.build()
        });
    }
    let builder = super::client::builder(config)?;
    Ok(if limits.limited() {
        builder.with_layer(&RateLimitLayer(limits)).build()
    } else {
        builder.build()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked() {
        assert!(Limits::new(50.0, 100).is_ok());
        assert!(!Limits::new(0.0, 0).unwrap().limited(), "0: no limit");
        assert_eq!(Limits::new(-1.0, 10), Err(LimitError::Qps(-1.0)));
        assert!(Limits::new(f64::NAN, 10).is_err());
        assert_eq!(Limits::new(5.0, 0), Err(LimitError::Burst(0)));
        let text = LimitError::Burst(0).to_string();
        assert!(text.contains("--kube-api-burst"), "{text}");
    }

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(Limits::new(10.0, 3).unwrap(), t0);
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert_eq!(b.take(t0 + Duration::from_millis(100)), Ok(()));
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }

    // On tokio's paused clock (which `Bucket` reads): the waits are exact, whatever the load.
    #[tokio::test(start_paused = true)]
    async fn requests_beyond_the_burst_wait_for_tokens() {
        use tower::{Layer, Service};
        let mut svc = RateLimitLayer(Limits::new(1000.0, 5).unwrap())
            .layer(tower::service_fn(|(): ()| async { Ok::<_, ()>(()) }));
        let start = Instant::now();
        for _ in 0..105 {
            futures::future::poll_fn(|cx| svc.poll_ready(cx))
                .await
                .unwrap();
            svc.call(()).await.unwrap();
        }
        let took = start.elapsed();
        // 5 at once, then 100 at 1,000/s: 100 ms (tokio's timers round each wait up to 1 ms).
        assert!(took >= Duration::from_millis(99), "{took:?}");
        assert!(took <= Duration::from_millis(200), "{took:?}");
    }
}
