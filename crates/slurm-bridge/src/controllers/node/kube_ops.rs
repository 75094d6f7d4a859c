//! The node controller's Kubernetes writes: the taint list, the Slurm-view condition, Events.

use super::slurm_view::{CONDITION_TYPE, View};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Field manager of the node controller's patches; also the Events' reporting controller.
pub const MANAGER: &str = "slinky.slurm.net/node-controller";

/// Writes to Nodes and Events.
#[derive(Clone)]
pub struct NodeWriter {
    client: Client,
    instance: String,
}

impl NodeWriter {
    pub fn new(client: Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "slurm-bridge".to_string());
        NodeWriter { client, instance }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Replaces the node's taints, on the version the list was computed from (another writer's
    /// change in between, such as the node lifecycle controller's `not-ready` taint, makes it a
    /// 409 Conflict and the pass is retried on the new version).
    pub async fn set_taints(&self, node: &Node, taints: &[Taint]) -> Result<(), kube::Error> {
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": taints},
        });
        self.nodes()
            .patch(
                &node.name_any(),
                &PatchParams::apply(MANAGER),
                &Patch::Merge(&patch),
            )
            .await
            .map(drop)
    }

    /// Sets the Slurm-view condition (only that condition: conditions merge by type).
    pub async fn set_condition(
        &self,
        node: &Node,
        view: &View,
        transition: bool,
    ) -> Result<(), kube::Error> {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut cond = json!({
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": view.reason,
            "message": view.message,
            "lastHeartbeatTime": now,
        });
        if transition {
            cond["lastTransitionTime"] = json!(now);
        }
        self.patch_conditions(node, cond).await
    }

    /// Removes the Slurm-view condition (only that one).
    pub async fn remove_condition(&self, node: &Node) -> Result<(), kube::Error> {
        self.patch_conditions(node, json!({"type": CONDITION_TYPE, "$patch": "delete"}))
            .await
    }

    async fn patch_conditions(
        &self,
        node: &Node,
        cond: serde_json::Value,
    ) -> Result<(), kube::Error> {
        let patch = json!({"status": {"conditions": [cond]}});
        self.nodes()
            .patch_status(
                &node.name_any(),
                &PatchParams::apply(MANAGER),
                &Patch::Strategic(&patch),
            )
            .await
            .map(drop)
    }

    /// Records an `events.k8s.io/v1` Event about the node; failures are logged, never fatal.
    pub async fn event(&self, node: &Node, warning: bool, reason: &str, action: &str, note: &str) {
        let reporter = crate::k8s::events::Reporter {
            controller: MANAGER.to_string(),
            instance: self.instance.clone(),
        };
        let what = crate::k8s::events::Note {
            warning,
            action,
            reason,
            note: note.to_string(),
        };
        crate::k8s::events::publish(&self.client, &reporter, node, what).await;
    }
}
