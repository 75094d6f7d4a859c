//! A bare pod, or a pod whose root is a controller the bridge has no rule for
//! (ReplicaSet, StatefulSet, Deployment, ...): one external job for the one pod.

use crate::k8s::slim_pod::Pod;

use super::KindOutput;
use crate::workload::GangStatus;
use crate::workload::ir::{JobInfo, pod_key};
use crate::workload::owner::RootOwner;

/// `Pods=[pod]`, one task on at most one node. Annotations come from the root: the pod
/// itself when it has no controller, else the highest readable controller.
pub fn translate(pod: &Pod, root: &RootOwner) -> KindOutput {
    KindOutput {
        group_key: format!("pod/{}", pod_key(pod)),
        root: root.object.clone(),
        pods: vec![pod.clone()],
        job: JobInfo {
            tasks_per_node: Some(1),
            max_nodes: Some(1),
            ..Default::default()
        },
        annotations: root.annotations(pod).cloned().unwrap_or_default(),
        annotation_source: root.object.to_string(),
        gang: GangStatus::Complete,
        gang_timeout: None,
    }
}
