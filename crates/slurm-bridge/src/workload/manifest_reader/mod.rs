//! In-memory [`WorkloadReader`] over manifests, used by `slurm-bridge translate`.
//!
//! Objects come from multi-document YAML. Jobs, JobSets and LeaderWorkerSets given without
//! their pods get the pods (and Jobs, StatefulSets) their controllers would create, named
//! and labelled as those controllers do, so owner walks and pod listings work as in a cluster.

use std::collections::{BTreeMap, BTreeSet};

use crate::k8s::slim_pod::Pod;
use kube::core::DynamicObject;
use serde::Serialize;
use serde_json::Value;

use super::kind;
use super::reader::{ObjectRef, ReadError, WorkloadReader, decode, labels_match};

mod generate;

/// Kinds that are not namespaced (no default namespace is given to them).
const CLUSTER_SCOPED: [&str; 10] = [
    "Namespace",
    "Node",
    "DeviceClass",
    "PriorityClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PersistentVolume",
    "ResourceSlice",
];

/// A manifest problem, naming the source and the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The text is not YAML.
    #[error("{source_name}: not valid YAML: {message}")]
    Yaml {
        /// File name (or `-`).
        source_name: String,
        /// Parser message.
        message: String,
    },
    /// A document is not a usable Kubernetes object.
    #[error("{source_name}: document {index}: {message}")]
    Invalid {
        /// File name.
        source_name: String,
        /// 1-based document number.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// Two documents define the same object.
    #[error("{0} is defined more than once")]
    Duplicate(ObjectRef),
}

/// Objects read from manifests, answering owner lookups and pod listings.
#[derive(Debug, Clone, Default)]
pub struct ManifestReader {
    objects: BTreeMap<ObjectRef, DynamicObject>,
    drivers: crate::resources::gres_drivers::GresDrivers,
}

/// A stable FNV-1a hash (generated names and uids must not change between runs).
fn fnv(text: &str, seed: u64) -> u64 {
    let mut h = fnv::FnvHasher::with_key(0xcbf2_9ce4_8422_2325 ^ seed);
    std::hash::Hasher::write(&mut h, text.as_bytes());
    std::hash::Hasher::finish(&h)
}

/// A deterministic uid for an object that has none.
pub fn fake_uid(r: &ObjectRef) -> String {
    let key = format!("{}/{}/{}/{}", r.api_version, r.kind, r.namespace, r.name);
    let (a, b) = (fnv(&key, 1), fnv(&key, 2));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

impl ManifestReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, its pods' DRA classes of `drivers` GRES (the config's `draDeviceDrivers`).
    pub fn with_gres_drivers(
        mut self,
        drivers: crate::resources::gres_drivers::GresDrivers,
    ) -> Self {
        self.drivers = drivers;
        self
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when no object is held.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Add every document of a multi-document YAML text. All problems are returned.
    pub fn load_yaml(&mut self, source_name: &str, text: &str) -> Result<(), Vec<ManifestError>> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
            vec![ManifestError::Yaml {
                source_name: source_name.to_string(),
                message: e.to_string(),
            }]
        })?;
        let errors: Vec<ManifestError> = docs
            .into_iter()
            .enumerate()
            .filter_map(|(i, doc)| self.insert_value(source_name, i + 1, doc).err())
            .flatten()
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Add one object (or the items of a `List`).
    pub fn insert_value(
        &mut self,
        source_name: &str,
        index: usize,
        mut doc: Value,
    ) -> Result<(), Vec<ManifestError>> {
        let invalid = |message: String| {
            vec![ManifestError::Invalid {
                source_name: source_name.to_string(),
                index,
                message,
            }]
        };
        if doc.is_null() {
            return Ok(());
        }
        let Some(obj) = doc.as_object_mut() else {
            return Err(invalid(
                "expected a Kubernetes object (a mapping with apiVersion, kind and metadata)"
                    .into(),
            ));
        };
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if api_version.is_empty() || kind.is_empty() {
            return Err(invalid("missing apiVersion or kind".into()));
        }
        if kind.ends_with("List")
            && let Some(Value::Array(items)) = obj.remove("items")
        {
            let errors: Vec<ManifestError> = items
                .into_iter()
                .filter_map(|item| self.insert_value(source_name, index, item).err())
                .flatten()
                .collect();
            return if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            };
        }
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(meta) = meta.as_object_mut() else {
            return Err(invalid(format!("{kind}: metadata must be a mapping")));
        };
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(invalid(format!(
                "{kind} has no metadata.name (generateName is not supported by translate; give a name)"
            )));
        }
        let namespace = if CLUSTER_SCOPED.contains(&kind.as_str()) {
            String::new()
        } else {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string();
            meta.insert("namespace".into(), Value::String(ns.clone()));
            ns
        };
        let r = ObjectRef {
            api_version,
            kind,
            namespace,
            name,
        };
        if meta
            .get("uid")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            meta.insert("uid".into(), Value::String(fake_uid(&r)));
        }
        // Hand-written ownerReferences often lack a uid; the typed decoders require one.
        if let Some(Value::Array(owners)) = meta.get_mut("ownerReferences") {
            for o in owners.iter_mut().filter_map(Value::as_object_mut) {
                o.entry("uid")
                    .or_insert_with(|| Value::String(String::new()));
            }
        }
        let dynamic: DynamicObject =
            serde_json::from_value(doc).map_err(|e| invalid(format!("{r}: {e}")))?;
        if r.is(kind::POD.0, kind::POD.1) {
            decode::<Pod>(&dynamic, &r).map_err(|e| invalid(e.to_string()))?;
        }
        if self.objects.contains_key(&r) {
            return Err(vec![ManifestError::Duplicate(r)]);
        }
        self.objects.insert(r, dynamic);
        Ok(())
    }

    fn insert_typed<T: Serialize>(
        &mut self,
        api_version: &str,
        kind: &str,
        object: &T,
    ) -> Result<(), Vec<ManifestError>> {
        let mut v = serde_json::to_value(object).map_err(|e| {
            vec![ManifestError::Invalid {
                source_name: "generated".into(),
                index: 0,
                message: e.to_string(),
            }]
        })?;
        if let Some(o) = v.as_object_mut() {
            o.insert("apiVersion".into(), Value::String(api_version.into()));
            o.insert("kind".into(), Value::String(kind.into()));
        }
        self.insert_value("generated", 0, v)
    }

    fn of_kind(
        &self,
        (api_version, kind): (&str, &str),
    ) -> impl Iterator<Item = (&ObjectRef, &DynamicObject)> {
        self.objects
            .iter()
            .filter(move |(r, _)| r.is(api_version, kind))
    }

    fn has_controlled(&self, child: (&str, &str), owner: &ObjectRef) -> bool {
        self.of_kind(child).any(|(r, d)| {
            r.namespace == owner.namespace
                && super::owner::controller_of(&d.metadata).is_some_and(|o| {
                    o.kind == owner.kind
                        && o.name == owner.name
                        && o.api_version == owner.api_version
                })
        })
    }

    /// Every pod held (given or generated), sorted by namespace and name.
    pub fn pods(&self) -> Vec<Pod> {
        self.of_kind(kind::POD)
            .filter_map(|(r, d)| decode::<Pod>(d, r).ok())
            .collect()
    }

    /// References of every object held.
    pub fn objects(&self) -> BTreeSet<ObjectRef> {
        self.objects.keys().cloned().collect()
    }
}

impl WorkloadReader for ManifestReader {
    fn gres_drivers(&self) -> crate::resources::gres_drivers::GresDrivers {
        self.drivers.clone()
    }

    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        self.objects
            .get(object)
            .cloned()
            .ok_or_else(|| ReadError::NotFound(object.clone()))
    }

    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        Ok(self
            .of_kind(kind::POD)
            .filter(|(r, d)| {
                r.namespace == namespace && labels_match(d.metadata.labels.as_ref(), labels)
            })
            .filter_map(|(r, d)| decode::<Pod>(d, r).ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wellknown as wk;
    use proptest::prelude::*;

    #[test]
    fn job_pods_are_named_and_labelled_like_the_job_controller() {
        let mut r = ManifestReader::new();
        r.load_yaml(
            "t",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  completionMode: Indexed\n  completions: 3\n  parallelism: 2\n  template: {spec: {containers: [{name: c}]}}\n",
        )
        .unwrap();
        let (notes, errors) = r.generate_controller_pods();
        assert!(
            errors.is_empty() && notes.len() == 1,
            "{notes:?} {errors:?}"
        );
        let pods = r.pods();
        assert_eq!(pods.len(), 2, "parallelism bounds the pods running at once");
        for (i, p) in pods.iter().enumerate() {
            let name = p.metadata.name.as_deref().unwrap();
            assert!(
                name.starts_with(&format!("j-{i}-")) && name.len() == "j-0-".len() + 5,
                "{name}"
            );
            let labels = p.metadata.labels.as_ref().unwrap();
            assert_eq!(labels[wk::LABEL_JOB_NAME], "j");
            assert_eq!(labels[wk::LABEL_BATCH_JOB_NAME], "j");
            assert_eq!(labels[wk::LABEL_JOB_COMPLETION_INDEX], i.to_string());
            assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
            let owner = super::super::owner::controller_of(&p.metadata).unwrap();
            assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Job", "j"));
            assert!(!owner.uid.is_empty());
        }
        // A second call generates nothing more.
        let (notes, _) = r.generate_controller_pods();
        assert!(notes.is_empty());
    }

    #[test]
    fn duplicates_and_nameless_objects_are_errors() {
        let mut r = ManifestReader::new();
        let pod =
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n";
        let errs = r.load_yaml("t", &format!("{pod}---\n{pod}")).unwrap_err();
        assert!(matches!(errs[0], ManifestError::Duplicate(_)));
        let errs = r
            .load_yaml("t", "apiVersion: v1\nkind: Pod\nmetadata: {}\n")
            .unwrap_err();
        assert!(errs[0].to_string().contains("metadata.name"));
        let errs = r
            .load_yaml(
                "t",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec: {containers: 3}\n",
            )
            .unwrap_err();
        assert!(errs[0].to_string().contains("Pod default/q"), "{}", errs[0]);
        let errs = r.load_yaml("t", "just text").unwrap_err();
        assert!(errs[0].to_string().contains("document 1"), "{}", errs[0]);
    }

    proptest! {
        #[test]
        fn load_never_panics(text in "\\PC*") {
            let mut r = ManifestReader::new();
            let _ = r.load_yaml("t", &text);
            let _ = r.generate_controller_pods();
        }
    }
}
