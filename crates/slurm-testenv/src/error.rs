//! The one error type of slurm-testenv.

use std::path::PathBuf;

/// Everything that can go wrong while preparing or running a Slurm test instance.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "slurm-testenv must run as root (it builds a root file system with debootstrap and uses mount namespaces); run it with sudo or as root"
    )]
    NotRoot,

    #[error(
        "the package registry could not be reached while building the Slurm root file system (mirror {mirror}); check the network and the host's apt configuration.\n--- last lines of {log} ---\n{tail}"
    )]
    RegistryUnreachable {
        mirror: String,
        log: PathBuf,
        tail: String,
    },

    #[error("could not determine a Debian mirror: {0}")]
    NoMirror(String),

    #[error(
        "building the Slurm root file system failed ({what}).\n--- last lines of {log} ---\n{tail}"
    )]
    RootfsBuild {
        what: String,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "port {port} is in use on 127.0.0.1 ({what}); free it or let slurm-testenv pick another"
    )]
    PortInUse { port: u16, what: &'static str },

    #[error("{daemon} failed to start: {reason}.\n--- last lines of {log} ---\n{tail}")]
    DaemonFailed {
        daemon: &'static str,
        reason: String,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "no running slurm-testenv instance named {name:?} (start one with `slurm-testenv up --name {name}`)"
    )]
    NoSuchInstance { name: String },

    #[error(
        "a slurm-testenv instance named {name:?} is already running (stop it with `slurm-testenv down --name {name}`)"
    )]
    AlreadyRunning { name: String },

    #[error("invalid instance name {name:?}: use 1-40 characters from a-z, A-Z, 0-9, '-' and '_'")]
    InvalidName { name: String },

    #[error("{daemon} is not running in this instance")]
    NotRunning { daemon: String },

    #[error("no slurmd-run node {node:?} in this instance (its slurmd nodes: {nodes:?})")]
    NoSuchNode { node: String, nodes: Vec<String> },

    #[error(
        "{what} needs an instance with accounting (`--accounting`, InstanceOptions::accounting)"
    )]
    NeedsAccounting { what: &'static str },

    #[error("{what} needs slurmd-run nodes (`--slurmd-nodes N`, InstanceOptions::slurmd_nodes)")]
    NeedsSlurmdNodes { what: &'static str },

    #[error("cannot add the Unix user or group: {what}")]
    UnixUser { what: String },

    #[error("`{command}` exited with {status}: {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
