//! Custom resource types the bridge reads: JobSet, LeaderWorkerSet and the coscheduling
//! PodGroup. Only the fields the bridge uses; unknown fields are ignored.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `jobset.x-k8s.io/v1alpha2` JobSet spec.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    /// Groups of identical Jobs.
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
}

/// One replicated Job of a JobSet.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    /// Name, part of the Job names.
    pub name: String,
    /// Number of Jobs (default 1).
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Job template.
    #[serde(default)]
    pub template: JobTemplateSpec,
}

/// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet spec.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "leaderworkerset.x-k8s.io",
    version = "v1",
    kind = "LeaderWorkerSet",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Number of groups (default 1).
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Group template.
    #[serde(default)]
    pub leader_worker_template: LeaderWorkerTemplate,
}

/// The template of one LeaderWorkerSet group.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    /// Pods per group, leader included (default 1).
    #[serde(default)]
    pub size: Option<i32>,
    /// Leader pod template (default: the worker template).
    #[serde(default)]
    pub leader_template: Option<PodTemplateSpec>,
    /// Worker pod template.
    #[serde(default)]
    pub worker_template: PodTemplateSpec,
}

impl LeaderWorkerSet {
    /// Pods per group (default 1).
    pub fn group_size(&self) -> u32 {
        self.spec.leader_worker_template.size.unwrap_or(1).max(0) as u32
    }
}

/// `scheduling.x-k8s.io/v1alpha1` PodGroup (scheduler-plugins coscheduling) spec.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    namespaced,
    schema = "disabled",
    root = "CoschedulingPodGroup",
    status = "CoschedulingPodGroupStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupSpec {
    /// Minimum number of pods that must run together.
    #[serde(default)]
    pub min_member: Option<i32>,
    /// Minimum resources of the group.
    #[serde(default)]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// How long an incomplete gang may wait (docs/scheduler.md, "scheduleTimeoutSeconds").
    #[serde(default)]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Coscheduling PodGroup status.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupStatus {
    /// Phase: Pending, PreScheduling, Scheduling, Scheduled, Running, Finished, Failed, Unknown.
    #[serde(default)]
    pub phase: Option<String>,
}
