//! Counting of Kubernetes writes by kind: the figure the performance targets are stated in
//! (writes per bound pod). The scheduler and the controllers each count their own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds of Kubernetes writes (`slurm_bridge_scheduler_kube_writes_total{kind}`).
pub mod write_kind {
    /// Pod patch: job id label, finalizer, toleration (and clearing a stale node annotation).
    pub const LABEL: &str = "label";
    /// Pod patch: job id label and node annotation removed (the job was cancelled).
    pub const UNLABEL: &str = "unlabel";
    /// Pod patch: the bridge finalizer removed from a deleted pod.
    pub const FINALIZER: &str = "finalizer";
    /// pods/binding, carrying the node annotation.
    pub const BINDING: &str = "binding";
    /// pods/status patch: PodScheduled=False with a reason.
    pub const CONDITION: &str = "condition";
    /// events.k8s.io Event.
    pub const EVENT: &str = "event";
    /// PodGroup status patch: PodGroupScheduled=True.
    pub const PODGROUP: &str = "podgroup";
}

/// Labels of the write counter: the [`write_kind`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Kubernetes writes (requests that create or change an object) made by one component, by kind
/// ([`write_kind`]). A request counts when it is sent, whatever its outcome.
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
