//! Prometheus metrics of the controllers: reconciles per controller, pods removed and jobs
//! cancelled by cause.

use crate::k8s::writes::KubeWrites;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: &'static str,
}

/// Reconcile counts, errors and durations, by controller (`pod`, `node`).
#[derive(Clone)]
pub struct ReconcileMetrics {
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    durations: Family<ControllerLabels, Histogram>,
}

impl ReconcileMetrics {
    /// Creates the families and registers them in `registry` (already prefixed).
    pub fn register(registry: &mut Registry) -> Self {
        let m = ReconcileMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            durations: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
        };
        registry.register(
            "reconciles",
            "Reconcile passes, by controller",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile passes that failed (retried with backoff), by controller",
            m.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time of a reconcile pass, by controller",
            m.durations.clone(),
        );
        m
    }

    /// Counts and times one pass of `controller` that started at `started`.
    pub fn observe(&self, controller: &'static str, started: Instant, ok: bool) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
        self.durations
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }

    /// Passes of `controller` so far.
    pub fn reconciles(&self, controller: &'static str) -> u64 {
        self.reconciles
            .get_or_create(&ControllerLabels { controller })
            .get()
    }
}

/// The controllers' metrics (`slurm_bridge_controllers_*`).
pub struct ControllerMetrics {
    pub reconcile: ReconcileMetrics,
    /// Bound pods removed because their job is not running, by cause.
    pub pods_removed: Family<CauseLabels, Counter>,
    /// Jobs cancelled because their pods finished, were deleted or lost their node, by cause.
    pub jobs_cancelled: Family<CauseLabels, Counter>,
    /// Kubernetes writes, by kind.
    pub kube_writes: KubeWrites,
}

impl ControllerMetrics {
    pub const PREFIX: &'static str = "slurm_bridge_controllers";

    pub fn new(registry: &mut Registry) -> Arc<Self> {
        let r = registry.sub_registry_with_prefix(Self::PREFIX);
        let m = ControllerMetrics {
            reconcile: ReconcileMetrics::register(r),
            pods_removed: Family::default(),
            jobs_cancelled: Family::default(),
            kube_writes: KubeWrites::default(),
        };
        r.register(
            "pods_removed",
            "Bound pods removed because their Slurm job is not running, by cause",
            m.pods_removed.clone(),
        );
        r.register(
            "jobs_cancelled",
            "Slurm jobs cancelled because their pods finished, were deleted or lost their node, by cause",
            m.jobs_cancelled.clone(),
        );
        r.register(
            "kube_writes",
            "Kubernetes writes of the controllers, by kind",
            m.kube_writes.by_kind(),
        );
        Arc::new(m)
    }

    pub fn pod_removed(&self, cause: &'static str) {
        self.pods_removed
            .get_or_create(&CauseLabels { cause })
            .inc();
    }

    pub fn job_cancelled(&self, cause: &'static str) {
        self.jobs_cancelled
            .get_or_create(&CauseLabels { cause })
            .inc();
    }
}
