//! Reading what a node (simulated or a real kubelet) reported about a pod, for tests.

use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

/// The first container's terminated state, once the node reported one.
pub fn first_termination(pod: &Pod) -> Option<&ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}
