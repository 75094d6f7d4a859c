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
    /// Bumped on every node event, to invalidate cached placements.
    pub node_generation: Arc<std::sync::atomic::AtomicU64>,
    /// Placements by pod constraints, valid for one node generation and one Slurm node listing.
    pub placements: Mutex<PlacementCache>,
}

/// Cached node filtering: the filter runs once per distinct set of pod constraints, not per pod.
#[derive(Default)]
pub struct PlacementCache {
    valid_for: (u64, usize),
    entries: HashMap<u64, Arc<CachedPlacement>>,
}

/// A placement as the job description and the user message need it.
#[derive(Debug)]
pub struct CachedPlacement {
    pub feasible: usize,
    pub nodes: usize,
    /// `excluded_nodes` as one compressed host list (empty: nothing excluded).
    pub excluded: Vec<String>,
    /// Why nodes were rejected, for the pod's condition.
    pub rejections: String,
}

impl<S: Slurm> Ctx<S> {
    /// The placement for pods with these constraints, computed at most once per node
    /// generation and Slurm node listing.
    pub fn placement(&self, pods: &[k8s_openapi::api::core::v1::Pod]) -> Arc<CachedPlacement> {
        use super::feasibility::{constraints_key, place};
        let slurm_names = self.slurm_nodes.names();
        let valid_for = (
            self.node_generation.load(Ordering::Relaxed),
            Arc::as_ptr(&slurm_names) as usize,
        );
        let key = constraints_key(pods);
        {
            let mut cache = self.placements.lock().unwrap_or_else(|e| e.into_inner());
            if cache.valid_for != valid_for {
                cache.valid_for = valid_for;
                cache.entries.clear();
            }
            if let Some(p) = cache.entries.get(&key) {
                return p.clone();
            }
        }
        let nodes = self.nodes.state();
        let p = place(pods, &nodes, &slurm_names, &[self.writer.toleration()]);
        let cached = Arc::new(CachedPlacement {
            feasible: p.feasible.len(),
            nodes: nodes.len(),
            excluded: if p.excluded.is_empty() {
                Vec::new()
            } else {
                vec![slurm_rest::hostlist::compress(&p.excluded)]
            },
            rejections: p
                .rejections
                .iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect::<Vec<_>>()
                .join(", "),
        });
        let mut cache = self.placements.lock().unwrap_or_else(|e| e.into_inner());
        if cache.valid_for == valid_for {
            if cache.entries.len() > 4096 {
                cache.entries.clear();
            }
            cache.entries.insert(key, cached.clone());
        }
        cached
    }

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
