//! The caches keep only what translation reads ([`super::read_fields`] for owners and groups,
//! [`crate::k8s::slim_pod::Pod`] and [`crate::k8s::trim::pod`] for pods): every fixture translates through such trimmed objects
//! exactly as through the full ones.

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;
use kube::core::{DynamicObject, TypeMeta};

use super::manifest_reader::ManifestReader;
use super::read_fields::{keep_read_fields, trim_metadata};
use super::reader::{ObjectRef, ReadError, WorkloadReader};
use super::translate;

/// A reader that answers with what the scheduler's caches keep.
struct Trimmed(ManifestReader);

impl WorkloadReader for Trimmed {
    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        let mut d = self.0.get(object).await?;
        d.types = Some(TypeMeta {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
        });
        if object.is("v1", "Pod") {
            // A pod owner comes from the pod cache, as its metadata.
            trim_metadata(&mut d.metadata);
            d.data = crate::workload::read_fields::no_data();
        } else {
            keep_read_fields(&mut d);
        }
        Ok(d)
    }

    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        let pods = self.0.list_pods(namespace, labels).await?;
        Ok(pods.into_iter().map(trimmed).collect())
    }
}

fn trimmed(mut p: Pod) -> Pod {
    crate::k8s::trim::pod(&mut p);
    p
}

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/translate")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn every_fixture_translates_alike_from_trimmed_objects() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let cfg = crate::config::Config::default();
    let mut compared = 0;
    for f in [
        "bare-pod.yaml",
        "coscheduling-incomplete.yaml",
        "coscheduling.yaml",
        "deployment.yaml",
        "gpu.yaml",
        "invalid-annotation.yaml",
        "job-large.yaml",
        "job-single.yaml",
        "jobset-large.yaml",
        "jobset-single.yaml",
        "lws.yaml",
        "unknown-owner.yaml",
        "workload-podgroup.yaml",
    ] {
        let mut full = ManifestReader::new();
        full.load_yaml(f, &fixture(f)).unwrap();
        let _ = full.generate_controller_pods();
        let trim = Trimmed(full.clone());
        for pod in full.pods() {
            let whole = rt.block_on(translate(&full, &pod));
            let cut = rt.block_on(translate(&trim, &trimmed(pod.clone())));
            let name = format!("{f}: {}", pod.metadata.name.as_deref().unwrap_or_default());
            match (whole, cut) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.group_key, b.group_key, "{name}");
                    assert_eq!(a.ir.root, b.ir.root, "{name}");
                    assert_eq!(a.ir.pod_names(), b.ir.pod_names(), "{name}");
                    assert_eq!(a.ir.job, b.ir.job, "{name}");
                    assert_eq!(a.gang, b.gang, "{name}");
                    assert_eq!(a.gang_timeout, b.gang_timeout, "{name}");
                    assert_eq!(a.warnings, b.warnings, "{name}");
                    assert_eq!(
                        serde_json::to_value(a.to_job_desc(
                            &cfg,
                            &crate::tenancy::Granted::as_asked(&a.asked(&cfg)),
                            &[]
                        ))
                        .unwrap(),
                        serde_json::to_value(b.to_job_desc(
                            &cfg,
                            &crate::tenancy::Granted::as_asked(&b.asked(&cfg)),
                            &[]
                        ))
                        .unwrap(),
                        "{name}"
                    );
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
                (a, b) => panic!("{name}: {a:?} against {b:?}"),
            }
            compared += 1;
        }
    }
    assert!(compared >= 20, "only {compared} pods compared");
}
