//! The node agent: plays the kubelets of fake nodes against a real kube-apiserver, through
//! the Kubernetes API only (kube-rs), so pods bound to those nodes run, end and go away.
//!
//! # Nodes
//! Each [`NodeSpec`] is registered as a kubelet registers its node: created (an existing
//! node gets its labels and annotations updated, its spec kept), then its status written
//! through `nodes/status`: capacity, allocatable, conditions Ready=True and
//! MemoryPressure/DiskPressure/PIDPressure=False, an InternalIP (172.18.x.y) and Hostname
//! address, `nodeInfo` (kubelet `v1.36.3`) and the kubelet's daemon endpoint. Labels
//! `kubernetes.io/hostname`, `kubernetes.io/os` and `kubernetes.io/arch` are always set.
//! A nodes file ([`parse_nodes_yaml`]) lists node specs:
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
//! Missing `cpu`/`memory`/`pods` capacities default to [`NodeSpec::standard`]'s.
//!
//! # Heartbeats
//! Every [`AgentOptions::lease_renew_interval`] each node's Lease in `kube-node-lease`
//! (holder = node, owned by the Node) is renewed, and every
//! [`AgentOptions::status_update_interval`] its conditions' `lastHeartbeatTime` is refreshed,
//! so the controller manager's node lifecycle controller keeps it Ready. With more nodes than
//! those intervals allow within [`AgentOptions::lease_writes_per_second`] and
//! [`AgentOptions::status_writes_per_second`], the periods are stretched (the Lease's never
//! beyond a quarter of [`AgentOptions::node_monitor_grace_period`]); each period's writes are
//! spread evenly over it (`cadence`). A node deleted by
//! someone is not recreated (tests delete nodes to simulate a lost kubelet): its heartbeats
//! stop and its pods are no longer touched. [`AgentHandle::add_nodes`] may register it again.
//!
//! # Pods
//! One watch on bound pods for all nodes and one timer queue (no task per pod).
//! - A bound pod becomes Running at once: `startTime`, `podIP`/`podIPs` (one /24 per node
//!   from `10.64.0.0/24` up; the node's IP for host-network pods), `hostIP`/`hostIPs`,
//!   conditions PodReadyToStartContainers, Initialized, ContainersReady and Ready True
//!   (PodScheduled True if missing), init containers terminated with exit code 0 (sidecars
//!   running), every container running, ready and started. Status goes through
//!   `pods/status` as strategic-merge patches.
//! - How long it runs: annotation [`ANNOTATION_DURATION`] (seconds such as `"1.5"`, a Go
//!   duration such as `"1m30s"`, or `"infinity"`), else the containers' commands: `sleep N`
//!   (GNU suffixes s/m/h/d, several operands add up, `infinity`), `sh -c "..."` scripts
//!   (sleeps add up, `exit N` sets the exit code, loops run forever, `false` exits 1), quick
//!   commands such as `echo`/`true` end at once; no command (the image's entrypoint) or an
//!   unknown program runs until deleted. The pod ends when its longest container ends.
//! - How it ends: exit code from annotation [`ANNOTATION_EXIT_CODE`], else from the script,
//!   else 0. Exit 0 → Succeeded (reason Completed), otherwise Failed (reason Error).
//!   `spec.activeDeadlineSeconds` kills it: Failed, reason DeadlineExceeded, exit 137. Under
//!   restartPolicy Always (or OnFailure with a non-zero code) containers restart in place
//!   instead, after a CrashLoopBackOff of 10 s doubling to 5 min: `restartCount` grows,
//!   `lastState` records the exit, the pod stays Running.
//! - Deletion (deletionTimestamp set): after min(grace period, remaining run) the pod is
//!   marked terminal (Failed with exit code 137 when killed, its natural result when it
//!   finished first) and then deleted with `gracePeriodSeconds=0` and a UID precondition.
//!   The grace period is `metadata.deletionGracePeriodSeconds`, else
//!   `spec.terminationGracePeriodSeconds`, else 30 s.

mod cadence;
mod heartbeat;
mod kubelet;
mod nodes;
mod runtime;
mod util;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

pub use cadence::grace_period_for;
pub use nodes::{NodeSpec, parse_nodes_yaml, standard_nodes};

/// Annotation giving a pod's run time (seconds, Go duration, or `infinity`).
pub const ANNOTATION_DURATION: &str = "kube-testenv/duration";
/// Annotation giving a pod's exit code when it ends on its own.
pub const ANNOTATION_EXIT_CODE: &str = "kube-testenv/exit-code";

/// Timing and concurrency of the agent; the defaults are a kubelet's, up to 500 nodes.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// How often each node's Lease is renewed at most (kubelet: 10 s).
    pub lease_renew_interval: Duration,
    /// `leaseDurationSeconds` of the node Leases (kubelet: 40).
    pub lease_duration_seconds: i32,
    /// How often the node conditions' `lastHeartbeatTime` is refreshed at most (default 60 s).
    pub status_update_interval: Duration,
    /// Lease renewals per second of all nodes together, above which the renewal period is
    /// stretched (default 50: kubelet's 10 s up to 500 nodes, 100 s at 5,000).
    pub lease_writes_per_second: f64,
    /// Status refreshes per second of all nodes together, above which their period is
    /// stretched (default 10: 60 s up to 600 nodes, 500 s at 5,000).
    pub status_writes_per_second: f64,
    /// The controller manager's `--node-monitor-grace-period` (default 50 s): a stretched
    /// Lease period stays within a quarter of it, so the nodes stay Ready.
    pub node_monitor_grace_period: Duration,
    /// How many API writes the kubelet, and the heartbeats, keep in flight.
    pub max_in_flight: usize,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            status_update_interval: Duration::from_secs(60),
            lease_writes_per_second: 50.0,
            status_writes_per_second: 10.0,
            node_monitor_grace_period: Duration::from_secs(50),
            max_in_flight: 64,
        }
    }
}

/// Why the agent could not start or register nodes.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A node spec is invalid, or listed twice.
    #[error("invalid node: {0}")]
    InvalidNode(String),
    /// A nodes file is malformed.
    #[error("nodes file: {0}")]
    NodesFile(String),
    /// An API call failed.
    #[error("{0}: {1}")]
    Api(String, #[source] kube::Error),
    /// The API server answered something the agent cannot use.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// The agent's tasks have ended.
    #[error("the agent has stopped")]
    Stopped,
}

/// The running agent: its tasks stop on [`AgentHandle::stop`] or when it is dropped.
pub struct AgentHandle {
    client: kube::Client,
    registered: mpsc::UnboundedSender<heartbeat::Command>,
    /// Registration order of every node ever added (fixes its IPs, kept across re-adds).
    indices: Arc<Mutex<HashMap<String, usize>>>,
    tasks: JoinSet<()>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes = self.indices.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("AgentHandle")
            .field("nodes_added", &nodes)
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

/// Start the kubelet and heartbeat tasks, then register `nodes` (see [`AgentHandle::add_nodes`]).
pub async fn start(
    client: kube::Client,
    nodes: Vec<NodeSpec>,
    opts: AgentOptions,
) -> Result<AgentHandle, AgentError> {
    let (kubelet_tx, kubelet_rx) = mpsc::unbounded_channel();
    let (registered_tx, registered_rx) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    tasks.spawn(kubelet::Kubelet::new(client.clone(), kubelet_rx, opts.max_in_flight).run());
    tasks.spawn(heartbeat::Heartbeat::new(client.clone(), opts, registered_rx, kubelet_tx).run());
    let handle = AgentHandle {
        client,
        registered: registered_tx,
        indices: Arc::new(Mutex::new(HashMap::new())),
        tasks,
    };
    handle.add_nodes(nodes).await?;
    Ok(handle)
}

impl AgentHandle {
    /// Register more nodes (or re-register ones, e.g. after their deletion) and serve them too.
    /// Missing capacities get the standard defaults; on error the nodes that registered are served.
    pub async fn add_nodes(&self, nodes: Vec<NodeSpec>) -> Result<(), AgentError> {
        let nodes: Vec<NodeSpec> = nodes.iter().map(NodeSpec::normalized).collect();
        nodes::check_nodes(&nodes).map_err(AgentError::InvalidNode)?;
        if self.registered.is_closed() {
            return Err(AgentError::Stopped);
        }
        let indexed: Vec<(NodeSpec, usize)> = {
            let mut indices = self.indices.lock().unwrap_or_else(|e| e.into_inner());
            nodes
                .into_iter()
                .map(|n| {
                    let next = indices.len();
                    let index = *indices.entry(n.name.clone()).or_insert(next);
                    (n, index)
                })
                .collect()
        };
        let count = indexed.len();
        let sem = Arc::new(Semaphore::new(32));
        let mut regs = JoinSet::new();
        for (spec, index) in indexed {
            let client = self.client.clone();
            let sem = sem.clone();
            regs.spawn(async move {
                let _permit = sem.acquire_owned().await;
                let r = nodes::register(&client, &spec, index).await;
                (spec.name, index, r)
            });
        }
        let mut first_err = None;
        while let Some(r) = regs.join_next().await {
            match r {
                Ok((name, index, Ok(reg))) => self
                    .registered
                    .send(heartbeat::Command::Register(heartbeat::Registered {
                        name,
                        uid: reg.uid,
                        index,
                        created: reg.created,
                    }))
                    .map_err(|_| AgentError::Stopped)?,
                Ok((_, _, Err(e))) => {
                    first_err.get_or_insert(e);
                }
                Err(e) => {
                    first_err.get_or_insert(AgentError::Unexpected(format!(
                        "node registration task: {e}"
                    )));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => {
                tracing::info!(nodes = count, "kube-testenv agent: nodes registered");
                Ok(())
            }
        }
    }

    /// Stop serving node `name` as if its kubelet died: its Lease and status are no longer
    /// renewed (the node lifecycle controller marks it NotReady, then taints it unreachable)
    /// and its pods stay as they are. `add_nodes` with the same node serves it again.
    pub fn lose_kubelet(&self, name: &str) -> Result<(), AgentError> {
        self.registered
            .send(heartbeat::Command::Lose(name.to_string()))
            .map_err(|_| AgentError::Stopped)
    }

    /// Stop the kubelet and heartbeats and wait until their tasks have ended.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}
