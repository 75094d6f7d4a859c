//! In-memory [`WorkloadReader`] over manifests, used by `slurm-bridge translate`.
//!
//! Objects come from multi-document YAML. Jobs, JobSets and LeaderWorkerSets given without
//! their pods get the pods (and Jobs, StatefulSets) their controllers would create, named
//! and labelled as those controllers do, so owner walks and pod listings work as in a cluster.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DynamicObject;
use serde::Serialize;
use serde_json::Value;

use super::crd::{JobSet, LeaderWorkerSet};
use super::kind;
use super::reader::{ObjectRef, ReadError, WorkloadReader, decode, labels_match};
use crate::wellknown as wk;

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
}

/// A stable FNV-1a hash (generated names and uids must not change between runs).
fn fnv(text: &str, seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
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

/// The 5-character random-looking suffix Kubernetes appends to generated names.
fn name_suffix(seed: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = fnv(seed, 3);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(h % ALPHABET.len() as u64) as usize] as char;
            h /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn owner_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

impl ManifestReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
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

    /// Create the Jobs of JobSets and the pods of Jobs and LeaderWorkerSets that came
    /// without them. Returns one note per generated set, and any problem.
    pub fn generate_controller_pods(&mut self) -> (Vec<String>, Vec<ManifestError>) {
        let mut notes = Vec::new();
        let mut errors = Vec::new();
        let invalid = |r: &ObjectRef, e: ReadError| ManifestError::Invalid {
            source_name: "manifests".into(),
            index: 0,
            message: format!("{r}: {e}"),
        };

        let jobsets: Vec<(ObjectRef, DynamicObject)> = self
            .of_kind(kind::JOBSET)
            .map(|(r, d)| (r.clone(), d.clone()))
            .collect();
        for (r, d) in jobsets {
            if self.has_controlled(kind::JOB, &r) {
                continue;
            }
            match decode::<JobSet>(&d, &r) {
                Ok(js) => match self.generate_jobset_jobs(&js) {
                    Ok(n) => notes.push(format!("generated {n} Job(s) for {r}")),
                    Err(e) => errors.extend(e),
                },
                Err(e) => errors.push(invalid(&r, e)),
            }
        }
        let jobs: Vec<(ObjectRef, DynamicObject)> = self
            .of_kind(kind::JOB)
            .map(|(r, d)| (r.clone(), d.clone()))
            .collect();
        for (r, d) in jobs {
            if self.has_controlled(kind::POD, &r) {
                continue;
            }
            match decode::<Job>(&d, &r) {
                Ok(job) => match self.generate_job_pods(&job) {
                    Ok(0) => notes.push(format!(
                        "{r} is suspended or has no parallelism: no pods generated"
                    )),
                    Ok(n) => notes.push(format!("generated {n} pod(s) for {r}")),
                    Err(e) => errors.extend(e),
                },
                Err(e) => errors.push(invalid(&r, e)),
            }
        }
        let sets: Vec<(ObjectRef, DynamicObject)> = self
            .of_kind(kind::LWS)
            .map(|(r, d)| (r.clone(), d.clone()))
            .collect();
        for (r, d) in sets {
            let want = BTreeMap::from([(wk::LABEL_LWS_NAME.to_string(), r.name.clone())]);
            let has_pods = self.of_kind(kind::POD).any(|(pr, pd)| {
                pr.namespace == r.namespace && labels_match(pd.metadata.labels.as_ref(), &want)
            });
            if has_pods {
                continue;
            }
            match decode::<LeaderWorkerSet>(&d, &r) {
                Ok(lws) => match self.generate_lws_pods(&lws) {
                    Ok(n) => notes.push(format!("generated {n} pod(s) for {r}")),
                    Err(e) => errors.extend(e),
                },
                Err(e) => errors.push(invalid(&r, e)),
            }
        }
        (notes, errors)
    }

    fn generate_jobset_jobs(&mut self, js: &JobSet) -> Result<usize, Vec<ManifestError>> {
        let js_name = js.metadata.name.clone().unwrap_or_default();
        let mut count = 0;
        for rj in &js.spec.replicated_jobs {
            for idx in 0..rj.replicas.unwrap_or(1).max(0) {
                let labels = BTreeMap::from([
                    (wk::LABEL_JOBSET_NAME.to_string(), js_name.clone()),
                    (wk::LABEL_JOBSET_REPLICATED_JOB.to_string(), rj.name.clone()),
                    (wk::LABEL_JOBSET_JOB_INDEX.to_string(), idx.to_string()),
                ]);
                let mut spec = rj.template.spec.clone().unwrap_or_default();
                let tmeta = spec.template.metadata.get_or_insert_with(Default::default);
                tmeta
                    .labels
                    .get_or_insert_with(Default::default)
                    .extend(labels.clone());
                let mut meta = rj.template.metadata.clone().unwrap_or_default();
                meta.name = Some(format!("{js_name}-{}-{idx}", rj.name));
                meta.namespace = js.metadata.namespace.clone();
                meta.labels
                    .get_or_insert_with(Default::default)
                    .extend(labels);
                meta.owner_references = Some(vec![owner_ref(
                    kind::JOBSET.0,
                    kind::JOBSET.1,
                    &js.metadata,
                )]);
                let job = Job {
                    metadata: meta,
                    spec: Some(spec),
                    status: None,
                };
                self.insert_typed(kind::JOB.0, kind::JOB.1, &job)?;
                count += 1;
            }
        }
        Ok(count)
    }

    fn generate_job_pods(&mut self, job: &Job) -> Result<usize, Vec<ManifestError>> {
        let Some(spec) = &job.spec else { return Ok(0) };
        if spec.suspend == Some(true) {
            return Ok(0);
        }
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let parallelism = spec.parallelism.unwrap_or(1).max(0);
        let count = spec
            .completions
            .map_or(parallelism, |c| c.clamp(0, parallelism));
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        for i in 0..count {
            let suffix = name_suffix(&format!("{ns}/{job_name}/{i}"));
            let name = if indexed {
                format!("{job_name}-{i}-{suffix}")
            } else {
                format!("{job_name}-{suffix}")
            };
            let mut labels = BTreeMap::from([
                (wk::LABEL_CONTROLLER_UID.to_string(), uid.clone()),
                (wk::LABEL_BATCH_CONTROLLER_UID.to_string(), uid.clone()),
                (wk::LABEL_JOB_NAME.to_string(), job_name.clone()),
                (wk::LABEL_BATCH_JOB_NAME.to_string(), job_name.clone()),
            ]);
            let mut annotations = BTreeMap::new();
            if indexed {
                labels.insert(wk::LABEL_JOB_COMPLETION_INDEX.to_string(), i.to_string());
                annotations.insert(wk::LABEL_JOB_COMPLETION_INDEX.to_string(), i.to_string());
            }
            let pod = pod_from_template(
                &spec.template,
                &name,
                &ns,
                labels,
                annotations,
                owner_ref(kind::JOB.0, kind::JOB.1, &job.metadata),
            );
            self.insert_typed(kind::POD.0, kind::POD.1, &pod)?;
        }
        Ok(count as usize)
    }

    fn generate_lws_pods(&mut self, lws: &LeaderWorkerSet) -> Result<usize, Vec<ManifestError>> {
        let name = lws.metadata.name.clone().unwrap_or_default();
        let ns = lws.metadata.namespace.clone().unwrap_or_default();
        let size = lws.group_size().max(1);
        let tpl = &lws.spec.leader_worker_template;
        let leader_tpl = tpl
            .leader_template
            .clone()
            .unwrap_or_else(|| tpl.worker_template.clone());
        let mut count = 0;
        let sts_meta = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            owner_references: Some(vec![owner_ref(kind::LWS.0, kind::LWS.1, &lws.metadata)]),
            ..Default::default()
        };
        let leader_sts = self.insert_meta_only("apps/v1", "StatefulSet", sts_meta)?;
        for g in 0..lws.spec.replicas.unwrap_or(1).max(0) {
            let group_key = format!("{:016x}", fnv(&format!("{ns}/{name}-{g}"), 4));
            let labels = |worker: u32| {
                BTreeMap::from([
                    (wk::LABEL_LWS_NAME.to_string(), name.clone()),
                    (wk::LABEL_LWS_GROUP_INDEX.to_string(), g.to_string()),
                    (wk::LABEL_LWS_WORKER_INDEX.to_string(), worker.to_string()),
                    (wk::LABEL_LWS_GROUP_KEY.to_string(), group_key.clone()),
                ])
            };
            let size_ann = BTreeMap::from([(
                "leaderworkerset.sigs.k8s.io/size".to_string(),
                size.to_string(),
            )]);
            let leader_name = format!("{name}-{g}");
            let mut leader = pod_from_template(
                &leader_tpl,
                &leader_name,
                &ns,
                labels(0),
                size_ann.clone(),
                owner_ref("apps/v1", "StatefulSet", &leader_sts),
            );
            leader.metadata.uid = Some(fake_uid(&ObjectRef::new("v1", "Pod", &ns, &leader_name)));
            self.insert_typed(kind::POD.0, kind::POD.1, &leader)?;
            count += 1;
            if size > 1 {
                let worker_sts = self.insert_meta_only(
                    "apps/v1",
                    "StatefulSet",
                    ObjectMeta {
                        name: Some(leader_name.clone()),
                        namespace: Some(ns.clone()),
                        owner_references: Some(vec![owner_ref(
                            kind::POD.0,
                            kind::POD.1,
                            &leader.metadata,
                        )]),
                        ..Default::default()
                    },
                )?;
                for w in 1..size {
                    let worker = pod_from_template(
                        &tpl.worker_template,
                        &format!("{leader_name}-{w}"),
                        &ns,
                        labels(w),
                        size_ann.clone(),
                        owner_ref("apps/v1", "StatefulSet", &worker_sts),
                    );
                    self.insert_typed(kind::POD.0, kind::POD.1, &worker)?;
                    count += 1;
                }
            }
        }
        Ok(count)
    }

    /// Insert an object that only has metadata (a generated StatefulSet); returns its metadata with uid.
    fn insert_meta_only(
        &mut self,
        api_version: &str,
        kind: &str,
        mut meta: ObjectMeta,
    ) -> Result<ObjectMeta, Vec<ManifestError>> {
        let r = ObjectRef::new(
            api_version,
            kind,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        );
        meta.uid = Some(fake_uid(&r));
        self.insert_typed(api_version, kind, &serde_json::json!({ "metadata": meta }))?;
        Ok(meta)
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

fn pod_from_template(
    template: &PodTemplateSpec,
    name: &str,
    namespace: &str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    owner: OwnerReference,
) -> Pod {
    let mut meta = template.metadata.clone().unwrap_or_default();
    meta.name = Some(name.to_string());
    meta.namespace = Some(namespace.to_string());
    meta.labels
        .get_or_insert_with(Default::default)
        .extend(labels);
    if !annotations.is_empty() {
        meta.annotations
            .get_or_insert_with(Default::default)
            .extend(annotations);
    }
    meta.owner_references = Some(vec![owner]);
    meta.uid = Some(fake_uid(&ObjectRef::new("v1", "Pod", namespace, name)));
    Pod {
        metadata: meta,
        spec: template.spec.clone(),
        status: Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    }
}

impl WorkloadReader for ManifestReader {
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
