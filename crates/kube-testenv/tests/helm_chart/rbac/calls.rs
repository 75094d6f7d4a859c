//! The allow-lists: the Kubernetes calls each component's code makes (`crates/slurm-bridge/src`),
//! cluster-wide, and the namespaced ones (the shared CA Secret, the leader Lease).

use crate::support::PREFIX;

/// One permission: (apiGroup, resource, verb).
pub type Perm = (&'static str, &'static str, &'static str);

fn perms(group: &'static str, resources: &[&'static str], verbs: &[&'static str]) -> Vec<Perm> {
    resources
        .iter()
        .flat_map(|r| verbs.iter().map(move |v| (group, *r, *v)))
        .collect()
}

/// What the scheduler calls, cluster-wide (src/scheduler, src/workload/kube_reader.rs, src/caches/).
pub fn scheduler_calls() -> Vec<Perm> {
    [
        // caches/: pod reflector (list, watch); pod_ops.rs: label/annotation/finalizer patches,
        // a get after a Binding conflict; reconcile.rs, sweep.rs: get; kube_reader.rs: list a group.
        perms("", &["pods"], &["get", "list", "watch", "patch"]),
        perms("", &["pods/binding"], &["create"]), // pod_ops.rs bind
        perms("", &["pods/status"], &["patch"]),   // pod_ops.rs set_unschedulable
        perms("", &["nodes"], &["list", "watch"]), // caches/ node reflector
        perms("events.k8s.io", &["events"], &["create"]), // pod_ops.rs event_for
        // workload/owner.rs + kinds/*: the owner walk and the translators, served by one
        // reflector per kind (caches/objects.rs: list, watch) with live GETs on a miss.
        perms(
            "apps",
            &["replicasets", "statefulsets"],
            &["get", "list", "watch"],
        ),
        perms("batch", &["jobs"], &["get", "list", "watch"]),
        perms("jobset.x-k8s.io", &["jobsets"], &["get", "list", "watch"]),
        perms(
            "leaderworkerset.x-k8s.io",
            &["leaderworkersets"],
            &["get", "list", "watch"],
        ),
        perms(
            "scheduling.x-k8s.io",
            &["podgroups"],
            &["get", "list", "watch"],
        ),
        perms(
            "scheduling.k8s.io",
            &["podgroups", "workloads"],
            &["get", "list", "watch"],
        ),
        // workload/kinds/coscheduling.rs: a PodGroup's TrainJob owner lends its annotations.
        perms(
            "trainer.kubeflow.org",
            &["trainjobs"],
            &["get", "list", "watch"],
        ),
        perms("scheduling.k8s.io", &["podgroups/status"], &["patch"]), // podgroup.rs
        // DRA: caches/ ResourceSlice reflector; scheduler/claims.rs (DeviceClass get_opt,
        // the claim a pod names read back, claims listed by pod uid, created, deleted;
        // allocation written to the claim status).
        perms("resource.k8s.io", &["resourceslices"], &["list", "watch"]),
        perms("resource.k8s.io", &["deviceclasses"], &["get"]),
        perms(
            "resource.k8s.io",
            &["resourceclaims"],
            &["get", "list", "create", "delete"],
        ),
        perms("resource.k8s.io", &["resourceclaims/status"], &["patch"]),
        // Volumes: caches/ reflectors; volumes/bind.rs claimRef and selected-node patches,
        // the claims and PVs read back.
        perms(
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
            &["get", "list", "watch", "patch"],
        ),
        perms("storage.k8s.io", &["storageclasses"], &["list", "watch"]),
        // The API server's own check when a status write sets allocation or reservedFor.
        perms("resource.k8s.io", &["resourceclaims/binding"], &["patch"]),
    ]
    .concat()
}

/// What the controllers call, cluster-wide (src/controllers, src/caches/).
pub fn controllers_calls() -> Vec<Perm> {
    [
        // caches/ reflector; pod_ops.rs remove_finalizer / clear_job; pod/actions.rs remove.
        perms("", &["pods"], &["list", "watch", "patch", "delete"]),
        perms("", &["pods/status"], &["patch"]), // pod/actions.rs DisruptionTarget
        perms("", &["nodes"], &["list", "watch", "patch"]), // node/kube_ops.rs
        perms("", &["nodes/status"], &["patch"]), // node/kube_ops.rs conditions
        perms("events.k8s.io", &["events"], &["create"]),
        // DRA: caches/ ResourceSlice reflector; pod/actions.rs -> claims::delete_pod_claim.
        perms("resource.k8s.io", &["resourceslices"], &["list", "watch"]),
        perms("resource.k8s.io", &["resourceclaims"], &["delete"]),
    ]
    .concat()
}

/// What the node agent calls with `nodeAgent.draCpu` (src/node_agent/dra_cpu/): the claims the
/// kubelet asks it to prepare (kubelet.rs), its Node's uid and the node's slices (slice.rs:
/// list, server-side apply, which creates the first time, delete).
pub fn node_agent_calls() -> Vec<Perm> {
    [
        perms("resource.k8s.io", &["resourceclaims"], &["get"]),
        perms(
            "resource.k8s.io",
            &["resourceslices"],
            &["list", "create", "patch", "delete"],
        ),
        perms("", &["nodes"], &["get"]),
    ]
    .concat()
}

/// What the pre-delete hook calls, cluster-wide (src/cli/release_finalizers.rs: list every pod,
/// get one again after a conflict, patch its finalizers).
pub fn release_finalizers_calls() -> Vec<Perm> {
    perms("", &["pods"], &["get", "list", "patch"])
}

/// What admission calls (src/admission): namespaces only with a selector (managed.rs), the
/// webhook configurations only in the self-managed mode (certs.rs, GET and PUT), by name.
pub fn admission_calls(selector: bool, self_managed: bool) -> Vec<Perm> {
    let mut p = Vec::new();
    if selector {
        p.extend(perms("", &["namespaces"], &["get", "list", "watch"]));
    }
    if self_managed {
        p.extend(perms(
            "admissionregistration.k8s.io",
            &[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ],
            &["get", "update"],
        ));
    }
    p
}

/// The self-managed CA shared between replicas, in the release namespace only
/// (src/admission/certs/shared.rs: GET and PUT by name, POST with no name to limit it to).
pub fn ca_secret_calls() -> Vec<(Perm, Option<Vec<String>>)> {
    let name = vec![format!("{PREFIX}-admission-ca")];
    vec![
        (("", "secrets", "create"), None),
        (("", "secrets", "get"), Some(name.clone())),
        (("", "secrets", "update"), Some(name)),
    ]
}

/// The leader Lease, in the release namespace only (src/leader.rs: kube-lease-manager's get,
/// create, patch; the Lease watch).
pub fn lease_calls() -> Vec<Perm> {
    perms(
        "coordination.k8s.io",
        &["leases"],
        &["get", "list", "watch", "create", "patch"],
    )
}
