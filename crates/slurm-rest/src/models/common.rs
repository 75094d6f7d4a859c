//! Parts every slurmrestd response shares: `meta`, `errors[]`, `warnings[]`; and ping.

use serde::{Deserialize, Serialize};

/// One entry of a response's `errors[]` (`v0.0.44_openapi_error`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlurmErrorEntry {
    /// Slurm errno (for example 2017 "Invalid job id specified").
    pub error_number: Option<i32>,
    /// Slurm's short error text (`slurm_strerror`).
    pub error: Option<String>,
    /// Longer description of what failed.
    pub description: Option<String>,
    /// The Slurm function that reported it.
    pub source: Option<String>,
}

/// One entry of a response's `warnings[]` (`v0.0.44_openapi_warning`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlurmWarning {
    /// What the warning is about.
    pub description: Option<String>,
    /// The Slurm function that reported it.
    pub source: Option<String>,
}

/// `meta` of a response: which plugin, client and Slurm answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// Plugin that served the request.
    pub plugin: Option<MetaPlugin>,
    /// The client as slurmrestd saw it.
    pub client: Option<MetaClient>,
    /// Slurm version and cluster.
    pub slurm: Option<MetaSlurm>,
}

/// `meta.plugin`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaPlugin {
    /// Plugin type, e.g. `openapi/slurmctld`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Plugin name.
    pub name: Option<String>,
    /// Data parser, e.g. `data_parser/v0.0.44`.
    pub data_parser: Option<String>,
    /// Accounting storage plugin.
    pub accounting_storage: Option<String>,
}

/// `meta.client`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaClient {
    /// Client address.
    pub source: Option<String>,
    /// User the request ran as.
    pub user: Option<String>,
    /// Group the request ran as.
    pub group: Option<String>,
}

/// `meta.slurm`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaSlurm {
    /// Version parts.
    pub version: Option<MetaSlurmVersion>,
    /// Release string, e.g. `26.05.5`.
    pub release: Option<String>,
    /// Cluster name.
    pub cluster: Option<String>,
}

/// `meta.slurm.version`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaSlurmVersion {
    /// Major version.
    pub major: Option<String>,
    /// Micro version.
    pub micro: Option<String>,
    /// Minor version.
    pub minor: Option<String>,
}

/// The fields every response carries besides its payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ResponseStatus {
    /// `meta`.
    pub meta: Option<Meta>,
    /// `errors[]`.
    #[serde(deserialize_with = "super::de::null_default")]
    pub errors: Vec<SlurmErrorEntry>,
    /// `warnings[]`.
    #[serde(deserialize_with = "super::de::null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// One controller in GET /ping/ (`v0.0.44_controller_ping`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerPing {
    /// Controller host name.
    pub hostname: Option<String>,
    /// `UP` or `DOWN`.
    pub pinged: Option<String>,
    /// Whether the controller answered.
    pub responding: bool,
    /// Round trip in microseconds.
    pub latency: Option<i64>,
    /// `primary`, `backup1`, ...
    pub mode: Option<String>,
    /// Whether this is the primary controller.
    pub primary: bool,
}

/// Response of GET /ping/.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PingResponse {
    /// One entry per controller.
    #[serde(deserialize_with = "super::de::null_default")]
    pub pings: Vec<ControllerPing>,
    /// `meta`.
    pub meta: Option<Meta>,
    /// `warnings[]`.
    #[serde(deserialize_with = "super::de::null_default")]
    pub warnings: Vec<SlurmWarning>,
}
