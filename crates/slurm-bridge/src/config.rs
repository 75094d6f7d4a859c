//! The bridge's config file (`config.yaml`, reference §2.1), shared by every subcommand.
//!
//! Same fields as the Go original, matched case-insensitively as Go's JSON decoding does
//! (`mcsLabel`, `MCSLabel` and `mcslabel` all work). Unknown keys are ignored with a
//! warning. Every field is validated; errors name the field and the accepted form.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

/// Parsed and validated bridge configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// Name of the bridge scheduler (pods select it; also the taint/toleration value).
    pub scheduler_name: String,
    /// Base URL of slurmrestd, `http://host:port` or `https://host:port`.
    pub slurm_rest_api: String,
    /// Namespaces whose pods the admission webhook manages.
    pub managed_namespaces: Vec<String>,
    /// Label selector of managed namespaces; when present it replaces `managed_namespaces`.
    pub managed_namespace_selector: Option<LabelSelector>,
    /// `mcs_label` of every external job.
    pub mcs_label: String,
    /// Default Slurm partition of every external job.
    pub partition: String,
    /// Slurm settings for pods of a Kubernetes PriorityClass, by class name (this project's
    /// field; the original has none). `slurmjob.*` annotations win over it.
    pub priority_classes: BTreeMap<String, PriorityMapping>,
    /// This Kubernetes cluster's name in what the bridge writes to Slurm (job admin_comments,
    /// node comments), so bridges of several clusters sharing one Slurm touch only their own
    /// jobs and nodes. Empty: unnamed (one cluster per Slurm).
    pub cluster_name: String,
    /// Who jobs of each namespace run as and may ask for in Slurm ([`crate::tenancy`]); the
    /// first tenant covering a namespace is its tenant.
    pub tenants: Vec<crate::tenancy::Tenant>,
    /// The tenant of namespaces no tenant covers; without it (and with tenants configured) their
    /// pods are refused; with no tenants at all they get [`crate::tenancy::Tenant::implicit`].
    pub default_tenant: Option<crate::tenancy::Tenant>,
    /// Memory (MiB) per allocated CPU asked for a job whose pods set no memory request or
    /// limit, as Slurm's `DefMemPerCPU`; `None`: Slurm's own default applies (without one a job
    /// asking no memory is given the node's whole memory, and nothing shares the node).
    pub default_mem_per_cpu_mib: Option<u64>,
    /// DRA drivers besides the built-in GPU drivers whose devices become Slurm GRES
    /// `gpu:<driver>` (this project's field, `draDeviceDrivers`), each with how a device's index
    /// is found; pods ask for them as `deviceclass.resource.kubernetes.io/<driver>`.
    pub dra_device_drivers: Vec<crate::resources::gres_drivers::GresDriver>,
}

/// What a PriorityClass means in Slurm: any of a QoS, a partition and a job priority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityMapping {
    /// Slurm QoS (`qos`); with `PreemptType=preempt/qos` this gives the class Slurm's preemption.
    pub qos: Option<String>,
    /// Slurm partition (with `preempt/partition_prio`, its `PriorityTier` preempts).
    pub partition: Option<String>,
    /// Slurm job priority (0 to 4294967293).
    pub priority: Option<u32>,
}

impl Config {
    /// The DRA drivers whose devices become GRES: the built-in GPU drivers and
    /// `draDeviceDrivers`.
    pub fn gres_drivers(&self) -> crate::resources::gres_drivers::GresDrivers {
        crate::resources::gres_drivers::GresDrivers::with(self.dra_device_drivers.iter().cloned())
    }

    /// The Slurm settings of PriorityClass `class`, if the config maps it.
    pub fn priority_class(&self, class: &str) -> Option<&PriorityMapping> {
        self.priority_classes.get(class)
    }
}

/// A config problem; the text names the field and the accepted form.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// Path given.
        path: String,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML.
    #[error("config file is not valid YAML: {0}")]
    Yaml(String),
    /// The document is not a mapping.
    #[error(
        "config file must be a YAML mapping of fields (schedulerName, slurmRestApi, ...), got {0}"
    )]
    NotAMapping(&'static str),
    /// A field has a bad value.
    #[error("config field {field}: {problem}; expected {expected}")]
    Field {
        /// Field name as spelled in the file.
        field: String,
        /// What is wrong.
        problem: String,
        /// The accepted form.
        expected: &'static str,
    },
}

/// Field names, lower-cased for matching.
const FIELDS: [&str; 12] = [
    "schedulername",
    "slurmrestapi",
    "managednamespaces",
    "managednamespaceselector",
    "mcslabel",
    "partition",
    "priorityclasses",
    "tenants",
    "defaulttenant",
    "clustername",
    "defaultmempercpu",
    "dradevicedrivers",
];

/// The JSON kind of `v`, for messages ("got a list").
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parse and validate config YAML. An empty document gives the empty config.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| ConfigError::Yaml(e.to_string()))?;
        let value = match docs.len() {
            0 => return Ok(Config::default()),
            1 => docs.into_iter().next().unwrap_or(Value::Null),
            n => {
                return Err(ConfigError::Yaml(format!(
                    "expected one YAML document, found {n}"
                )));
            }
        };
        let map = match value {
            Value::Null => return Ok(Config::default()),
            Value::Object(m) => m,
            other => return Err(ConfigError::NotAMapping(type_name(&other))),
        };
        let mut cfg = Config::default();
        for (key, v) in map {
            let lower = key.to_ascii_lowercase();
            if !FIELDS.contains(&lower.as_str()) {
                tracing::warn!(key = %key, "ignoring unknown config field");
                continue;
            }
            match lower.as_str() {
                "schedulername" => {
                    cfg.scheduler_name = string_field(
                        &key,
                        v,
                        "a scheduler name (a Kubernetes label value, at most 63 characters of [A-Za-z0-9-_.])",
                    )?
                }
                "slurmrestapi" => {
                    cfg.slurm_rest_api =
                        string_field(&key, v, "a URL such as http://slurm-restapi.slurm:6820")?
                }
                "managednamespaces" => cfg.managed_namespaces = string_list(&key, v)?,
                "managednamespaceselector" => {
                    cfg.managed_namespace_selector = Some(selector(&key, v)?)
                }
                "mcslabel" => {
                    cfg.mcs_label = string_field(&key, v, "a string (the Slurm MCS label)")?
                }
                "partition" => {
                    cfg.partition = string_field(&key, v, "a Slurm partition name (no spaces)")?
                }
                "priorityclasses" => cfg.priority_classes = priority_classes(&key, v)?,
                "clustername" => {
                    cfg.cluster_name = string_field(
                        &key,
                        v,
                        "a cluster name (a Kubernetes label value, at most 63 characters of [A-Za-z0-9-_.])",
                    )?
                }
                "defaultmempercpu" => cfg.default_mem_per_cpu_mib = mem_per_cpu(&key, v)?,
                "dradevicedrivers" => cfg.dra_device_drivers = dra_device_drivers(&key, v)?,
                "tenants" => cfg.tenants = crate::tenancy::tenant::parse_list(&key, v)?,
                "defaulttenant" => {
                    cfg.default_tenant = match v {
                        Value::Null => None,
                        v => Some(crate::tenancy::tenant::parse(&key, v, false)?),
                    }
                }
                _ => {}
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check every field's form.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.scheduler_name.is_empty() && !is_label_value(&self.scheduler_name) {
            return Err(field_err(
                "schedulerName",
                format!("{:?} is not a valid label value", self.scheduler_name),
                "a scheduler name (a Kubernetes label value, at most 63 characters of [A-Za-z0-9-_.])",
            ));
        }
        if !is_label_value(&self.cluster_name) {
            return Err(field_err(
                "clusterName",
                format!("{:?} is not a valid label value", self.cluster_name),
                "a cluster name (a Kubernetes label value, at most 63 characters of [A-Za-z0-9-_.])",
            ));
        }
        if !self.slurm_rest_api.is_empty() && !is_http_url(&self.slurm_rest_api) {
            return Err(field_err(
                "slurmRestApi",
                format!("{:?} is not an http(s) URL", self.slurm_rest_api),
                "a URL such as http://slurm-restapi.slurm:6820",
            ));
        }
        for ns in &self.managed_namespaces {
            if !is_dns_label(ns) {
                return Err(field_err(
                    "managedNamespaces",
                    format!("{ns:?} is not a namespace name"),
                    "a list of namespace names (lower-case RFC 1123 labels)",
                ));
            }
        }
        if let Some(sel) = &self.managed_namespace_selector {
            for expr in sel.match_expressions.iter().flatten() {
                let values = expr.values.as_ref().map_or(0, |v| v.len());
                let ok = match expr.operator.as_str() {
                    "In" | "NotIn" => values > 0,
                    "Exists" | "DoesNotExist" => values == 0,
                    _ => false,
                };
                if !ok {
                    return Err(field_err(
                        "managedNamespaceSelector",
                        format!(
                            "bad match expression on key {:?} with operator {:?}",
                            expr.key, expr.operator
                        ),
                        "operator In or NotIn with values, or Exists or DoesNotExist without values",
                    ));
                }
            }
        }
        if self.partition.chars().any(char::is_whitespace) {
            return Err(field_err(
                "partition",
                format!("{:?} contains whitespace", self.partition),
                "a Slurm partition name (no spaces)",
            ));
        }
        Ok(())
    }
}

/// A [`ConfigError::Field`].
pub(crate) fn field_err(field: &str, problem: String, expected: &'static str) -> ConfigError {
    ConfigError::Field {
        field: field.to_string(),
        problem,
        expected,
    }
}

/// A value of the wrong JSON type at `field`: what it got, and what is `expected`.
pub(crate) fn type_err(field: &str, v: &Value, expected: &'static str) -> ConfigError {
    field_err(field, format!("got {}", type_name(v)), expected)
}

/// `defaultMemPerCpu`: a positive whole number of MiB (null: unset).
fn mem_per_cpu(key: &str, v: Value) -> Result<Option<u64>, ConfigError> {
    const EXPECTED: &str =
        "a positive whole number of MiB per CPU, as Slurm's DefMemPerCPU (e.g. 1024)";
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(m) if m > 0 => Ok(Some(m)),
            _ => Err(field_err(key, format!("got {n}"), EXPECTED)),
        },
        other => Err(type_err(key, &other, EXPECTED)),
    }
}

fn string_field(key: &str, v: Value, expected: &'static str) -> Result<String, ConfigError> {
    match v {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        other => Err(type_err(key, &other, expected)),
    }
}

fn string_list(key: &str, v: Value) -> Result<Vec<String>, ConfigError> {
    const EXPECTED: &str = "a list of namespace names (lower-case RFC 1123 labels)";
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                other => Err(field_err(
                    key,
                    format!("list item is {}", type_name(&other)),
                    EXPECTED,
                )),
            })
            .collect(),
        other => Err(type_err(key, &other, EXPECTED)),
    }
}

const EXPECT_PRIORITY_CLASSES: &str = "a mapping from PriorityClass name to {qos: NAME, partition: NAME, priority: 0..4294967293} (each optional)";

fn priority_classes(key: &str, v: Value) -> Result<BTreeMap<String, PriorityMapping>, ConfigError> {
    let map = match v {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(m) => m,
        other => {
            return Err(type_err(key, &other, EXPECT_PRIORITY_CLASSES));
        }
    };
    let mut out = BTreeMap::new();
    for (class, entry) in map {
        let at = format!("{key}.{class}");
        if !is_dns_subdomain(&class) {
            return Err(field_err(
                &at,
                format!("{class:?} is not a PriorityClass name"),
                "a PriorityClass name (a lower-case RFC 1123 subdomain)",
            ));
        }
        let fields = match entry {
            Value::Null => serde_json::Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(type_err(&at, &other, EXPECT_PRIORITY_CLASSES));
            }
        };
        let mut m = PriorityMapping::default();
        for (name, value) in fields {
            let field = format!("{at}.{name}");
            match name.to_ascii_lowercase().as_str() {
                "qos" => m.qos = Some(slurm_name(&field, value)?),
                "partition" => m.partition = Some(slurm_name(&field, value)?),
                "priority" => {
                    let text = match &value {
                        Value::Number(n) => n.to_string(),
                        Value::String(s) => s.clone(),
                        other => format!("<{}>", type_name(other)),
                    };
                    let n = crate::workload::annotations::parse_priority(&text)
                        .map_err(|e| field_err(&field, format!("{text:?} is not valid"), e))?;
                    m.priority = Some(n);
                }
                _ => {
                    return Err(field_err(
                        &field,
                        "unknown field".into(),
                        "qos, partition or priority",
                    ));
                }
            }
        }
        out.insert(class, m);
    }
    Ok(out)
}

const EXPECT_DRA_DRIVERS: &str = "a list of {name: DRIVER, index: attribute|name}: the DRA driver \
     (also its DeviceClass's name; a DNS subdomain of at most 63 characters, not dra.cpu, \
     gpu.nvidia.com or gpu.example.com, each once) and where a device's GRES index is: its int \
     attribute `index` (attribute) or the number at the end of its name, device-03 -> 3 (name)";

/// `draDeviceDrivers`: the admin's DRA drivers whose devices become GRES.
fn dra_device_drivers(
    key: &str,
    v: Value,
) -> Result<Vec<crate::resources::gres_drivers::GresDriver>, ConfigError> {
    use crate::resources::gres_drivers::{DeviceIndex, GresDriver, GresDrivers};
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(type_err(key, &other, EXPECT_DRA_DRIVERS)),
    };
    let builtin = GresDrivers::builtin();
    let mut out: Vec<GresDriver> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        let Value::Object(fields) = item else {
            return Err(type_err(&at, &item, EXPECT_DRA_DRIVERS));
        };
        let (mut name, mut index) = (None, None);
        for (field, value) in fields {
            let f = format!("{at}.{field}");
            match field.to_ascii_lowercase().as_str() {
                "name" => match value {
                    Value::String(s) => name = Some(s),
                    other => return Err(type_err(&f, &other, EXPECT_DRA_DRIVERS)),
                },
                "index" => {
                    index = Some(match &value {
                        Value::String(s) if s == "attribute" => DeviceIndex::Attribute,
                        Value::String(s) if s == "name" => DeviceIndex::NameNumber,
                        Value::String(s) => {
                            return Err(field_err(&f, format!("got {s:?}"), EXPECT_DRA_DRIVERS));
                        }
                        other => return Err(type_err(&f, other, EXPECT_DRA_DRIVERS)),
                    })
                }
                _ => {
                    return Err(field_err(&f, "unknown field".into(), "name or index"));
                }
            }
        }
        let Some(name) = name else {
            return Err(field_err(&at, "no name".into(), EXPECT_DRA_DRIVERS));
        };
        let Some(index) = index else {
            return Err(field_err(
                &format!("{at}.index"),
                format!("missing for driver {name:?}"),
                EXPECT_DRA_DRIVERS,
            ));
        };
        let at_name = format!("{at}.name");
        if name.len() > 63 || !is_dns_subdomain(&name) {
            return Err(field_err(
                &at_name,
                format!("{name:?} is not a DRA driver name"),
                EXPECT_DRA_DRIVERS,
            ));
        }
        if name == crate::wellknown::DEVICECLASS_DRA_CPU || builtin.contains(&name) {
            return Err(field_err(
                &at_name,
                format!("{name:?} is built in"),
                EXPECT_DRA_DRIVERS,
            ));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(field_err(
                &at_name,
                format!("{name:?} is listed twice"),
                EXPECT_DRA_DRIVERS,
            ));
        }
        out.push(GresDriver { name, index });
    }
    Ok(out)
}

/// A Slurm QoS or partition name: a non-empty string without whitespace.
fn slurm_name(field: &str, v: Value) -> Result<String, ConfigError> {
    const EXPECTED: &str = "a Slurm name (a non-empty string without spaces)";
    match v {
        Value::String(s) if !s.is_empty() && !s.chars().any(char::is_whitespace) => Ok(s),
        Value::String(s) => Err(field_err(
            field,
            format!("{s:?} is not a Slurm name"),
            EXPECTED,
        )),
        other => Err(type_err(field, &other, EXPECTED)),
    }
}

/// A lower-case RFC 1123 subdomain (PriorityClass and other object names).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label selector (its operators unchecked).
pub(crate) fn selector(key: &str, v: Value) -> Result<LabelSelector, ConfigError> {
    const EXPECTED: &str = "a label selector: {matchLabels: {key: value}, matchExpressions: [{key, operator, values}]}";
    if !v.is_object() {
        return Err(type_err(key, &v, EXPECTED));
    }
    serde_json::from_value(v).map_err(|e| field_err(key, e.to_string(), EXPECTED))
}

/// Kubernetes label value: ≤ 63 chars, alphanumerics plus `-_.`, alphanumeric at both ends.
pub fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// RFC 1123 label (namespace names).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_http_url(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !authority.ends_with(']') => {
            if port.is_empty() || port.parse::<u16>().is_err() {
                return false;
            }
            h
        }
        _ => authority,
    };
    !host.is_empty() && !host.contains(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_is_zero_config() {
        assert_eq!(Config::from_yaml("").unwrap(), Config::default());
        assert_eq!(
            Config::from_yaml("# just a comment\n").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn each_field() {
        assert_eq!(
            Config::from_yaml("schedulerName: foo")
                .unwrap()
                .scheduler_name,
            "foo"
        );
        assert_eq!(
            Config::from_yaml("slurmRestApi: http://slurm-restapi.slurm:6820")
                .unwrap()
                .slurm_rest_api,
            "http://slurm-restapi.slurm:6820"
        );
        assert_eq!(
            Config::from_yaml("managedNamespaces: [a, b]")
                .unwrap()
                .managed_namespaces,
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(
            Config::from_yaml("mcsLabel: kubernetes").unwrap().mcs_label,
            "kubernetes"
        );
        assert_eq!(
            Config::from_yaml("defaultMemPerCpu: 512")
                .unwrap()
                .default_mem_per_cpu_mib,
            Some(512)
        );
        assert_eq!(
            Config::from_yaml("clusterName: east").unwrap().cluster_name,
            "east"
        );
        assert_eq!(
            Config::from_yaml("partition: slurm-bridge")
                .unwrap()
                .partition,
            "slurm-bridge"
        );
        let sel = Config::from_yaml("managedNamespaceSelector:\n  matchLabels:\n    foo: bar\n")
            .unwrap()
            .managed_namespace_selector
            .unwrap();
        assert_eq!(sel.match_labels.unwrap()["foo"], "bar");
    }

    #[test]
    fn helm_rendered_default() {
        let cfg = Config::from_yaml(
            "schedulerName: slurm-bridge-scheduler\nslurmRestApi: http://slurm-restapi.slurm:6820\n\
             managedNamespaces:\n  - slurm-bridge\nmcsLabel: kubernetes\npartition: slurm-bridge\n",
        )
        .unwrap();
        assert_eq!(cfg.scheduler_name, "slurm-bridge-scheduler");
        assert_eq!(cfg.managed_namespaces, vec!["slurm-bridge"]);
        assert!(cfg.managed_namespace_selector.is_none());
    }

    #[test]
    fn keys_are_case_insensitive() {
        for key in ["mcsLabel", "MCSLabel", "mcslabel"] {
            assert_eq!(
                Config::from_yaml(&format!("{key}: x")).unwrap().mcs_label,
                "x",
                "{key}"
            );
        }
        assert_eq!(
            Config::from_yaml("SCHEDULERNAME: s")
                .unwrap()
                .scheduler_name,
            "s"
        );
    }

    #[test]
    fn unknown_keys_ignored() {
        assert_eq!(
            Config::from_yaml("foo: bar\npartition: p")
                .unwrap()
                .partition,
            "p"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC*") {
            let _ = Config::from_yaml(&text);
        }

        #[test]
        fn never_panics_on_config_like_yaml(key in "(schedulerName|slurmRestApi|managedNamespaces|managedNamespaceSelector|mcsLabel|partition|x)", value in "(\\[|\\{|-|:| |[a-z0-9/.:]){0,20}") {
            let _ = Config::from_yaml(&format!("{key}: {value}\n"));
        }
    }

    #[test]
    fn errors_name_field_and_form() {
        let cases = [
            ("schedulerName: [a]", "schedulerName"),
            ("schedulerName: 'has space'", "schedulerName"),
            ("slurmRestApi: slurm:6820", "slurmRestApi"),
            ("slurmRestApi: http://host:notaport", "slurmRestApi"),
            ("managedNamespaces: foo", "managedNamespaces"),
            ("managedNamespaces: [Foo_Bar]", "managedNamespaces"),
            ("managedNamespaceSelector: [x]", "managedNamespaceSelector"),
            (
                "managedNamespaceSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}",
                "managedNamespaceSelector",
            ),
            ("mcsLabel: {a: b}", "mcsLabel"),
            ("partition: 'a b'", "partition"),
            ("clusterName: 'east coast'", "clusterName"),
            ("defaultMemPerCpu: 0", "defaultMemPerCpu"),
            ("defaultMemPerCpu: 1.5", "defaultMemPerCpu"),
            ("defaultMemPerCpu: 1Gi", "defaultMemPerCpu"),
        ];
        for (yaml, field) in cases {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("expected"),
                "{yaml}: {err}"
            );
        }
        assert!(matches!(
            Config::from_yaml("- a\n- b"),
            Err(ConfigError::NotAMapping(_))
        ));
        assert!(matches!(
            Config::from_yaml("a: [b"),
            Err(ConfigError::Yaml(_))
        ));
    }

    #[test]
    fn priority_classes_map_to_slurm_settings_and_bad_entries_say_what_is_accepted() {
        let cfg = Config::from_yaml(
            "priorityClasses:\n  high: {qos: urgent, partition: fast, priority: 900}\n  low:\n    QOS: scavenger\n    priority: \"7\"\n  plain: null\n",
        )
        .unwrap();
        assert_eq!(
            cfg.priority_class("high"),
            Some(&PriorityMapping {
                qos: Some("urgent".into()),
                partition: Some("fast".into()),
                priority: Some(900),
            })
        );
        assert_eq!(cfg.priority_class("low").unwrap().priority, Some(7));
        assert_eq!(
            cfg.priority_class("plain"),
            Some(&PriorityMapping::default())
        );
        assert_eq!(cfg.priority_class("other"), None);
        for (yaml, want) in [
            ("priorityClasses: [high]", "priorityClasses: got a list"),
            (
                "priorityClasses: {High: {qos: q}}",
                "priorityClasses.High: \"High\" is not a PriorityClass name",
            ),
            (
                "priorityClasses: {high: {qos: \"a b\"}}",
                "priorityClasses.high.qos: \"a b\" is not a Slurm name",
            ),
            (
                "priorityClasses: {high: {priority: -1}}",
                "priorityClasses.high.priority: \"-1\" is not valid; expected a whole number from 0 to 4294967293",
            ),
            (
                "priorityClasses: {high: {preempt: yes}}",
                "priorityClasses.high.preempt: unknown field; expected qos, partition or priority",
            ),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(want), "{yaml}: {err}");
        }
    }

    #[test]
    fn dra_device_drivers_parse() {
        use crate::resources::gres_drivers::{DeviceIndex, GresDriver};
        let cfg = Config::from_yaml(
            "draDeviceDrivers:\n- {name: test-driver.cdi.k8s.io, index: name}\n- {name: gpu.intel.com, index: attribute}\n",
        )
        .unwrap();
        assert_eq!(
            cfg.dra_device_drivers,
            vec![
                GresDriver {
                    name: "test-driver.cdi.k8s.io".into(),
                    index: DeviceIndex::NameNumber
                },
                GresDriver {
                    name: "gpu.intel.com".into(),
                    index: DeviceIndex::Attribute
                },
            ]
        );
        let drivers = cfg.gres_drivers();
        assert_eq!(drivers.get("gpu.nvidia.com"), Some(DeviceIndex::GpuName));
        assert_eq!(drivers.get("gpu.example.com"), Some(DeviceIndex::Attribute));
        assert_eq!(
            drivers.get("test-driver.cdi.k8s.io"),
            Some(DeviceIndex::NameNumber)
        );
        assert_eq!(
            drivers.supported(),
            "dra.cpu, gpu.nvidia.com, gpu.example.com, test-driver.cdi.k8s.io, gpu.intel.com"
        );
        // Absent or null: the built-ins only.
        assert_eq!(
            Config::default().gres_drivers(),
            crate::resources::gres_drivers::GresDrivers::builtin()
        );
        assert!(
            Config::from_yaml("draDeviceDrivers: null")
                .unwrap()
                .dra_device_drivers
                .is_empty()
        );
    }

    #[test]
    fn bad_dra_device_drivers_name_the_field() {
        for (yaml, field, problem) in [
            ("draDeviceDrivers: x", "draDeviceDrivers", "got a string"),
            (
                "draDeviceDrivers: [x]",
                "draDeviceDrivers[0]",
                "got a string",
            ),
            (
                "draDeviceDrivers: [{index: name}]",
                "draDeviceDrivers[0]",
                "no name",
            ),
            (
                "draDeviceDrivers: [{name: a.b}]",
                "draDeviceDrivers[0].index",
                "missing for driver \"a.b\"",
            ),
            (
                "draDeviceDrivers: [{name: a.b, index: number}]",
                "draDeviceDrivers[0].index",
                "got \"number\"",
            ),
            (
                "draDeviceDrivers: [{name: a.b, index: 3}]",
                "draDeviceDrivers[0].index",
                "got a number",
            ),
            (
                "draDeviceDrivers: [{name: A_B, index: name}]",
                "draDeviceDrivers[0].name",
                "\"A_B\" is not a DRA driver name",
            ),
            (
                "draDeviceDrivers: [{name: gpu.nvidia.com, index: name}]",
                "draDeviceDrivers[0].name",
                "is built in",
            ),
            (
                "draDeviceDrivers: [{name: dra.cpu, index: attribute}]",
                "draDeviceDrivers[0].name",
                "is built in",
            ),
            (
                "draDeviceDrivers: [{name: a.b, index: name}, {name: a.b, index: attribute}]",
                "draDeviceDrivers[1].name",
                "listed twice",
            ),
            (
                "draDeviceDrivers: [{name: a.b, index: name, pool: x}]",
                "draDeviceDrivers[0].pool",
                "unknown field",
            ),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("config field {field}: ")) && err.contains(problem),
                "{yaml}: {err}"
            );
            if field != "draDeviceDrivers[0].pool" {
                assert!(
                    err.contains("attribute") && err.contains("device-03"),
                    "{err}"
                );
            }
        }
    }
}
