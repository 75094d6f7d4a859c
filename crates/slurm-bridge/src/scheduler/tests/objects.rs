//! The Kubernetes objects a [`super::World`] starts with, as JSON with builders.

use super::{NS, SCHEDULER};
use crate::wellknown::{FINALIZER, LABEL_COSCHEDULING_POD_GROUP, LABEL_SLURM_JOBID};
use serde_json::{Value, json};

/// A Kubernetes object under construction (JSON, as the API server would hold it).
#[derive(Clone, Debug)]
pub struct Obj(pub Value);

impl Obj {
    /// Sets the value at a JSON pointer (`/spec/nodeName`), creating objects on the way.
    pub fn set(mut self, pointer: &str, value: Value) -> Self {
        let mut at = &mut self.0;
        for key in pointer.trim_start_matches('/').split('/') {
            if !at.is_object() {
                *at = json!({});
            }
            at = at
                .as_object_mut()
                .expect("object")
                .entry(key.replace("~1", "/").replace("~0", "~"))
                .or_insert(Value::Null);
        }
        *at = value;
        self
    }

    fn meta_entry(mut self, map: &str, key: &str, value: &str) -> Self {
        if !self.0["metadata"][map].is_object() {
            self.0["metadata"][map] = json!({});
        }
        self.0["metadata"][map][key] = json!(value);
        self
    }

    pub fn label(self, key: &str, value: &str) -> Self {
        self.meta_entry("labels", key, value)
    }

    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.meta_entry("annotations", key, value)
    }

    /// The Slurm job id label.
    pub fn job_label(self, job_id: u32) -> Self {
        self.label(LABEL_SLURM_JOBID, &job_id.to_string())
    }

    /// A controller owner reference.
    pub fn owned_by(self, api_version: &str, kind: &str, name: &str) -> Self {
        self.set(
            "/metadata/ownerReferences",
            json!([{"apiVersion": api_version, "kind": kind, "name": name,
                    "uid": format!("uid-{name}"), "controller": true}]),
        )
    }

    /// A pod of the batch Job `name`.
    pub fn of_job(self, name: &str) -> Self {
        self.owned_by("batch/v1", "Job", name)
            .label("batch.kubernetes.io/job-name", name)
    }

    /// A pod of the built-in PodGroup `name` (`spec.schedulingGroup`).
    pub fn in_podgroup(self, name: &str) -> Self {
        self.set("/spec/schedulingGroup", json!({"podGroupName": name}))
    }

    /// A pod of the coscheduling PodGroup `name` (label).
    pub fn in_coscheduling(self, name: &str) -> Self {
        self.label(LABEL_COSCHEDULING_POD_GROUP, name)
    }

    /// A pod with a scheduling gate.
    pub fn gated(self) -> Self {
        self.set(
            "/spec/schedulingGates",
            json!([{"name": "example.com/quota"}]),
        )
    }

    pub fn bound_to(self, node: &str) -> Self {
        self.set("/spec/nodeName", json!(node))
    }

    /// As the scheduler's label patch for job `job_id` leaves a pod: the job id label, the
    /// finalizer and the bridge toleration.
    pub fn labelled(self, job_id: u32) -> Self {
        let toleration = crate::wellknown::managed_node_toleration(SCHEDULER);
        self.job_label(job_id)
            .with_finalizer()
            .set("/spec/tolerations", json!([toleration]))
    }

    /// As the admission webhook creates a pod: the finalizer and the bridge toleration, so the
    /// scheduler's label patch is the label alone.
    pub fn admitted(self) -> Self {
        let toleration = crate::wellknown::managed_node_toleration(SCHEDULER);
        self.with_finalizer()
            .set("/spec/tolerations", json!([toleration]))
    }

    pub fn with_finalizer(self) -> Self {
        self.set("/metadata/finalizers", json!([FINALIZER]))
    }

    /// Deleted (deletionTimestamp set), held by the bridge finalizer.
    pub fn deleting(self) -> Self {
        self.with_finalizer()
            .set("/metadata/deletionTimestamp", json!("2026-01-01T00:00:00Z"))
    }

    pub fn phase(self, phase: &str) -> Self {
        self.set("/status/phase", json!(phase))
    }

    pub fn node_selector(self, key: &str, value: &str) -> Self {
        self.set("/spec/nodeSelector", json!({ key: value }))
    }

    /// The container's CPU request.
    pub fn cpu(mut self, cpu: &str) -> Self {
        self.0["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
        self
    }

    /// A node that is not Ready.
    pub fn not_ready(self) -> Self {
        self.set(
            "/status/conditions",
            json!([{"type": "Ready", "status": "False"}]),
        )
    }

    pub(super) fn kind(&self) -> &str {
        self.0["kind"].as_str().unwrap_or_default()
    }

    pub(super) fn name(&self) -> &str {
        self.0["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// A pending, unbound pod `ns/<name>` with one container.
pub fn pod(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }))
}

/// A Ready node; its Slurm name is its name.
pub fn node(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }))
}

/// A batch/v1 Job `ns/<name>`.
pub fn batch_job(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
}

/// A built-in PodGroup (scheduling.k8s.io/v1alpha2); a gang of `min_count` when given.
pub fn podgroup(name: &str, min_count: Option<i32>) -> Obj {
    let policy = match min_count {
        Some(n) => json!({"gang": {"minCount": n}}),
        None => json!({"basic": {}}),
    };
    Obj(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"schedulingPolicy": policy},
    }))
}

/// A coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1) with `minMember` and a phase.
pub fn coscheduling_podgroup(name: &str, min_member: i32, phase: &str) -> Obj {
    Obj(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": min_member},
        "status": {"phase": phase},
    }))
}
