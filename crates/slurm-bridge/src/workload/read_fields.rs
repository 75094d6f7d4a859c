//! What translation reads of each kind it GETs, so a cache may keep only that: the metadata
//! (owner references and annotations; managed fields and kubectl's last-applied copy dropped)
//! and, for the few kinds whose spec or status is read, those fields. Every other kind (a
//! ReplicaSet, a JobSet, a Workload, a TrainJob...) is read for its metadata alone.
//!
//! The table test in `workload/tests.rs` translates every fixture through a reader that keeps
//! only these fields and checks the result is the one of the full objects.

use kube::core::DynamicObject;
use serde_json::{Map, Value};

use super::kind;
pub use crate::k8s::trim::{LAST_APPLIED, trim_metadata};

/// The paths (under the object, outside `metadata`) translation reads of `api_version`/`kind`.
pub fn data_paths(api_version: &str, kind: &str) -> &'static [&'static [&'static str]] {
    let is = |k: (&str, &str)| k.0 == api_version && k.1 == kind;
    if is(kind::JOB) {
        // kinds::job::job_info.
        &[
            &["spec", "activeDeadlineSeconds"],
            &["spec", "template", "spec", "resources"],
        ]
    } else if is(kind::LWS) {
        // LeaderWorkerSet::group_size.
        &[&["spec", "leaderWorkerTemplate", "size"]]
    } else if is(kind::PODGROUP) {
        // kinds::podgroup: the gang policy and the Workload reference.
        &[&["spec"]]
    } else if is(kind::COSCHEDULING_PODGROUP) {
        // kinds::coscheduling: minMember, minResources, scheduleTimeoutSeconds; the phase.
        &[&["spec"], &["status", "phase"]]
    } else {
        &[]
    }
}

/// True when translation reads more than the metadata of this kind.
pub fn reads_data(api_version: &str, kind: &str) -> bool {
    !data_paths(api_version, kind).is_empty()
}

/// What stands for an object's data when none is kept: an empty `spec`, so typed decoding still
/// works (the custom resource types, a JobSet's, require the field).
pub fn no_data() -> Value {
    serde_json::json!({"spec": {}})
}

/// Drops from `obj` everything translation does not read (see the module doc).
pub fn keep_read_fields(obj: &mut DynamicObject) {
    let (api_version, kind) = obj
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_default();
    trim_metadata(&mut obj.metadata);
    let mut kept = no_data();
    for path in data_paths(&api_version, &kind) {
        if let Some(v) = lookup(&obj.data, path) {
            insert(&mut kept, path, v.clone());
        }
    }
    obj.data = kept;
}

fn lookup<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn insert(into: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = into;
    for k in parents {
        let Value::Object(m) = cur else { return };
        cur = m
            .entry(k.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Value::Object(m) = cur {
        m.insert(last.to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_keeps_its_deadline_and_pod_resources_only() {
        let mut job: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns",
                "annotations": {LAST_APPLIED: "{...}", "slurmjob.slinky.slurm.net/timelimit": "5"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"activeDeadlineSeconds": 90, "parallelism": 3,
                "template": {"spec": {"resources": {"limits": {"cpu": "2"}},
                    "containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"active": 3},
        }))
        .unwrap();
        keep_read_fields(&mut job);
        assert_eq!(
            job.data,
            json!({"spec": {"activeDeadlineSeconds": 90,
                "template": {"spec": {"resources": {"limits": {"cpu": "2"}}}}}})
        );
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(
            job.metadata.annotations.unwrap().keys().collect::<Vec<_>>(),
            ["slurmjob.slinky.slurm.net/timelimit"]
        );
    }

    #[test]
    fn other_kinds_keep_their_metadata_only() {
        let mut rs: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "r", "namespace": "ns",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d",
                    "uid": "u", "controller": true}]},
            "spec": {"replicas": 2}, "status": {"replicas": 2},
        }))
        .unwrap();
        keep_read_fields(&mut rs);
        assert_eq!(rs.data, json!({"spec": {}}));
        assert_eq!(rs.metadata.owner_references.unwrap()[0].name, "d");
        assert!(!reads_data("apps/v1", "ReplicaSet"));
        assert!(reads_data("batch/v1", "Job"));
    }
}
