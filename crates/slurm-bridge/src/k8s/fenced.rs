//! A Kubernetes client whose writes pass the leader [`Fence`]: every request that may change
//! something (any method but GET, HEAD and OPTIONS) is checked right before it is handed to the
//! client's transport, and refused without being sent once this replica no longer holds the
//! leader Lease. Reads and watches always pass, so the caches of a standby stay warm.

use crate::leader::Fence;
use hyper::{Method, Request, Response};
use kube::client::Body;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `client` with its writes fenced by `fence` (see the module documentation). The scheduler and
/// the controllers write through it; leader election and admission use the plain client.
pub fn client(client: &kube::Client, fence: Fence) -> kube::Client {
    let ns = client.default_namespace().to_string();
    kube::Client::new(
        FencedService {
            inner: client.clone(),
            fence,
        },
        ns,
    )
}

/// True for methods that never change anything.
pub fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The tower service behind [`client`].
#[derive(Clone)]
struct FencedService {
    inner: kube::Client,
    fence: Fence,
}

impl tower_service::Service<Request<Body>> for FencedService {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if !is_read(req.method())
            && let Err(fenced) = self.fence.check("kubernetes")
        {
            tracing::debug!(method = %req.method(), path = req.uri().path(), "fenced");
            return Box::pin(async move { Err(kube::Error::Service(Box::new(fenced))) });
        }
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_head_and_options_are_reads() {
        for (m, read) in [
            (Method::GET, true),
            (Method::HEAD, true),
            (Method::OPTIONS, true),
            (Method::POST, false),
            (Method::PUT, false),
            (Method::PATCH, false),
            (Method::DELETE, false),
        ] {
            assert_eq!(is_read(&m), read, "{m}");
        }
    }
}
