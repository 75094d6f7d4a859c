//! The proxy's errors.

/// What can go wrong setting up or steering a proxy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A fault setting out of range; names the field and what is accepted.
    #[error("invalid faults: {0}")]
    InvalidFaults(String),
    /// A certificate, key or CA that could not be read or used.
    #[error("TLS {what}: {message}")]
    Tls { what: String, message: String },
    /// An upstream URL or kubeconfig that cannot be used.
    #[error("upstream: {0}")]
    Upstream(String),
    /// A file that could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Binding the listening socket failed.
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The control endpoint of a running proxy answered an error or not at all.
    #[error("control {addr}: {message}")]
    Control { addr: String, message: String },
}

/// The proxy's result type.
pub type Result<T> = std::result::Result<T, Error>;
