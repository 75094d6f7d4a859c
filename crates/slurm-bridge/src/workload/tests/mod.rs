//! Table tests of the translation against in-memory objects (reference §9.4).
//!
//! The reader with injected failures and the YAML builders are here; the tests by the workload
//! they translate: `owner` (the owner walk), `translate` (bare pods, controllers), `jobs`,
//! `podgroup`, `coscheduling`, `lws`, `resources`, `owner_annotations` and `kueue` (issue 23).

use std::collections::{BTreeMap, HashMap};

use crate::k8s::slim_pod::Pod;
use kube::core::DynamicObject;

use super::manifest_reader::ManifestReader;
use super::reader::{ObjectRef, ReadError, WorkloadReader};
use super::{GangStatus, TranslateError, Translation, translate};
use crate::wellknown::slurmjob as key;

/// A ManifestReader with injected read failures.
struct FakeReader {
    inner: ManifestReader,
    errors: HashMap<ObjectRef, ReadError>,
    list_error: Option<ReadError>,
}

impl WorkloadReader for FakeReader {
    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        if let Some(e) = self.errors.get(object) {
            return Err(e.clone());
        }
        self.inner.get(object).await
    }
    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        if let Some(e) = &self.list_error {
            return Err(e.clone());
        }
        self.inner.list_pods(namespace, labels).await
    }
}

fn reader(yaml: &str) -> FakeReader {
    let mut inner = ManifestReader::new();
    inner.load_yaml("test", yaml).unwrap();
    FakeReader {
        inner,
        errors: HashMap::new(),
        list_error: None,
    }
}

fn pod_of(r: &FakeReader, name: &str) -> Pod {
    r.inner
        .pods()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn run(r: &FakeReader, pod: &str) -> Result<Translation, TranslateError> {
    block(translate(r, &pod_of(r, pod)))
}

fn root_of(r: &FakeReader, pod: &str) -> Result<ObjectRef, TranslateError> {
    block(super::owner::root_owner(r, &pod_of(r, pod))).map(|o| o.object)
}

fn forbidden(o: &ObjectRef) -> ReadError {
    ReadError::Forbidden {
        object: o.clone(),
        message: "forbidden".into(),
    }
}

/// A pod YAML document; `extra_meta` and `extra_spec` are indented YAML lines.
fn pod(name: &str, extra_meta: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n{extra_meta}spec:\n  containers:\n  - name: c\n    image: busybox\n{extra_spec}---\n"
    )
}

fn owned_by(api_version: &str, kind: &str, name: &str) -> String {
    format!(
        "  ownerReferences:\n  - apiVersion: {api_version}\n    kind: {kind}\n    name: {name}\n    controller: true\n"
    )
}

fn object(api_version: &str, kind: &str, name: &str, extra_meta: &str, body: &str) -> String {
    format!(
        "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: ns\n{extra_meta}{body}---\n"
    )
}

const JOB_SPEC: &str =
    "spec:\n  template:\n    spec:\n      containers: [{name: c, image: busybox}]\n";

fn job(name: &str, extra_meta: &str) -> String {
    object("batch/v1", "Job", name, extra_meta, JOB_SPEC)
}

fn r(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, "ns", name)
}

fn annotate(pairs: &[(&str, &str)]) -> String {
    let mut s = String::from("  annotations:\n");
    for (k, v) in pairs {
        s.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    s
}

mod coscheduling;
mod jobs;
mod kueue;
mod lws;
mod owner;
mod owner_annotations;
mod podgroup;
mod resources;
mod translate;
