//! The registry of resource types the server serves.
//!
//! The server is generic: every verb works on any registered type. Built-in types are listed in
//! [`Registry::builtin`]; more are read at start from a types file (a list of simple entries or
//! CustomResourceDefinition documents, JSON or YAML), so a new kind needs no code.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

/// One resource type: where it lives in the API and how it behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version inside the group.
    pub version: String,
    /// Plural resource name used in URLs.
    pub plural: String,
    /// Singular resource name (lower-case kind).
    pub singular: String,
    /// Object kind.
    pub kind: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Subresources served (`status`, `binding`, `eviction`, ...).
    pub subresources: Vec<String>,
    /// Short names kubectl may use.
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// The `apiVersion` of objects of this type (`v1` or `group/version`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the type has a `status` subresource.
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// Whether the type is `group`/`kind` (a shortcut for type-specific behaviour).
    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}

/// Error reading a types file.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file could not be read.
    #[error("reading types file {path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not valid JSON or YAML of the expected shape.
    #[error("parsing types file {path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// What was wrong.
        message: String,
    },
}

/// All registered types, looked up by (group, version, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
    index: HashMap<(String, String, String), usize>,
}

fn rt(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    subresources: &[&str],
    short: &[&str],
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        subresources: subresources.iter().map(|s| s.to_string()).collect(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
    }
}

impl Registry {
    /// The types registered at start.
    pub fn builtin() -> Self {
        let mut r = Registry::default();
        let list = [
            rt(
                "",
                "v1",
                "pods",
                "Pod",
                true,
                &["status", "binding", "eviction"],
                &["po"],
            ),
            rt("", "v1", "nodes", "Node", false, &["status"], &["no"]),
            rt(
                "",
                "v1",
                "namespaces",
                "Namespace",
                false,
                &["status"],
                &["ns"],
            ),
            rt("", "v1", "events", "Event", true, &[], &["ev"]),
            rt("", "v1", "configmaps", "ConfigMap", true, &[], &["cm"]),
            rt("", "v1", "secrets", "Secret", true, &[], &[]),
            rt("", "v1", "services", "Service", true, &["status"], &["svc"]),
            rt(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                &[],
                &["sa"],
            ),
            rt("events.k8s.io", "v1", "events", "Event", true, &[], &["ev"]),
            rt("batch", "v1", "jobs", "Job", true, &["status"], &[]),
            rt(
                "apps",
                "v1",
                "deployments",
                "Deployment",
                true,
                &["status"],
                &["deploy"],
            ),
            rt(
                "apps",
                "v1",
                "replicasets",
                "ReplicaSet",
                true,
                &["status"],
                &["rs"],
            ),
            rt(
                "apps",
                "v1",
                "statefulsets",
                "StatefulSet",
                true,
                &["status"],
                &["sts"],
            ),
            rt(
                "apps",
                "v1",
                "daemonsets",
                "DaemonSet",
                true,
                &["status"],
                &["ds"],
            ),
            rt(
                "coordination.k8s.io",
                "v1",
                "leases",
                "Lease",
                true,
                &[],
                &[],
            ),
            rt(
                "scheduling.k8s.io",
                "v1alpha2",
                "workloads",
                "Workload",
                true,
                &[],
                &[],
            ),
            rt(
                "scheduling.k8s.io",
                "v1alpha2",
                "podgroups",
                "PodGroup",
                true,
                &["status"],
                &[],
            ),
            rt(
                "scheduling.x-k8s.io",
                "v1alpha1",
                "podgroups",
                "PodGroup",
                true,
                &["status"],
                &["pg"],
            ),
            rt(
                "jobset.x-k8s.io",
                "v1alpha2",
                "jobsets",
                "JobSet",
                true,
                &["status"],
                &[],
            ),
            rt(
                "leaderworkerset.x-k8s.io",
                "v1",
                "leaderworkersets",
                "LeaderWorkerSet",
                true,
                &["status"],
                &["lws"],
            ),
            rt(
                "resource.k8s.io",
                "v1",
                "deviceclasses",
                "DeviceClass",
                false,
                &[],
                &[],
            ),
            rt(
                "resource.k8s.io",
                "v1",
                "resourceclaims",
                "ResourceClaim",
                true,
                &["status"],
                &[],
            ),
            rt(
                "resource.k8s.io",
                "v1",
                "resourceslices",
                "ResourceSlice",
                false,
                &[],
                &[],
            ),
            rt(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                &["status"],
                &["crd", "crds"],
            ),
            rt(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                false,
                &[],
                &[],
            ),
            rt(
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                false,
                &[],
                &[],
            ),
        ];
        for t in list {
            r.add(t);
        }
        r
    }

    /// Register a type; a type already registered under the same path is replaced.
    pub fn add(&mut self, t: ResourceType) {
        let key = (t.group.clone(), t.version.clone(), t.plural.clone());
        if let Some(&i) = self.index.get(&key) {
            self.types[i] = Arc::new(t);
        } else {
            self.index.insert(key, self.types.len());
            self.types.push(Arc::new(t));
        }
    }

    /// Look up a type by its URL coordinates.
    pub fn lookup(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<(usize, Arc<ResourceType>)> {
        self.index
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .map(|&i| (i, self.types[i].clone()))
    }

    /// Look up a type by apiVersion and kind.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<(usize, Arc<ResourceType>)> {
        self.types
            .iter()
            .enumerate()
            .find(|(_, t)| t.kind == kind && t.api_version() == api_version)
            .map(|(i, t)| (i, t.clone()))
    }

    /// All types, in registration order; the index is the type id used by the store.
    pub fn types(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// Read extra types from a file and register them.
    pub fn load_file(&mut self, path: &Path) -> Result<(), RegistryError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Io {
            path: p.clone(),
            source,
        })?;
        for t in parse_types(&text).map_err(|message| RegistryError::Parse { path: p, message })? {
            self.add(t);
        }
        Ok(())
    }
}

/// A simple entry of a types file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SimpleType {
    #[serde(default)]
    group: String,
    version: String,
    plural: String,
    kind: String,
    #[serde(default)]
    singular: Option<String>,
    #[serde(default = "yes")]
    namespaced: bool,
    #[serde(default)]
    subresources: Vec<String>,
    #[serde(default)]
    short_names: Vec<String>,
}

fn yes() -> bool {
    true
}

/// Parse a types file: a JSON/YAML list (or `{types: [...]}`) of simple entries, or one or more
/// CustomResourceDefinition documents (YAML documents separated by `---`, or a JSON list).
pub fn parse_types(text: &str) -> Result<Vec<ResourceType>, String> {
    let docs: Vec<serde_json::Value> = if text.trim_start().starts_with(['[', '{']) {
        match serde_json::from_str::<serde_json::Value>(text).map_err(|e| e.to_string())? {
            serde_json::Value::Array(a) => a,
            v => vec![v],
        }
    } else {
        let mut out = Vec::new();
        for doc in
            serde_saphyr::from_multiple::<serde_json::Value>(text).map_err(|e| e.to_string())?
        {
            match doc {
                serde_json::Value::Array(a) => out.extend(a),
                serde_json::Value::Null => {}
                v => out.push(v),
            }
        }
        out
    };
    let mut out = Vec::new();
    for doc in docs {
        if let Some(list) = doc.get("types").and_then(|t| t.as_array()) {
            for d in list {
                out.extend(parse_one(d)?);
            }
        } else {
            out.extend(parse_one(&doc)?);
        }
    }
    Ok(out)
}

fn parse_one(doc: &serde_json::Value) -> Result<Vec<ResourceType>, String> {
    if doc.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
        let spec = doc.get("spec").ok_or("CRD without spec")?;
        let s =
            |v: Option<&serde_json::Value>| v.and_then(|x| x.as_str()).unwrap_or("").to_string();
        let group = s(spec.get("group"));
        let names = spec.get("names").ok_or("CRD without spec.names")?;
        let kind = s(names.get("kind"));
        let plural = s(names.get("plural"));
        if kind.is_empty() || plural.is_empty() {
            return Err("CRD without names.kind or names.plural".into());
        }
        let singular = match s(names.get("singular")) {
            x if x.is_empty() => kind.to_lowercase(),
            x => x,
        };
        let short_names: Vec<String> = names
            .get("shortNames")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let namespaced = s(spec.get("scope")) != "Cluster";
        let versions = spec
            .get("versions")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for v in versions {
            let mut subresources = Vec::new();
            if let Some(sub) = v.get("subresources") {
                if sub.get("status").is_some() {
                    subresources.push("status".to_string());
                }
                if sub.get("scale").is_some() {
                    subresources.push("scale".to_string());
                }
            }
            out.push(ResourceType {
                group: group.clone(),
                version: s(v.get("name")),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                subresources,
                short_names: short_names.clone(),
            });
        }
        return Ok(out);
    }
    let t: SimpleType = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    Ok(vec![ResourceType {
        singular: t.singular.unwrap_or_else(|| t.kind.to_lowercase()),
        group: t.group,
        version: t.version,
        plural: t.plural,
        kind: t.kind,
        namespaced: t.namespaced,
        subresources: t.subresources,
        short_names: t.short_names,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_simple_and_crd() {
        let yaml = "- group: example.com\n  version: v1\n  plural: widgets\n  kind: Widget\n  subresources: [status]\n";
        let t = parse_types(yaml).unwrap();
        assert_eq!(t[0].plural, "widgets");
        assert!(t[0].namespaced && t[0].has_status());
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: a.io\n  scope: Cluster\n  names: {kind: Gadget, plural: gadgets}\n  versions:\n  - name: v2\n    subresources: {status: {}}\n";
        let t = parse_types(crd).unwrap();
        assert_eq!(t[0].api_version(), "a.io/v2");
        assert!(!t[0].namespaced && t[0].has_status());
    }
}
