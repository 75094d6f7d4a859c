//! A wrapper around any Slurm implementation that counts and times every request, and the
//! metrics it records. Every component of a process talks to Slurm through one such wrapper
//! (the shared caches hold it), so the figures cover the whole process.

use super::{JobControl, NodeControl, SlurmJobs, SlurmNodes};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry, Node, NodeListing};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Labels of the latency histogram: the REST endpoint (`job_submit`, `jobs_state`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

/// Labels of the request counter: the endpoint and `ok`, `unavailable` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub outcome: &'static str,
}

/// Slurm REST requests by endpoint and outcome, and their latency.
pub struct SlurmMetrics {
    /// `slurm_requests_total{endpoint,outcome}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `slurm_request_seconds{endpoint}`.
    pub request_seconds: Family<EndpointLabels, Histogram>,
    /// Total Slurm requests, for benchmarks (calls per pod); shared with the scheduler's
    /// metrics, which report it too.
    pub calls: Arc<AtomicU64>,
}

impl SlurmMetrics {
    /// The prefix the families are registered under. It still says `scheduler`: the names
    /// predate the controllers and dashboards read them (docs/operations.md).
    pub const PREFIX: &'static str = "slurm_bridge_scheduler";

    /// Metrics registered nowhere (a scheduler's [`crate::scheduler::metrics::Metrics`] made
    /// without a client of its own).
    pub fn unregistered() -> Self {
        SlurmMetrics {
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            calls: Default::default(),
        }
    }

    /// Creates the metrics and registers them under [`SlurmMetrics::PREFIX`].
    pub fn new(registry: &mut Registry) -> Arc<Self> {
        let m = Self::unregistered();
        let r = registry.sub_registry_with_prefix(Self::PREFIX);
        r.register(
            "slurm_requests",
            "Slurm REST requests by endpoint and outcome",
            m.requests.clone(),
        );
        r.register(
            "slurm_request_seconds",
            "Slurm REST request latency by endpoint",
            m.request_seconds.clone(),
        );
        Arc::new(m)
    }

    fn observe<T>(
        &self,
        endpoint: &'static str,
        started: Instant,
        result: &Result<T, slurm_rest::Error>,
    ) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.request_seconds
            .get_or_create(&EndpointLabels { endpoint })
            .observe(started.elapsed().as_secs_f64());
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) if e.is_transient() => "unavailable",
            Err(_) => "error",
        };
        self.requests
            .get_or_create(&RequestLabels { endpoint, outcome })
            .inc();
    }
}

/// Wraps a Slurm implementation and measures every request it makes.
pub struct Instrumented<S> {
    /// The client whose requests are measured.
    pub inner: S,
    /// Where they are counted.
    pub metrics: Arc<SlurmMetrics>,
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, registering the request metrics in `registry`.
    pub fn new(inner: S, registry: &mut Registry) -> Self {
        Instrumented {
            inner,
            metrics: SlurmMetrics::new(registry),
        }
    }
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
    async fn job_states_of(
        &self,
        job_ids: &[u32],
    ) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        measured!(self, "jobs_state_of", self.inner.job_states_of(job_ids))
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
    async fn list_nodes_since(&self, since: Option<u64>) -> Result<NodeListing, slurm_rest::Error> {
        let started = Instant::now();
        let result = self.inner.list_nodes_since(since).await;
        // Unchanged answers cost Slurm next to nothing: counted apart, so `nodes` stays the
        // count of whole listings.
        let endpoint = match result {
            Ok(NodeListing::Unchanged) => "nodes_unchanged",
            _ => "nodes",
        };
        self.metrics.observe(endpoint, started, &result);
        result
    }
}

impl<S: NodeControl> NodeControl for Instrumented<S> {
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
