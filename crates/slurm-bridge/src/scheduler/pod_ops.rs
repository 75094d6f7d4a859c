//! The scheduler's Kubernetes writes on pods: job id label + finalizer + toleration, node
//! annotation, binding, the PodScheduled condition, and Events.

use crate::wellknown::{
    ANNOTATION_SLURM_NODE, FINALIZER, LABEL_SLURM_JOBID, managed_node_toleration, merge_toleration,
};
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// PodScheduled reasons the bridge sets (with Kubernetes' own `Unschedulable` family).
pub mod reason {
    /// Waiting for the rest of a gang.
    pub const WAITING_FOR_GANG: &str = "WaitingForGang";
    /// A coscheduling PodGroup that admits no new job.
    pub const POD_GROUP_CLOSED: &str = "PodGroupClosed";
    /// The Slurm job is pending; the message carries Slurm's state_reason.
    pub const SLURM_JOB_PENDING: &str = "SlurmJobPending";
    /// The Slurm job is suspended; its pods are bound when it resumes.
    pub const SLURM_JOB_SUSPENDED: &str = "SlurmJobSuspended";
    /// Slurm rejected the job; the message carries Slurm's error text.
    pub const SLURM_SUBMIT_FAILED: &str = "SlurmSubmitFailed";
    /// slurmrestd could not be reached.
    pub const SLURM_UNAVAILABLE: &str = "SlurmUnavailable";
    /// A `slurmjob.slinky.slurm.net/*` annotation is invalid; the message names the key.
    pub const INVALID_ANNOTATION: &str = "InvalidAnnotation";
    /// The pod's group could not be worked out (an owner missing, ...).
    pub const TRANSLATION_FAILED: &str = "TranslationFailed";
    /// No Kubernetes node suits the pod.
    pub const NO_FEASIBLE_NODES: &str = "NoFeasibleNodes";
    /// The allocation could not be mapped to Kubernetes nodes.
    pub const ALLOCATION_UNMAPPED: &str = "SlurmAllocationUnmapped";
}

/// Writes pods and records events as the scheduler.
#[derive(Clone)]
pub struct PodWriter {
    client: Client,
    scheduler_name: String,
    /// `reportingInstance` of Events: the pod name when set, else the host name.
    instance: String,
}

fn api_for(client: &Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
}

fn params(scheduler_name: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(scheduler_name.to_string()),
        ..Default::default()
    }
}

impl PodWriter {
    pub fn new(client: Client, scheduler_name: &str) -> Self {
        PodWriter {
            instance: crate::leader::identity(),
            client,
            scheduler_name: scheduler_name.to_string(),
        }
    }

    /// Labels a pod with its job id, adds the finalizer once and the bridge toleration once, and
    /// clears a node annotation that does not belong to this job.
    pub async fn label(&self, pod: &Pod, job_id: u32, clear_node: bool) -> Result<(), kube::Error> {
        let mut tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        let add_toleration = merge_toleration(&mut tolerations, &self.scheduler_name);
        let has_label = pod.labels().get(LABEL_SLURM_JOBID) == Some(&job_id.to_string());
        let has_finalizer = pod.finalizers().iter().any(|f| f == FINALIZER);
        let stale_node = clear_node && pod.annotations().contains_key(ANNOTATION_SLURM_NODE);
        if has_label && has_finalizer && !add_toleration && !stale_node {
            return Ok(());
        }
        let mut patch = json!({
            "metadata": {
                "labels": {LABEL_SLURM_JOBID: job_id.to_string()},
                // Strategic merge: finalizers merge as a set.
                "finalizers": [FINALIZER],
            }
        });
        if stale_node {
            patch["metadata"]["annotations"] = json!({ ANNOTATION_SLURM_NODE: null });
        }
        if add_toleration {
            // Tolerations have no merge key: send the whole list.
            patch["spec"] = json!({ "tolerations": tolerations });
        }
        api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Strategic(&patch),
            )
            .await
            .map(|_| ())
    }

    /// Removes the bridge finalizer (every occurrence), keeping the others.
    pub async fn remove_finalizer(&self, pod: &Pod) -> Result<(), kube::Error> {
        if !pod.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let rest: Vec<&String> = pod
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        // Guarded by the resourceVersion: a concurrent finalizer change makes this a conflict
        // (retried) rather than a lost update.
        let patch = json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": pod.resource_version(),
        }});
        match api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes the job id label and node annotation (the job was cancelled under the pod).
    pub async fn clear_job(&self, pod: &Pod) -> Result<(), kube::Error> {
        if !pod.labels().contains_key(LABEL_SLURM_JOBID)
            && !pod.annotations().contains_key(ANNOTATION_SLURM_NODE)
        {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "labels": {LABEL_SLURM_JOBID: null},
            "annotations": {ANNOTATION_SLURM_NODE: null},
        }});
        api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
    }

    /// Annotates the pod with its node, then binds it there (pods/binding). A pod already bound
    /// to that node counts as bound.
    pub async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let api = api_for(&self.client, pod);
        let name = pod.name_any();
        if pod
            .annotations()
            .get(ANNOTATION_SLURM_NODE)
            .map(String::as_str)
            != Some(node)
        {
            let patch = json!({"metadata": {"annotations": {ANNOTATION_SLURM_NODE: node}}});
            api.patch(&name, &params(&self.scheduler_name), &Patch::Merge(&patch))
                .await?;
        }
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: pod.namespace(),
                uid: pod.uid(),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                api_version: Some("v1".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        match api
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let current = api.get(&name).await?;
                let bound_to = current.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if bound_to == Some(node) {
                    Ok(())
                } else {
                    Err(kube::Error::Api(status))
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Sets PodScheduled=False with `reason` and `message`, unless the pod already shows exactly
    /// that; returns whether it wrote.
    pub async fn set_unschedulable(
        &self,
        pod: &Pod,
        reason: &str,
        message: &str,
    ) -> Result<bool, kube::Error> {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        }) {
            return Ok(false);
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now.to_string(),
        }]}});
        api_for(&self.client, pod)
            .patch_status(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Strategic(&patch),
            )
            .await
            .map(|_| true)
    }

    /// Records an `events.k8s.io/v1` Event on the pod; failures are logged, never fatal. Plain
    /// creates, unlike kube-runtime's `Recorder`, which keeps every event it sent in memory for
    /// six minutes (tens of MiB with thousands of pods); the scheduler only reports changes, so
    /// there are no repeats to aggregate.
    pub async fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let pod_name = pod.name_any();
        let mut note = note;
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let event = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{pod_name}.{:x}", now.as_nanosecond()),
                "namespace": pod.namespace(),
            },
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            "reportingController": self.scheduler_name,
            "reportingInstance": self.instance,
            "action": "Scheduling",
            "reason": reason,
            "note": note,
            "type": if warning { "Warning" } else { "Normal" },
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace(),
                "name": pod_name,
                "uid": pod.uid(),
                "resourceVersion": pod.resource_version(),
            },
        });
        let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &pod.namespace().unwrap_or_default(),
            &ar,
        );
        let obj: kube::api::DynamicObject = match serde_json::from_value(event) {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "encoding an event failed");
                return;
            }
        };
        if let Err(e) = api.create(&PostParams::default(), &obj).await {
            tracing::debug!(error = %e, pod = %pod_name, "publishing an event failed");
        }
    }

    /// The bridge toleration this writer adds.
    pub fn toleration(&self) -> k8s_openapi::api::core::v1::Toleration {
        managed_node_toleration(&self.scheduler_name)
    }
}
