//! An HTTP-aware fault proxy for tests: it stands between a client (the bridge) and a server
//! (slurmrestd, kube-apiserver) and, at chosen rates changeable while it runs, adds latency,
//! resets connections, answers 5xx or 429 itself, or stalls a request. It terminates TLS with a
//! given certificate and re-originates TLS to the server, so it works in front of
//! kube-apiserver too (docs/chaos.md says why not a TCP-level proxy).
//!
//! ```no_run
//! # async fn demo() -> fault_proxy::Result<()> {
//! use fault_proxy::{FaultProxy, Faults, ProxyOptions, Upstream};
//! let proxy = FaultProxy::start(ProxyOptions::new(Upstream::plain("http://127.0.0.1:6820")?)).await?;
//! proxy.set_faults(Faults { error_5xx: 0.05, ..Faults::none() })?;
//! // point the client at proxy.url(); proxy.stats() counts what was injected
//! # Ok(()) }
//! ```

pub mod control;
mod error;
mod faults;
pub mod kubeconfig;
mod proxy;
mod tls;

pub use error::{Error, Result};
pub use faults::{Fault, Faults, Stats};
pub use proxy::{FaultProxy, ProxyOptions, ServerTls, Upstream};
