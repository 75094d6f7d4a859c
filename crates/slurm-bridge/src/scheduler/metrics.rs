//! Prometheus metrics of the scheduler, and a wrapper that measures every Slurm request.

use crate::slurm::JobControl;
use crate::slurm::{SlurmJobs, SlurmNodes};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry, Node};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Kubernetes writes (requests that create or change an object) made by the scheduler, by kind
/// (`pod_ops::write_kind`). A request counts when it is sent, whatever its outcome.
#[derive(Clone, Default)]
pub struct KubeWrites {
    by_kind: Family<KindLabels, Counter>,
    total: Arc<AtomicU64>,
}

impl KubeWrites {
    /// Counts one write of `kind`.
    pub fn inc(&self, kind: &'static str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.by_kind.get_or_create(&KindLabels { kind }).inc();
    }

    /// The counters by kind, to register.
    pub fn by_kind(&self) -> Family<KindLabels, Counter> {
        self.by_kind.clone()
    }

    /// All writes so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Writes of `kind` so far.
    pub fn of(&self, kind: &'static str) -> u64 {
        self.by_kind.get_or_create(&KindLabels { kind }).get()
    }
}

/// The scheduler's metrics.
pub struct Metrics {
    pub pods_bound: Counter,
    pub jobs_submitted: Counter,
    pub submit_to_allocation: Histogram,
    pub allocation_to_bound: Histogram,
    pub slurm_requests: Family<RequestLabels, Counter>,
    pub slurm_request_seconds: Family<EndpointLabels, Histogram>,
    pub pending_groups: Gauge,
    /// Total Slurm requests, for benchmarks (calls per pod).
    pub slurm_calls: AtomicU64,
    /// Kubernetes writes by kind (`kube_writes_total{kind}`), for benchmarks and tests (writes
    /// per pod).
    pub kube_writes: KubeWrites,
    submitted_at: Mutex<HashMap<u32, Instant>>,
    allocated_at: Mutex<HashMap<u32, Instant>>,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 16)
}

impl Metrics {
    /// Creates the metrics and registers them under `slurm_bridge_scheduler_`.
    pub fn new(registry: &mut Registry) -> Arc<Self> {
        let m = Metrics {
            pods_bound: Counter::default(),
            jobs_submitted: Counter::default(),
            submit_to_allocation: Histogram::new(latency_buckets()),
            allocation_to_bound: Histogram::new(latency_buckets()),
            slurm_requests: Family::default(),
            slurm_request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            pending_groups: Gauge::default(),
            slurm_calls: AtomicU64::new(0),
            kube_writes: KubeWrites::default(),
            submitted_at: Mutex::new(HashMap::new()),
            allocated_at: Mutex::new(HashMap::new()),
        };
        let r = registry.sub_registry_with_prefix("slurm_bridge_scheduler");
        r.register("pods_bound", "Pods bound to a node", m.pods_bound.clone());
        r.register(
            "jobs_submitted",
            "External jobs submitted to Slurm",
            m.jobs_submitted.clone(),
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
            "slurm_requests",
            "Slurm REST requests by endpoint and outcome",
            m.slurm_requests.clone(),
        );
        r.register(
            "slurm_request_seconds",
            "Slurm REST request latency by endpoint",
            m.slurm_request_seconds.clone(),
        );
        r.register(
            "pending_groups",
            "Pod groups whose external job is pending in Slurm",
            m.pending_groups.clone(),
        );
        r.register(
            "kube_writes",
            "Kubernetes writes (pod patches, bindings, status patches, events) by kind",
            m.kube_writes.by_kind.clone(),
        );
        Arc::new(m)
    }

    pub fn submitted(&self, job_id: u32) {
        self.jobs_submitted.inc();
        self.submitted_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(job_id, Instant::now());
    }

    /// How long ago this scheduler submitted `job_id`, while it is not yet allocated (None for a
    /// job submitted before a restart, or by another replica).
    pub fn submitted_ago(&self, job_id: u32) -> Option<std::time::Duration> {
        self.submitted_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&job_id)
            .map(Instant::elapsed)
    }

    /// The watcher saw `job_id` allocated.
    pub fn allocated(&self, job_id: u32) {
        if let Some(t) = self
            .submitted_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job_id)
        {
            self.submit_to_allocation.observe(t.elapsed().as_secs_f64());
        }
        self.allocated_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(job_id)
            .or_insert_with(Instant::now);
    }

    /// All pods of `job_id` are bound.
    pub fn group_bound(&self, job_id: u32, pods: u64) {
        self.pods_bound.inc_by(pods);
        if let Some(t) = self
            .allocated_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job_id)
        {
            self.allocation_to_bound.observe(t.elapsed().as_secs_f64());
        }
    }

    /// Stops timing a job that is over (cancelled while pending, or never bound).
    pub fn forget_job(&self, job_id: u32) {
        self.submitted_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job_id);
        self.allocated_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job_id);
    }

    /// Jobs being timed (submitted and not yet allocated, or allocated and not yet bound).
    pub fn timed_jobs(&self) -> usize {
        let submitted = self.submitted_at.lock().unwrap_or_else(|e| e.into_inner());
        let allocated = self.allocated_at.lock().unwrap_or_else(|e| e.into_inner());
        submitted
            .keys()
            .chain(allocated.keys())
            .collect::<HashSet<_>>()
            .len()
    }

    fn observe<T>(
        &self,
        endpoint: &'static str,
        started: Instant,
        result: &Result<T, slurm_rest::Error>,
    ) {
        self.slurm_calls.fetch_add(1, Ordering::Relaxed);
        self.slurm_request_seconds
            .get_or_create(&EndpointLabels { endpoint })
            .observe(started.elapsed().as_secs_f64());
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) if e.is_transient() => "unavailable",
            Err(_) => "error",
        };
        self.slurm_requests
            .get_or_create(&RequestLabels { endpoint, outcome })
            .inc();
    }
}

/// Wraps a Slurm implementation and measures every request it makes.
pub struct Instrumented<S> {
    pub inner: S,
    pub metrics: Arc<Metrics>,
}

macro_rules! measured {
    ($self:ident, $endpoint:literal, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        $self.metrics.observe($endpoint, started, &result);
        result
    }};
}

impl<S: JobControl> JobControl for Instrumented<S> {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        measured!(self, "job_submit", self.inner.submit(desc))
    }
    async fn update(&self, job_id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        measured!(self, "job_update", self.inner.update(job_id, desc))
    }
    async fn cancel(&self, job_id: u32) -> Result<(), slurm_rest::Error> {
        measured!(self, "job_cancel", self.inner.cancel(job_id))
    }
}

impl<S: SlurmJobs> SlurmJobs for Instrumented<S> {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        measured!(self, "jobs", self.inner.list_jobs())
    }
    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        measured!(self, "jobs_state", self.inner.job_states())
    }
    async fn job(&self, job_id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        measured!(self, "job", self.inner.job(job_id))
    }
    async fn job_resources(
        &self,
        job_id: u32,
    ) -> Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error> {
        measured!(self, "job_resources", self.inner.job_resources(job_id))
    }
}

impl<S: SlurmNodes> SlurmNodes for Instrumented<S> {
    async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
        measured!(self, "nodes", self.inner.list_nodes())
    }
}

impl<S: crate::slurm::NodeControl> crate::slurm::NodeControl for Instrumented<S> {
    async fn node(&self, name: &str) -> Result<Option<Node>, slurm_rest::Error> {
        measured!(self, "node", self.inner.node(name))
    }
    async fn create_node(&self, node_conf: &str) -> Result<(), slurm_rest::Error> {
        measured!(self, "node_create", self.inner.create_node(node_conf))
    }
    async fn update_node(
        &self,
        name: &str,
        update: &slurm_rest::models::UpdateNodeMsg,
    ) -> Result<(), slurm_rest::Error> {
        measured!(self, "node_update", self.inner.update_node(name, update))
    }
    async fn delete_node(&self, name: &str) -> Result<(), slurm_rest::Error> {
        measured!(self, "node_delete", self.inner.delete_node(name))
    }
    async fn partition_exists(&self, name: &str) -> Result<bool, slurm_rest::Error> {
        measured!(self, "partition", self.inner.partition_exists(name))
    }
    async fn partition_names(&self) -> Result<Vec<String>, slurm_rest::Error> {
        measured!(self, "partitions", self.inner.partition_names())
    }
}

/// Metrics of the scheduler's lifecycle (passes started, leadership), kept apart from [`Metrics`]
/// because they are read by the leadership loop, not by reconcile passes.
pub struct LifecycleMetrics {
    pub passes: Counter,
    pub leader: Gauge,
}

impl LifecycleMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = LifecycleMetrics {
            passes: Counter::default(),
            leader: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("slurm_bridge_scheduler");
        r.register(
            "reconcile_passes",
            "Reconcile passes started",
            m.passes.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads and its controller runs, else 0",
            m.leader.clone(),
        );
        m
    }
}
