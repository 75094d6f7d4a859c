//! Well-known label, annotation, finalizer, taint and toleration keys (reference §1).
//!
//! Every string the bridge shares with users, Helm charts or the Go original lives here, so
//! a key is spelled once.

/// Prefix of the bridge's own keys.
pub const SLINKY_PREFIX: &str = "slinky.slurm.net/";
/// Prefix of keys written by the scheduler.
pub const SCHEDULER_PREFIX: &str = "scheduler.slinky.slurm.net/";
/// Prefix of the Slurm job parameter annotations.
pub const SLURMJOB_PREFIX: &str = "slurmjob.slinky.slurm.net/";
/// Prefix of topology annotations.
pub const TOPOLOGY_PREFIX: &str = "topology.slinky.slurm.net/";

// ---- Labels -------------------------------------------------------------------------

/// Node label: the Slurm NodeName of this node when it differs from the Kubernetes name.
pub const LABEL_SLURM_NODENAME: &str = "slinky.slurm.net/slurm-nodename";
/// Pod label: decimal Slurm job id of the pod's external job.
pub const LABEL_SLURM_JOBID: &str = "scheduler.slinky.slurm.net/slurm-jobid";
/// Node label: presence registers the node in Slurm as an external node.
pub const LABEL_EXTERNAL_NODE: &str = "scheduler.slinky.slurm.net/external-node";

/// Pod label naming a coscheduling (scheduler-plugins) PodGroup.
pub const LABEL_COSCHEDULING_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Pod label naming a Kueue plain-pod group (with [`ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT`]).
pub const LABEL_KUEUE_POD_GROUP_NAME: &str = "kueue.x-k8s.io/pod-group-name";
/// Pod annotation: how many pods a Kueue plain-pod group has.
pub const ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT: &str = "kueue.x-k8s.io/pod-group-total-count";
/// Pod label: hash identifying a LeaderWorkerSet group.
pub const LABEL_LWS_GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
/// Pod label: name of the LeaderWorkerSet.
pub const LABEL_LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// Pod label: index of the LeaderWorkerSet group.
pub const LABEL_LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// Pod label: index of the worker inside its LeaderWorkerSet group (0 = leader).
pub const LABEL_LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Pod label (legacy form) naming the pod's Job.
pub const LABEL_JOB_NAME: &str = "job-name";
/// Pod label (current form) naming the pod's Job.
pub const LABEL_BATCH_JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// Pod label (legacy form) carrying the Job's uid.
pub const LABEL_CONTROLLER_UID: &str = "controller-uid";
/// Pod label (current form) carrying the Job's uid.
pub const LABEL_BATCH_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// Pod label and annotation: completion index of an Indexed Job's pod.
pub const LABEL_JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Job/pod label naming the JobSet.
pub const LABEL_JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Job/pod label naming the JobSet's replicated job.
pub const LABEL_JOBSET_REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Job/pod label: index of the Job inside its replicated job.
pub const LABEL_JOBSET_JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";

// ---- Annotations ----------------------------------------------------------------------

/// Pod annotation: the Kubernetes node chosen for the pod from the Slurm allocation.
pub const ANNOTATION_SLURM_NODE: &str = "slinky.slurm.net/slurm-node";
/// Node annotation: comma-separated Slurm partitions of an external node.
pub const ANNOTATION_EXTERNAL_NODE_PARTITIONS: &str =
    "scheduler.slinky.slurm.net/external-node-partitions";
/// Node annotation: Slurm dynamic topology string of an external node.
pub const ANNOTATION_TOPOLOGY_SPEC: &str = "topology.slinky.slurm.net/spec";
/// ResourceClaim annotation set on claims the scheduler generates.
pub const ANNOTATION_EXTENDED_RESOURCE_CLAIM: &str =
    "resource.kubernetes.io/extended-resource-claim";

/// Slurm job parameter annotations (`slurmjob.slinky.slurm.net/<suffix>`).
pub mod slurmjob {
    /// Slurm account.
    pub const ACCOUNT: &str = "slurmjob.slinky.slurm.net/account";
    /// Slurm node features (`--constraint`).
    pub const CONSTRAINTS: &str = "slurmjob.slinky.slurm.net/constraints";
    /// CPUs per task (Kubernetes quantity, rounded up).
    pub const CPU_PER_TASK: &str = "slurmjob.slinky.slurm.net/cpu-per-task";
    /// Whole nodes (`true`) or shared nodes (`false`).
    pub const EXCLUSIVE: &str = "slurmjob.slinky.slurm.net/exclusive";
    /// GRES per node (`tres_per_node`), e.g. `gres/gpu=2`.
    pub const GRES: &str = "slurmjob.slinky.slurm.net/gres";
    /// Unix group id or name the job runs as.
    pub const GROUP_ID: &str = "slurmjob.slinky.slurm.net/group-id";
    /// Slurm job name.
    pub const JOB_NAME: &str = "slurmjob.slinky.slurm.net/job-name";
    /// Slurm licenses.
    pub const LICENSES: &str = "slurmjob.slinky.slurm.net/licenses";
    /// Maximum node count.
    pub const MAX_NODES: &str = "slurmjob.slinky.slurm.net/max-nodes";
    /// Memory per node (Kubernetes quantity, sent in MiB).
    pub const MEM_PER_NODE: &str = "slurmjob.slinky.slurm.net/mem-per-node";
    /// Minimum node count.
    pub const MIN_NODES: &str = "slurmjob.slinky.slurm.net/min-nodes";
    /// Slurm partition (overrides the config's default partition).
    pub const PARTITION: &str = "slurmjob.slinky.slurm.net/partition";
    /// Pods of the group that share one node (slurm-bridge's own key; 1 by default). Slurm
    /// sees each pod as a task: `tasks_per_node` is this, and the node count shrinks with it.
    pub const PODS_PER_NODE: &str = "slurmjob.slinky.slurm.net/pods-per-node";
    /// Slurm job priority.
    pub const PRIORITY: &str = "slurmjob.slinky.slurm.net/priority";
    /// Slurm QOS.
    pub const QOS: &str = "slurmjob.slinky.slurm.net/qos";
    /// Slurm reservation.
    pub const RESERVATION: &str = "slurmjob.slinky.slurm.net/reservation";
    /// Time limit in minutes.
    pub const TIMELIMIT: &str = "slurmjob.slinky.slurm.net/timelimit";
    /// Unix user id or name the job runs as.
    pub const USER_ID: &str = "slurmjob.slinky.slurm.net/user-id";
    /// Slurm workload characterization key.
    pub const WCKEY: &str = "slurmjob.slinky.slurm.net/wckey";

    /// All keys the bridge understands, sorted.
    pub const ALL: [&str; 19] = [
        ACCOUNT,
        CONSTRAINTS,
        CPU_PER_TASK,
        EXCLUSIVE,
        GRES,
        GROUP_ID,
        JOB_NAME,
        LICENSES,
        MAX_NODES,
        MEM_PER_NODE,
        MIN_NODES,
        PARTITION,
        PODS_PER_NODE,
        PRIORITY,
        QOS,
        RESERVATION,
        TIMELIMIT,
        USER_ID,
        WCKEY,
    ];
}

// ---- Finalizer, taint, toleration -----------------------------------------------------

/// Finalizer on every pod of an external job, removed once the pod is terminal.
pub const FINALIZER: &str = "scheduler.slinky.slurm.net/finalizer";
/// Taint key on bridged nodes (value = scheduler name, effect NoExecute).
pub const TAINT_MANAGED_NODE: &str = "slinky.slurm.net/managed-node";
/// Effect of the managed-node taint and toleration.
pub const TAINT_EFFECT: &str = "NoExecute";

/// The taint the node controller puts on bridged nodes.
pub fn managed_node_taint(scheduler_name: &str) -> k8s_openapi::api::core::v1::Taint {
    k8s_openapi::api::core::v1::Taint {
        key: TAINT_MANAGED_NODE.to_string(),
        value: Some(scheduler_name.to_string()),
        effect: TAINT_EFFECT.to_string(),
        time_added: None,
    }
}

/// The toleration the scheduler adds to every pod it schedules.
pub fn managed_node_toleration(scheduler_name: &str) -> k8s_openapi::api::core::v1::Toleration {
    k8s_openapi::api::core::v1::Toleration {
        key: Some(TAINT_MANAGED_NODE.to_string()),
        operator: Some("Equal".to_string()),
        value: Some(scheduler_name.to_string()),
        effect: Some(TAINT_EFFECT.to_string()),
        toleration_seconds: None,
    }
}

/// Kubernetes `MatchToleration`: same key, operator, value and effect.
fn same_toleration(
    a: &k8s_openapi::api::core::v1::Toleration,
    b: &k8s_openapi::api::core::v1::Toleration,
) -> bool {
    a.key == b.key && a.operator == b.operator && a.value == b.value && a.effect == b.effect
}

/// Add the bridge toleration unless an identical one is there; keeps every other
/// toleration. Returns true when it was added.
pub fn merge_toleration(
    tolerations: &mut Vec<k8s_openapi::api::core::v1::Toleration>,
    scheduler_name: &str,
) -> bool {
    let t = managed_node_toleration(scheduler_name);
    if tolerations.iter().any(|x| same_toleration(x, &t)) {
        return false;
    }
    tolerations.push(t);
    true
}

/// True when `obj` (a pod, in any of its forms) holds the bridge finalizer.
pub fn holds_finalizer<K: kube::Resource>(obj: &K) -> bool {
    obj.meta()
        .finalizers
        .as_ref()
        .is_some_and(|list| list.iter().any(|f| f == FINALIZER))
}

/// Add the bridge finalizer once (the reference appended it on every call: quirk 1).
/// Returns true when it was added.
pub fn add_finalizer_once(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    let list = meta.finalizers.get_or_insert_with(Vec::new);
    if list.iter().any(|f| f == FINALIZER) {
        return false;
    }
    list.push(FINALIZER.to_string());
    true
}

// ---- Devices --------------------------------------------------------------------------

/// Prefix of DRA extended resource names backed by a DeviceClass.
pub const DEVICECLASS_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// DeviceClass of the DRA CPU driver.
pub const DEVICECLASS_DRA_CPU: &str = "dra.cpu";
/// Extended resource name of DRA CPUs.
pub const RESOURCE_DRA_CPU: &str = "deviceclass.resource.kubernetes.io/dra.cpu";
/// Device-plugin GPU resources turned into `gres/gpu=N`.
pub const DEVICE_PLUGIN_GPUS: [&str; 2] = ["nvidia.com/gpu", "amd.com/gpu"];

/// Plugin name (and admin_comment owner) of the bridge scheduler.
pub const PLUGIN_NAME: &str = "SlurmBridge";
/// Default config file path.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm-bridge/config.yaml";

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Toleration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn taint_and_toleration_carry_the_scheduler_name() {
        for name in ["", "foo"] {
            let taint = managed_node_taint(name);
            assert_eq!(
                (
                    taint.key.as_str(),
                    taint.value.as_deref(),
                    taint.effect.as_str()
                ),
                (TAINT_MANAGED_NODE, Some(name), "NoExecute")
            );
            let t = managed_node_toleration(name);
            assert_eq!(t.key.as_deref(), Some(TAINT_MANAGED_NODE));
            assert_eq!(t.operator.as_deref(), Some("Equal"));
            assert_eq!(t.value.as_deref(), Some(name));
            assert_eq!(t.effect.as_deref(), Some("NoExecute"));
            assert_eq!(t.toleration_seconds, None);
        }
    }

    #[test]
    fn merge_toleration_adds_once_and_keeps_others() {
        let other = Toleration {
            key: Some("x".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let mut list = vec![other.clone()];
        assert!(merge_toleration(&mut list, "foo"));
        assert!(!merge_toleration(&mut list, "foo"));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0], other);
        // a different scheduler name is a different toleration
        assert!(merge_toleration(&mut list, "bar"));
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn finalizer_added_once() {
        let mut meta = ObjectMeta {
            finalizers: Some(vec!["other".into()]),
            ..Default::default()
        };
        let mut pod = k8s_openapi::api::core::v1::Pod {
            metadata: meta.clone(),
            ..Default::default()
        };
        assert!(!holds_finalizer(&pod), "another finalizer is not ours");
        assert!(add_finalizer_once(&mut meta));
        assert!(!add_finalizer_once(&mut meta));
        assert_eq!(
            meta.finalizers,
            Some(vec!["other".to_string(), FINALIZER.to_string()])
        );
        pod.metadata = meta;
        assert!(holds_finalizer(&pod));
        pod.metadata.finalizers = None;
        assert!(!holds_finalizer(&pod));
    }

    #[test]
    fn slurmjob_keys_are_sorted_and_prefixed() {
        assert!(slurmjob::ALL.windows(2).all(|w| w[0] < w[1]));
        assert!(slurmjob::ALL.iter().all(|k| k.starts_with(SLURMJOB_PREFIX)));
    }
}
