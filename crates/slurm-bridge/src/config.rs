//! The bridge's config file (`config.yaml`, reference §2.1), shared by every subcommand.
//!
//! Same fields as the Go original, matched case-insensitively as Go's JSON decoding does
//! (`mcsLabel`, `MCSLabel` and `mcslabel` all work). Unknown keys are ignored with a
//! warning. Every field is validated; errors name the field and the accepted form.

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
const FIELDS: [&str; 6] = [
    "schedulername",
    "slurmrestapi",
    "managednamespaces",
    "managednamespaceselector",
    "mcslabel",
    "partition",
];

fn type_name(v: &Value) -> &'static str {
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

fn field_err(field: &str, problem: String, expected: &'static str) -> ConfigError {
    ConfigError::Field {
        field: field.to_string(),
        problem,
        expected,
    }
}

fn string_field(key: &str, v: Value, expected: &'static str) -> Result<String, ConfigError> {
    match v {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        other => Err(field_err(
            key,
            format!("got {}", type_name(&other)),
            expected,
        )),
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
        other => Err(field_err(
            key,
            format!("got {}", type_name(&other)),
            EXPECTED,
        )),
    }
}

fn selector(key: &str, v: Value) -> Result<LabelSelector, ConfigError> {
    const EXPECTED: &str = "a label selector: {matchLabels: {key: value}, matchExpressions: [{key, operator, values}]}";
    if !v.is_object() {
        return Err(field_err(key, format!("got {}", type_name(&v)), EXPECTED));
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
}
