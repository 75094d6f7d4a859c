//! A tenant as the administrator writes it in config.yaml (`tenants`, `defaultTenant`): which
//! namespaces it covers and what their pods' Slurm jobs get.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::config::{ConfigError, field_err as err, is_dns_label, selector, type_err};
use crate::wellknown::slurmjob;

/// The job fields that decide who a job runs as, who pays, and how it ranks: a pod's author
/// sets them only where its tenant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKey {
    /// `slurmjob.slinky.slurm.net/account`.
    Account,
    /// `slurmjob.slinky.slurm.net/user-id`.
    UserId,
    /// `slurmjob.slinky.slurm.net/group-id`.
    GroupId,
    /// `slurmjob.slinky.slurm.net/qos`.
    Qos,
    /// `slurmjob.slinky.slurm.net/partition`.
    Partition,
    /// `slurmjob.slinky.slurm.net/priority`.
    Priority,
    /// `slurmjob.slinky.slurm.net/reservation`.
    Reservation,
    /// `slurmjob.slinky.slurm.net/wckey`.
    Wckey,
}

impl PolicyKey {
    /// Every policy key, in the order messages list them.
    pub const ALL: [PolicyKey; 8] = [
        PolicyKey::Account,
        PolicyKey::UserId,
        PolicyKey::GroupId,
        PolicyKey::Qos,
        PolicyKey::Partition,
        PolicyKey::Priority,
        PolicyKey::Reservation,
        PolicyKey::Wckey,
    ];

    /// The name in `allowAnnotations` (the annotation key's suffix).
    pub fn name(self) -> &'static str {
        match self {
            PolicyKey::Account => "account",
            PolicyKey::UserId => "user-id",
            PolicyKey::GroupId => "group-id",
            PolicyKey::Qos => "qos",
            PolicyKey::Partition => "partition",
            PolicyKey::Priority => "priority",
            PolicyKey::Reservation => "reservation",
            PolicyKey::Wckey => "wckey",
        }
    }

    /// The full annotation key.
    pub fn annotation(self) -> &'static str {
        match self {
            PolicyKey::Account => slurmjob::ACCOUNT,
            PolicyKey::UserId => slurmjob::USER_ID,
            PolicyKey::GroupId => slurmjob::GROUP_ID,
            PolicyKey::Qos => slurmjob::QOS,
            PolicyKey::Partition => slurmjob::PARTITION,
            PolicyKey::Priority => slurmjob::PRIORITY,
            PolicyKey::Reservation => slurmjob::RESERVATION,
            PolicyKey::Wckey => slurmjob::WCKEY,
        }
    }

    /// The key named `name` (its suffix, or the full annotation key).
    pub fn parse(name: &str) -> Option<PolicyKey> {
        let suffix = name.strip_prefix(slurmjob::ACCOUNT.trim_end_matches("account"));
        let name = suffix.unwrap_or(name);
        PolicyKey::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }
}

/// One tenant: the namespaces it covers and what their pods' jobs get.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tenant {
    /// A name for messages and metrics (`tenants[i]` when the config gives none).
    pub name: String,
    /// Namespaces covered, by name.
    pub namespaces: Vec<String>,
    /// Namespaces covered, by label (besides `namespaces`).
    pub namespace_selector: Option<LabelSelector>,
    /// The Slurm account every job is charged to (else the user's default account).
    pub account: Option<String>,
    /// The Slurm user (name or uid) jobs run as, submitted on its behalf; else the bridge's own.
    pub user: Option<String>,
    /// The Unix group (name or gid) jobs run as; else the user's primary group.
    pub group: Option<String>,
    /// QoS allowed; the first is the default.
    pub qos: Vec<String>,
    /// Partitions allowed; the first is the default (else the config's `partition`).
    pub partitions: Vec<String>,
    /// The policy annotations authors may set beyond the lists above.
    pub allow_annotations: BTreeSet<PolicyKey>,
}

impl Tenant {
    /// The tenant of namespaces no configured tenant covers when the config has no `tenants`
    /// and no `defaultTenant`: jobs run as the bridge's Slurm user, in Slurm's defaults, and
    /// authors set none of the policy annotations.
    pub fn implicit() -> Tenant {
        Tenant {
            name: "(default)".into(),
            ..Tenant::default()
        }
    }

    /// Whether this tenant covers `namespace` (with `labels`, its labels).
    pub fn covers(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.namespaces.iter().any(|n| n == namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| crate::k8s::selector::label_selector_matches(s, labels))
    }
}

const EXPECT_TENANT: &str = "a mapping with namespaces and/or namespaceSelector, and any of name, account, user, group, qos, partitions, allowAnnotations";
const EXPECT_NAMES: &str = "a list of Slurm names (non-empty strings without spaces)";
const EXPECT_NAME: &str = "a Slurm name (a non-empty string without spaces)";
const EXPECT_NAMESPACES: &str = "a list of namespace names (lower-case RFC 1123 labels)";
const EXPECT_ALLOW: &str = "a list of: account, user-id, group-id, qos, partition, priority, reservation, wckey (or \"*\" for all)";

/// A Slurm name, or a number written as one (`user: 2001`).
fn slurm_name(field: &str, v: Value) -> Result<String, ConfigError> {
    let s = match v {
        Value::String(s) => s,
        Value::Number(n) if n.is_u64() => n.to_string(),
        other => return Err(type_err(field, &other, EXPECT_NAME)),
    };
    if s.is_empty() || s.chars().any(char::is_whitespace) || s.contains(',') {
        return Err(err(
            field,
            format!("{s:?} is not a Slurm name"),
            EXPECT_NAME,
        ));
    }
    Ok(s)
}

fn list(field: &str, v: Value, expected: &'static str) -> Result<Vec<Value>, ConfigError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => Ok(items),
        // One name for a list of one.
        Value::String(s) => Ok(vec![Value::String(s)]),
        other => Err(type_err(field, &other, expected)),
    }
}

fn names(field: &str, v: Value) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (i, item) in list(field, v, EXPECT_NAMES)?.into_iter().enumerate() {
        let name = slurm_name(&format!("{field}[{i}]"), item)?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Parses one tenant; `at` names it in errors (`tenants[2]`, `defaultTenant`). A default tenant
/// (`needs_namespaces` false) may not select namespaces.
pub fn parse(at: &str, v: Value, needs_namespaces: bool) -> Result<Tenant, ConfigError> {
    let map = match v {
        Value::Object(m) => m,
        other => return Err(type_err(at, &other, EXPECT_TENANT)),
    };
    let mut t = Tenant {
        name: at.to_string(),
        ..Tenant::default()
    };
    for (key, value) in map {
        let field = format!("{at}.{key}");
        match key.to_ascii_lowercase().as_str() {
            "name" => t.name = slurm_name(&field, value)?,
            "namespaces" => {
                for (i, item) in list(&field, value, EXPECT_NAMESPACES)?
                    .into_iter()
                    .enumerate()
                {
                    match item {
                        Value::String(s) if is_dns_label(&s) => t.namespaces.push(s),
                        other => {
                            return Err(err(
                                &format!("{field}[{i}]"),
                                format!("{other} is not a namespace name"),
                                EXPECT_NAMESPACES,
                            ));
                        }
                    }
                }
            }
            "namespaceselector" => {
                let sel = selector(&field, value)?;
                if kube::core::Selector::try_from(sel.clone()).is_err() {
                    return Err(err(
                        &field,
                        "a match expression has an unknown operator or wrong values".into(),
                        "operator In or NotIn with values, or Exists or DoesNotExist without values",
                    ));
                }
                t.namespace_selector = Some(sel);
            }
            "account" => t.account = Some(slurm_name(&field, value)?),
            "user" => t.user = Some(slurm_name(&field, value)?),
            "group" => t.group = Some(slurm_name(&field, value)?),
            "qos" => t.qos = names(&field, value)?,
            "partitions" | "partition" => t.partitions = names(&field, value)?,
            "allowannotations" => {
                for (i, item) in list(&field, value, EXPECT_ALLOW)?.into_iter().enumerate() {
                    let Value::String(s) = item else {
                        return Err(type_err(&format!("{field}[{i}]"), &item, EXPECT_ALLOW));
                    };
                    if s == "*" {
                        t.allow_annotations.extend(PolicyKey::ALL);
                        continue;
                    }
                    let key = PolicyKey::parse(&s).ok_or_else(|| {
                        err(
                            &format!("{field}[{i}]"),
                            format!("{s:?} is not a policy annotation"),
                            EXPECT_ALLOW,
                        )
                    })?;
                    t.allow_annotations.insert(key);
                }
            }
            _ => {
                return Err(err(&field, "unknown field".into(), EXPECT_TENANT));
            }
        }
    }
    let selects = !t.namespaces.is_empty() || t.namespace_selector.is_some();
    if needs_namespaces && !selects {
        return Err(err(
            at,
            "selects no namespace".into(),
            "namespaces (a list of names) or namespaceSelector (a label selector)",
        ));
    }
    if !needs_namespaces && selects {
        return Err(err(
            at,
            "the default tenant covers every namespace no tenant covers and selects none itself"
                .into(),
            "no namespaces and no namespaceSelector",
        ));
    }
    Ok(t)
}

/// Parses `tenants`: an ordered list (the first tenant covering a namespace is its tenant).
pub fn parse_list(key: &str, v: Value) -> Result<Vec<Tenant>, ConfigError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(type_err(key, &other, "a list of tenants"));
        }
    };
    let mut out: Vec<Tenant> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        let t = parse(&at, item, true)?;
        if out.iter().any(|o| o.name == t.name) {
            return Err(err(
                &at,
                format!("the name {:?} is used twice", t.name),
                "a name of its own for each tenant",
            ));
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_tenant() {
        let t = parse(
            "tenants[0]",
            json!({
                "name": "team-a", "namespaces": ["a", "a-dev"],
                "namespaceSelector": {"matchLabels": {"team": "a"}},
                "account": "team-a", "user": "alice", "group": 3000,
                "qos": ["normal", "high"], "partitions": "slurm-bridge",
                "allowAnnotations": ["reservation", "slurmjob.slinky.slurm.net/wckey"]
            }),
            true,
        )
        .unwrap();
        assert_eq!(t.name, "team-a");
        assert_eq!(t.namespaces, ["a", "a-dev"]);
        assert_eq!(t.group.as_deref(), Some("3000"));
        assert_eq!(t.qos, ["normal", "high"]);
        assert_eq!(t.partitions, ["slurm-bridge"]);
        assert_eq!(
            t.allow_annotations,
            [PolicyKey::Reservation, PolicyKey::Wckey].into()
        );
        let labels = [("team".to_string(), "a".to_string())].into();
        assert!(t.covers("other", &labels));
        assert!(t.covers("a-dev", &Default::default()));
        assert!(!t.covers("b", &Default::default()));
    }

    #[test]
    fn star_allows_every_key() {
        let t = parse("defaultTenant", json!({"allowAnnotations": ["*"]}), false).unwrap();
        assert_eq!(t.allow_annotations.len(), PolicyKey::ALL.len());
    }

    #[test]
    fn errors_name_the_field_and_what_is_accepted() {
        for (v, needs, want) in [
            (
                json!({"account": "a"}),
                true,
                "tenants[0]: selects no namespace",
            ),
            (
                json!({"namespaces": ["a"]}),
                false,
                "tenants[0]: the default tenant covers every namespace",
            ),
            (
                json!({"namespaces": ["A_b"]}),
                true,
                "tenants[0].namespaces[0]: \"A_b\" is not a namespace name",
            ),
            (
                json!({"namespaces": ["a"], "qos": ["a b"]}),
                true,
                "tenants[0].qos[0]: \"a b\" is not a Slurm name",
            ),
            (
                json!({"namespaces": ["a"], "allowAnnotations": ["cpu-per-task"]}),
                true,
                "tenants[0].allowAnnotations[0]: \"cpu-per-task\" is not a policy annotation; expected a list of: account, user-id",
            ),
            (
                json!({"namespaces": ["a"], "users": "x"}),
                true,
                "tenants[0].users: unknown field",
            ),
            (
                json!({"namespaces": ["a"], "namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "Is"}]}}),
                true,
                "tenants[0].namespaceSelector: a match expression",
            ),
            (json!(["a"]), true, "tenants[0]: got a list"),
        ] {
            let e = parse("tenants[0]", v.clone(), needs)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
        let e = parse_list(
            "tenants",
            json!([{"name": "x", "namespaces": ["a"]}, {"name": "x", "namespaces": ["b"]}]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tenants[1]: the name \"x\" is used twice"),
            "{e}"
        );
    }
}
