//! The objects controllers would create for manifests given without them: a JobSet's Jobs,
//! a Job's pods, a LeaderWorkerSet's StatefulSets and pods, named and labelled as those
//! controllers do.

use super::super::crd::{JobSet, LeaderWorkerSet};
use super::super::kind;
use super::super::reader::{ObjectRef, decode, labels_match};
use super::{ManifestError, ManifestReader, fake_uid, fnv};
use crate::wellknown as wk;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

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
    /// Create the Jobs of JobSets and the pods of Jobs and LeaderWorkerSets that came
    /// without them. Returns one note per generated set, and any problem.
    pub fn generate_controller_pods(&mut self) -> (Vec<String>, Vec<ManifestError>) {
        let mut out = (Vec::new(), Vec::new());
        self.generate_for(
            kind::JOBSET,
            |m, r| m.has_controlled(kind::JOB, r),
            Self::generate_jobset_jobs,
            |r, n| format!("generated {n} Job(s) for {r}"),
            &mut out,
        );
        self.generate_for(
            kind::JOB,
            |m, r| m.has_controlled(kind::POD, r),
            Self::generate_job_pods,
            |r, n| match n {
                0 => format!("{r} is suspended or has no parallelism: no pods generated"),
                n => format!("generated {n} pod(s) for {r}"),
            },
            &mut out,
        );
        self.generate_for(
            kind::LWS,
            |m, r| {
                let want = BTreeMap::from([(wk::LABEL_LWS_NAME.to_string(), r.name.clone())]);
                m.of_kind(kind::POD).any(|(pr, pd)| {
                    pr.namespace == r.namespace && labels_match(pd.metadata.labels.as_ref(), &want)
                })
            },
            Self::generate_lws_pods,
            |r, n| format!("generated {n} pod(s) for {r}"),
            &mut out,
        );
        out
    }

    /// For every object of kind `owner` held now that has no children yet (`has_children`):
    /// decodes it as `T` and makes its children with `generate`, adding `note` of the count to
    /// the notes in `out`, or the problems to its errors.
    fn generate_for<T: DeserializeOwned>(
        &mut self,
        owner: (&str, &str),
        has_children: impl Fn(&Self, &ObjectRef) -> bool,
        generate: impl Fn(&mut Self, &T) -> Result<usize, Vec<ManifestError>>,
        note: impl Fn(&ObjectRef, usize) -> String,
        (notes, errors): &mut (Vec<String>, Vec<ManifestError>),
    ) {
        let owners: Vec<(ObjectRef, DynamicObject)> = self
            .of_kind(owner)
            .map(|(r, d)| (r.clone(), d.clone()))
            .collect();
        for (r, d) in owners {
            if has_children(self, &r) {
                continue;
            }
            match decode::<T>(&d, &r) {
                Ok(object) => match generate(self, &object) {
                    Ok(n) => notes.push(note(&r, n)),
                    Err(e) => errors.extend(e),
                },
                Err(e) => errors.push(ManifestError::Invalid {
                    source_name: "manifests".into(),
                    index: 0,
                    message: format!("{r}: {e}"),
                }),
            }
        }
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
