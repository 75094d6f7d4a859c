//! What every reconcile shares: config, clients, caches, the job watcher, locks.

use super::locks::GroupLocks;
use super::metrics::Metrics;
use super::pod_ops::PodWriter;
use super::slurm_ops::SchedulerSlurm;
use crate::config::Config;
use crate::slurm::{JobWatcher, SlurmJobs, SlurmNodeCache, SlurmNodes};
use crate::workload::kube_reader::KubeReader;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Everything Slurm the scheduler needs; `slurm_rest::Client` implements it.
pub trait Slurm: SchedulerSlurm + SlurmJobs + SlurmNodes {}
impl<T: SchedulerSlurm + SlurmJobs + SlurmNodes> Slurm for T {}

/// Shared state of the scheduler.
pub struct Ctx<S> {
    pub config: Config,
    pub client: kube::Client,
    pub slurm: Arc<S>,
    pub watcher: Arc<JobWatcher<S>>,
    pub slurm_nodes: Arc<SlurmNodeCache<S>>,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub reader: KubeReader,
    pub writer: PodWriter,
    pub locks: GroupLocks,
    pub metrics: Arc<Metrics>,
    /// Hash of the job description last sent for each job, to update a pending job only when
    /// something changed.
    pub sent: Mutex<HashMap<u32, u64>>,
    /// Consecutive failures per pod, for backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// True while this replica holds the leader lease (always, without leader election).
    pub leader: AtomicBool,
}

impl<S: Slurm> Ctx<S> {
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Exponential backoff per pod: 0.5 s, 1 s, 2 s ... capped at 15 s.
    pub fn backoff(&self, pod: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(pod.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let ms = 500u64.saturating_mul(1 << (*n - 1).min(5));
        Duration::from_millis(ms.min(15_000))
    }

    pub fn succeeded(&self, pod: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod);
    }
}
