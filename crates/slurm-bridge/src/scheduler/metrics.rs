//! Prometheus metrics of the scheduler. The Slurm request metrics are
//! [`crate::slurm::SlurmMetrics`], shared by every component of the process.

use crate::k8s::writes::KubeWrites;
use crate::slurm::SlurmMetrics;
use crate::slurm::instrumented::RequestLabels;
use crate::sync::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The scheduler's metrics.
pub struct Metrics {
    pub pods_bound: Counter,
    pub jobs_submitted: Counter,
    /// Submits whose outcome was unknown (the answer lost), and passes that waited for the job
    /// watcher's listing before submitting such a group again.
    pub submits_in_doubt: Counter,
    pub submit_waits_for_listing: Counter,
    pub submit_to_allocation: Histogram,
    pub allocation_to_bound: Histogram,
    pub pending_groups: Gauge,
    /// Total Slurm requests of the process, for benchmarks (calls per pod): the counter of the
    /// shared client's [`SlurmMetrics`] when the scheduler runs on it.
    pub slurm_calls: Arc<AtomicU64>,
    /// Slurm requests by endpoint and outcome, for tests: the shared client's
    /// [`SlurmMetrics::requests`] (registered there, not here).
    pub slurm_requests: Family<RequestLabels, Counter>,
    /// Kubernetes writes by kind (`kube_writes_total{kind}`), for benchmarks and tests (writes
    /// per pod).
    pub kube_writes: KubeWrites,
    submitted_at: Mutex<HashMap<u32, Instant>>,
    allocated_at: Mutex<HashMap<u32, Instant>>,
}

/// The prefix of the scheduler's families.
const PREFIX: &str = "slurm_bridge_scheduler";

fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 16)
}

impl Metrics {
    /// Creates the metrics and registers them under `slurm_bridge_scheduler_`.
    pub fn new(registry: &mut Registry) -> Arc<Self> {
        Self::counting(registry, &SlurmMetrics::unregistered())
    }

    /// As [`Metrics::new`], reporting `slurm_calls` and `slurm_requests` from the Slurm client's
    /// own metrics.
    pub fn counting(registry: &mut Registry, slurm: &SlurmMetrics) -> Arc<Self> {
        let m = Metrics {
            pods_bound: Counter::default(),
            jobs_submitted: Counter::default(),
            submits_in_doubt: Counter::default(),
            submit_waits_for_listing: Counter::default(),
            submit_to_allocation: Histogram::new(latency_buckets()),
            allocation_to_bound: Histogram::new(latency_buckets()),
            pending_groups: Gauge::default(),
            slurm_calls: slurm.calls.clone(),
            slurm_requests: slurm.requests.clone(),
            kube_writes: KubeWrites::default(),
            submitted_at: Mutex::new(HashMap::new()),
            allocated_at: Mutex::new(HashMap::new()),
        };
        let r = registry.sub_registry_with_prefix(PREFIX);
        r.register("pods_bound", "Pods bound to a node", m.pods_bound.clone());
        r.register(
            "jobs_submitted",
            "External jobs submitted to Slurm",
            m.jobs_submitted.clone(),
        );
        r.register(
            "submits_in_doubt",
            "Submits that failed without a sure answer: Slurm may have made the job",
            m.submits_in_doubt.clone(),
        );
        r.register(
            "submit_waits_for_listing",
            "Passes that waited for Slurm's jobs to be listed before submitting a group whose last submit was in doubt",
            m.submit_waits_for_listing.clone(),
        );
        r.register(
            "submit_to_allocation_seconds",
            "From submitting an external job to seeing it allocated",
            m.submit_to_allocation.clone(),
        );
        r.register(
            "allocation_to_bound_seconds",
            "From seeing an allocation to the last pod of the group bound",
            m.allocation_to_bound.clone(),
        );
        r.register(
            "pending_groups",
            "Pod groups whose external job is pending in Slurm",
            m.pending_groups.clone(),
        );
        r.register(
            "kube_writes",
            "Kubernetes writes (pod patches, bindings, status patches, events) by kind",
            m.kube_writes.by_kind(),
        );
        Arc::new(m)
    }

    pub fn submit_waits_for_listing(&self) {
        self.submit_waits_for_listing.inc();
    }

    pub fn submitted(&self, job_id: u32) {
        self.jobs_submitted.inc();
        self.submitted_at.locked().insert(job_id, Instant::now());
    }

    /// How long ago this scheduler submitted `job_id`, while it is not yet allocated (None for a
    /// job submitted before a restart, or by another replica).
    pub fn submitted_ago(&self, job_id: u32) -> Option<std::time::Duration> {
        self.submitted_at
            .locked()
            .get(&job_id)
            .map(Instant::elapsed)
    }

    /// The watcher saw `job_id` allocated.
    pub fn allocated(&self, job_id: u32) {
        if let Some(t) = self.submitted_at.locked().remove(&job_id) {
            self.submit_to_allocation.observe(t.elapsed().as_secs_f64());
        }
        self.allocated_at
            .locked()
            .entry(job_id)
            .or_insert_with(Instant::now);
    }

    /// All pods of `job_id` are bound.
    pub fn group_bound(&self, job_id: u32, pods: u64) {
        self.pods_bound.inc_by(pods);
        if let Some(t) = self.allocated_at.locked().remove(&job_id) {
            self.allocation_to_bound.observe(t.elapsed().as_secs_f64());
        }
    }

    /// Stops timing a job that is over (cancelled while pending, or never bound).
    pub fn forget_job(&self, job_id: u32) {
        self.submitted_at.locked().remove(&job_id);
        self.allocated_at.locked().remove(&job_id);
    }

    /// Jobs being timed (submitted and not yet allocated, or allocated and not yet bound).
    pub fn timed_jobs(&self) -> usize {
        let submitted = self.submitted_at.locked();
        let allocated = self.allocated_at.locked();
        submitted
            .keys()
            .chain(allocated.keys())
            .collect::<HashSet<_>>()
            .len()
    }
}

/// Metrics of the scheduler's lifecycle (passes started, leadership), kept apart from [`Metrics`]
/// because they are read by the leadership loop, not by reconcile passes.
pub struct LifecycleMetrics {
    pub passes: Counter,
    /// How long each pass took, its binding stage included; its count is the passes ended.
    pub pass_duration: Histogram,
    pub leader: Gauge,
}

impl LifecycleMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = LifecycleMetrics {
            passes: Counter::default(),
            pass_duration: Histogram::new(latency_buckets()),
            leader: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix(PREFIX);
        r.register(
            "reconcile_passes",
            "Reconcile passes started",
            m.passes.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time from a reconcile pass's start to its end, its Bindings included",
            m.pass_duration.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads and its controller runs, else 0",
            m.leader.clone(),
        );
        m
    }
}
