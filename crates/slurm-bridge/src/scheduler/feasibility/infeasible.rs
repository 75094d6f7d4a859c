//! Why a node is not feasible for a pod, as the pod's condition message shows it.

use crate::resources::Quantity;

/// Why a node is not feasible for a pod (shown to users in the pod's condition message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Infeasible {
    NotReady,
    Unschedulable,
    UntoleratedTaint(String),
    NodeSelector,
    NodeAffinity,
    /// The node's allocatable cannot hold the pod's requests (one entry per resource short).
    Insufficient(Vec<Shortfall>),
}

/// A resource a node's allocatable cannot hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    pub resource: String,
    /// The pod's effective request.
    pub requested: Quantity,
    /// The node's allocatable (zero when the node does not advertise the resource).
    pub allocatable: Quantity,
}

impl std::fmt::Display for Infeasible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Infeasible::NotReady => write!(f, "node is not Ready"),
            Infeasible::Unschedulable => write!(f, "node is unschedulable (cordoned)"),
            Infeasible::UntoleratedTaint(t) => write!(f, "untolerated taint {t}"),
            Infeasible::NodeSelector => write!(f, "node does not match the pod's nodeSelector"),
            Infeasible::NodeAffinity => {
                write!(f, "node does not match the pod's required node affinity")
            }
            Infeasible::Insufficient(short) => {
                for (i, s) in short.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}Insufficient {}", s.resource)?;
                }
                Ok(())
            }
        }
    }
}

/// A quantity for users: byte counts (memory, ephemeral-storage, hugepages) with the shortest
/// exact suffix (`16000Mi`, `20Gi`, `100M`), anything else as Kubernetes writes it.
pub(super) fn show(resource: &str, q: Quantity) -> String {
    let bytes = resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-");
    let Some(n) = q.as_integer().filter(|n| bytes && *n > 0) else {
        return q.to_string();
    };
    let mut best = n.to_string();
    for (base, suffixes) in [
        (1024i128, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
        (1000i128, ["k", "M", "G", "T", "P", "E"]),
    ] {
        let mut scale = 1i128;
        for suffix in suffixes {
            scale *= base;
            if n % scale == 0 {
                let text = format!("{}{suffix}", n / scale);
                if text.len() < best.len() {
                    best = text;
                }
            }
        }
    }
    best
}
