//! The simulated cluster: nodes, a kubelet and the workload controllers, all talking to the
//! API server only through the Kubernetes API with the kube-rs client, as real ones do.
//!
//! # Nodes
//! `node-1`..`node-N` (prefix and count from [`SimConfig`]; they match the Slurm nodes of
//! `slurm-testenv up --nodes N`), or the nodes of a YAML file ([`SimConfig::nodes_file`]):
//!
//! ```yaml
//! nodes:                                  # or a bare list of entries
//!   - name: gpu-1                         # required, unique
//!     labels: {topology.kubernetes.io/zone: a}
//!     annotations: {scheduler.slinky.slurm.net/external-node-partitions: gpu}
//!     capacity: {cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "4"}
//!     allocatable: {cpu: "31"}            # per resource, defaults to capacity
//!     taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
//!     unschedulable: false
//! ```
//! Missing `cpu`/`memory`/`pods` capacities come from `node_cpu`/`node_memory`/`node_pods`.
//! Each node gets labels `kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`,
//! an InternalIP, `nodeInfo`, and conditions Ready=True plus the three pressure conditions
//! False, written through `nodes/status`. There are no heartbeats and no node leases.
//!
//! # Kubelet
//! One watch on pods with `spec.nodeName` set, filtered to the simulated nodes, and one timer
//! queue (no task per pod). Pods that are not bound are left alone (they stay Pending).
//! - A bound pod becomes Running at once: `startTime`, `podIP`/`podIPs` (from the node's pod
//!   CIDR), `hostIP`, conditions PodReadyToStartContainers/Initialized/ContainersReady/Ready
//!   True, init containers terminated with exit code 0, every container `running`, ready,
//!   started, with an image ID and container ID. Status goes through `pods/status`.
//! - How long it runs: annotation `kube-sim/duration` (seconds such as `"1.5"`, a Go
//!   duration such as `"1m30s"`, or `"infinity"`), else the containers' commands: `sleep N`
//!   (GNU suffixes s/m/h/d, several operands add up, `infinity`), `sh -c "..."` scripts
//!   (sleeps add up, `exit N` sets the exit code, loops run forever, `false` exits 1), quick
//!   commands such as `echo`/`true` end at once; no command (the image's entrypoint) or an
//!   unknown program runs until deleted. The pod ends when its longest container ends.
//! - How it ends: exit code from annotation `kube-sim/exit-code`, else from the script, else
//!   0. Exit 0 → Succeeded (reason Completed), otherwise Failed (reason Error). A pod's
//!   `spec.activeDeadlineSeconds` kills it: Failed, reason DeadlineExceeded, exit 137. Containers
//!   with `restartPolicy: Always` (or `OnFailure` with a non-zero code) are restarted in place
//!   instead: `restartCount` grows, `lastState` records the exit, the pod stays Running.
//! - Deletion (deletionTimestamp set): after min(grace period, remaining run) the pod is
//!   marked terminal — Failed with exit code 137 (reason Error) when it was killed, or its
//!   natural result when it finished first — and then deleted with `gracePeriodSeconds=0`
//!   (UID precondition). The grace period is `metadata.deletionGracePeriodSeconds`, else
//!   `spec.terminationGracePeriodSeconds`, else 30 s. A bound pod that never started is
//!   deleted at once.
//!
//! # Controllers
//! Each controller is one task with its own watches and in-memory index; creations are
//! tracked in flight (the real controllers' "expectations") so a slow watch never makes
//! duplicates. Owned objects are deleted when their owner goes away (the garbage collector's
//! job, done here for the objects each controller made), whatever the deletion's
//! propagation policy: unlike the real API, deleting a Job without one does not orphan its
//! pods. Missing CRDs for
//! JobSet and LeaderWorkerSet are installed at start (schema: preserve unknown fields).
//!
//! **batch/v1 Job** honours `parallelism` (default 1), `completions` (unset: done when one
//! pod succeeds and the others have ended), `completionMode` NonIndexed and Indexed,
//! `backoffLimit` (default 6; failed pods beyond it fail the Job with BackoffLimitExceeded),
//! `activeDeadlineSeconds` (DeadlineExceeded), `suspend` (active pods deleted, none created,
//! Suspended condition). Pods are named `<job>-<5 chars>` (`<job>-<index>-<5 chars>` when
//! Indexed), carry the template's labels plus `batch.kubernetes.io/controller-uid`,
//! `controller-uid`, `batch.kubernetes.io/job-name`, `job-name` (and
//! `batch.kubernetes.io/job-completion-index` label + annotation, env
//! `JOB_COMPLETION_INDEX` and hostname `<job>-<index>` when Indexed), and a controller owner
//! reference to the Job. A pod that fails, or disappears before ending, counts as failed and
//! is replaced. Status (via `jobs/status`): `active`, `ready`, `succeeded`, `failed`,
//! `terminating`, `startTime`, `completionTime`, `completedIndexes`, conditions
//! SuccessCriteriaMet + Complete, FailureTarget + Failed, Suspended. Not honoured:
//! `podFailurePolicy`, `successPolicy`, `backoffLimitPerIndex`, `podReplacementPolicy`,
//! pod-tracking finalizers, `ttlSecondsAfterFinished`; restarts under `OnFailure` do not
//! count toward `backoffLimit`.
//!
//! **JobSet** (`jobset.x-k8s.io/v1alpha2`) creates one Job `<jobset>-<replicatedJob>-<i>` per
//! replica of each replicatedJob (`replicas` default 1), with the template's labels and
//! annotations plus `jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`,
//! `replicatedjob-replicas`, `global-replicas`, `job-index`, `job-global-index`, `job-key`
//! (SHA-1 of `<ns>/<job>`), `restart-attempt` on both the Job and its pod template (as labels
//! and annotations), a controller owner reference, `completionMode: Indexed` when unset,
//! `spec.suspend` from the JobSet and `subdomain` = the JobSet name (headless Services are
//! not created). Status: `replicatedJobsStatus` (ready/succeeded/failed/active/suspended),
//! `restarts`, `terminalState`, conditions Completed (successPolicy `All`/`Any` with
//! `targetReplicatedJobs`) and Failed (any Job failed once `failurePolicy.maxRestarts` are
//! used up; each restart deletes and recreates all Jobs with the next `restart-attempt`).
//! Active Jobs are deleted when the JobSet fails. Not honoured: startupPolicy, dependsOn,
//! coordinator, exclusive placement, failure-policy rules, TTL.
//!
//! **LeaderWorkerSet** (`leaderworkerset.x-k8s.io/v1`) creates per group `i` in
//! `0..replicas` (default 1) a leader pod `<lws>-<i>` (from `leaderTemplate`, else
//! `workerTemplate`) and workers `<lws>-<i>-<w>` for `w` in `1..size` (size default 1).
//! Pods are created directly, not through StatefulSets: the leader's controller owner is the
//! LeaderWorkerSet, each worker's is its leader Pod (so the owner chain worker → leader Pod →
//! LWS matches what slurm-bridge walks). Labels: `leaderworkerset.sigs.k8s.io/name`,
//! `group-index`, `worker-index` (leader 0), `group-key` (SHA-1 of `<ns>/<leader name>`),
//! `template-revision-hash`; annotations `leaderworkerset.sigs.k8s.io/size` and, on workers,
//! `leader-name`; env `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE`, `LWS_WORKER_INDEX`; hostname
//! = pod name, subdomain = LWS name. `startupPolicy` LeaderCreated (default) and LeaderReady
//! are honoured; with restartPolicy RecreateGroupOnPodRestart (default) a group with an
//! ended pod, a pod deleted by someone else, or a missing leader is deleted and recreated;
//! with None only the ended or missing pods are replaced (workers follow their leader).
//! Groups past `replicas` are deleted on scale-down. Status: `replicas`, `readyReplicas`,
//! `updatedReplicas`, condition Available. Not honoured: rolling updates, subgroups,
//! volume claim templates, exclusive topology.

mod crds;
mod job;
mod jobset;
mod kubelet;
mod lws;
mod nodes;
mod runtime;
mod util;

use std::path::PathBuf;

use tokio::task::JoinSet;

pub use nodes::{NodeEntry, parse_nodes_yaml};
pub use runtime::{RunPlan, plan_for_command, plan_for_pod};

/// Annotation giving a pod's run time (seconds, Go duration, or `infinity`).
pub const ANNOTATION_DURATION: &str = "kube-sim/duration";
/// Annotation giving a pod's exit code when it ends on its own.
pub const ANNOTATION_EXIT_CODE: &str = "kube-sim/exit-code";

/// What the simulated cluster consists of.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of generated nodes (`<node_prefix>1`..`<node_prefix>N`); ignored with a nodes file.
    pub nodes: usize,
    /// Prefix of generated node names.
    pub node_prefix: String,
    /// YAML file describing the nodes (see the module docs); replaces the generated ones.
    pub nodes_file: Option<PathBuf>,
    /// Default CPU capacity per node.
    pub node_cpu: String,
    /// Default memory capacity per node.
    pub node_memory: String,
    /// Default pod capacity per node.
    pub node_pods: String,
    /// Run the simulated kubelet.
    pub kubelet: bool,
    /// Run the Job, JobSet and LeaderWorkerSet controllers.
    pub controllers: bool,
    /// Install the JobSet and LeaderWorkerSet CRDs when missing (with `controllers`).
    pub install_crds: bool,
    /// How many API writes the kubelet and each controller keep in flight.
    pub max_in_flight: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            node_prefix: "node-".into(),
            nodes_file: None,
            node_cpu: "8".into(),
            node_memory: "16000Mi".into(),
            node_pods: "110".into(),
            kubelet: true,
            controllers: true,
            install_crds: true,
            max_in_flight: 64,
        }
    }
}

/// Why the simulated cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The nodes file could not be read or is malformed.
    #[error("nodes file: {0}")]
    NodesFile(String),
    /// An API call failed.
    #[error("{0}: {1}")]
    Api(String, #[source] kube::Error),
    /// A setup task died.
    #[error("setup task failed: {0}")]
    Task(String),
}

/// The running simulated cluster. Its tasks stop on [`SimHandle::stop`] or when dropped.
#[derive(Debug)]
pub struct SimHandle {
    tasks: JoinSet<()>,
    nodes: Vec<String>,
}

impl SimHandle {
    /// Names of the simulated nodes.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Stop the kubelet and controllers and wait until their tasks have ended.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

/// Create the nodes, then run the kubelet and the controllers as tokio tasks.
pub async fn start(client: kube::Client, cfg: SimConfig) -> Result<SimHandle, SimError> {
    let entries = nodes::node_entries(&cfg)?;
    nodes::register(&client, &entries).await?;
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    tracing::info!(nodes = names.len(), "kube-sim: simulated nodes registered");

    let mut tasks = JoinSet::new();
    let limit = cfg.max_in_flight.max(1);
    if cfg.kubelet {
        let kubelet = kubelet::Kubelet::new(client.clone(), &names, limit);
        tasks.spawn(kubelet.run());
    }
    if cfg.controllers {
        if cfg.install_crds {
            crds::install(&client).await?;
        }
        tasks.spawn(job::run(client.clone(), limit));
        tasks.spawn(jobset::run(client.clone(), limit));
        tasks.spawn(lws::run(client.clone(), limit));
    }
    Ok(SimHandle {
        tasks,
        nodes: names,
    })
}
