//! The node controller's Kubernetes writes: the taint list, the Slurm-view condition, Events.

use super::slurm_view::{CONDITION_TYPE, View};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Field manager of the node controller's patches; also the Events' reporting controller.
pub const MANAGER: &str = "slinky.slurm.net/node-controller";
/// Namespace of Events about nodes (cluster-scoped objects), as kubelet does.
const EVENT_NAMESPACE: &str = "default";

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
        let now = k8s_openapi::jiff::Timestamp::now();
        let name = node.name_any();
        let mut note = note.to_string();
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let event = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{name}.{:x}", now.as_nanosecond()),
                "namespace": EVENT_NAMESPACE,
            },
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            "reportingController": MANAGER,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": if warning { "Warning" } else { "Normal" },
            "regarding": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node.uid(),
            },
        });
        let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), EVENT_NAMESPACE, &ar);
        let obj: DynamicObject = match serde_json::from_value(event) {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "encoding an event failed");
                return;
            }
        };
        if let Err(e) = api.create(&PostParams::default(), &obj).await {
            tracing::warn!(error = %e, node = %name, reason, "publishing an event failed");
        }
    }
}
