//! Errors of kube-testenv.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an instance could not be built, started, found or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube-testenv must run as root (it binds ports and manages daemons for tests)")]
    NotRoot,
    #[error("invalid instance name {name:?}: use 1-40 characters from [A-Za-z0-9_-]")]
    InvalidName { name: String },
    #[error("no running instance named {name:?} (start one with `kube-testenv up --name {name}`)")]
    NoSuchInstance { name: String },
    #[error(
        "an instance named {name:?} is already running; stop it with `kube-testenv down --name {name}`"
    )]
    AlreadyRunning { name: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`go` was not found or failed ({message}); kube-testenv builds Kubernetes from its Go modules and needs Go 1.26 or newer on PATH (or KUBE_TESTENV_GO)"
    )]
    GoMissing { message: String },
    #[error(
        "building {binary} from Go module {module} failed (exit {status}); log {log}; last lines:\n{tail}"
    )]
    Build {
        binary: String,
        module: String,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("generating {what}: {message}")]
    Pki { what: &'static str, message: String },
    #[error(
        "{component} did not become ready within {seconds} s: {detail}\nlast lines of {log}:\n{tail}"
    )]
    NotReady {
        component: &'static str,
        seconds: u64,
        detail: String,
        log: PathBuf,
        tail: String,
    },
    #[error("{component} exited during start-up ({status}); last lines of {log}:\n{tail}")]
    Exited {
        component: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("Kubernetes API call failed while {doing}: {source}")]
    Kube {
        doing: String,
        #[source]
        source: kube::Error,
    },
    #[error("node agent: {0}")]
    Agent(String),
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// Wraps a kube error with what was being done.
    pub fn kube(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let doing = doing.into();
        move |source| Error::Kube { doing, source }
    }
}

/// The last `n` lines of a log file (for error messages).
pub fn tail_of(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
