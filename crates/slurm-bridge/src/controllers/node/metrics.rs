//! Prometheus metrics of the node controller, under `slurm_bridge_controllers_`: nodes
//! registered, drained and removed, and reconcile counts, errors and durations with
//! `controller="node"`.
//!
//! The reconcile families are shared by every controller of a process: pass the controllers'
//! [`crate::controllers::metrics::ReconcileMetrics`] to [`NodeMetrics::with_reconcile`] so one
//! registry does not get them twice.

use crate::controllers::metrics::{ControllerMetrics, ReconcileMetrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

/// The node controller's metrics.
pub struct NodeMetrics {
    /// Kubernetes nodes registered in Slurm (created, including re-creations).
    pub nodes_registered: Counter,
    /// Slurm nodes drained by the bridge (cordon, removal, re-creation).
    pub nodes_drained: Counter,
    /// Slurm nodes removed by the bridge (label removed, re-creation).
    pub nodes_removed: Counter,
    reconcile: ReconcileMetrics,
}

/// Label value of the node controller in the reconcile families.
pub const CONTROLLER: &str = "node";

impl NodeMetrics {
    /// Counts and times one pass that started at `started`.
    pub fn observe(&self, started: Instant, ok: bool) {
        self.reconcile.observe(CONTROLLER, started, ok)
    }

    /// Creates the node metrics and registers them; passes are counted in `reconcile`, the
    /// controllers' shared families (already registered).
    pub fn with_reconcile(registry: &mut Registry, reconcile: ReconcileMetrics) -> Arc<Self> {
        let m = NodeMetrics {
            nodes_registered: Counter::default(),
            nodes_drained: Counter::default(),
            nodes_removed: Counter::default(),
            reconcile,
        };
        let r = registry.sub_registry_with_prefix(ControllerMetrics::PREFIX);
        r.register(
            "nodes_registered",
            "Kubernetes nodes registered in Slurm as external nodes",
            m.nodes_registered.clone(),
        );
        r.register(
            "nodes_drained",
            "Slurm nodes drained by the node controller",
            m.nodes_drained.clone(),
        );
        r.register(
            "nodes_removed",
            "Slurm nodes removed by the node controller",
            m.nodes_removed.clone(),
        );
        Arc::new(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_names() {
        let mut registry = Registry::default();
        let controllers = ControllerMetrics::new(&mut registry);
        let m = NodeMetrics::with_reconcile(&mut registry, controllers.reconcile.clone());
        m.nodes_registered.inc();
        m.observe(Instant::now(), false);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "slurm_bridge_controllers_nodes_registered_total 1",
            "slurm_bridge_controllers_nodes_drained_total 0",
            "slurm_bridge_controllers_nodes_removed_total 0",
            "slurm_bridge_controllers_reconciles_total{controller=\"node\"} 1",
            "slurm_bridge_controllers_reconcile_errors_total{controller=\"node\"} 1",
            "slurm_bridge_controllers_reconcile_duration_seconds_count{controller=\"node\"} 1",
        ] {
            assert!(text.contains(name), "{name} in\n{text}");
        }
    }
}
