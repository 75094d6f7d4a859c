//! Slurm's view on the Kubernetes node (beyond the reference): while Slurm will not run jobs on
//! a bridged node for a reason that is not the bridge's own (an admin drained it, or it is DOWN
//! or FAILing), the node carries the condition `SlurmNodeUnavailable=True` with Slurm's state
//! and reason, and an Event says so; the condition goes (and a Normal Event says so) when Slurm
//! resumes the node. The bridge's own drains (cordon, removal) show no condition: the cordon or
//! the removal is already visible on the node.
//!
//! The condition follows the node-condition convention of "True means a problem"
//! (like `NetworkUnavailable`). Reasons: `SlurmNodeDrained`, `SlurmNodeDown`, `SlurmNodeFail`.
//! Message: `Slurm node <name> is <STATE+FLAGS>: <reason> (set by <user>)`.

use super::drain::drained_by_admin;
use k8s_openapi::api::core::v1::NodeCondition;
use slurm_rest::models::{Node as SlurmNode, NodeState};

/// Type of the node condition.
pub const CONDITION_TYPE: &str = "SlurmNodeUnavailable";
/// Event reason when the condition goes.
pub const REASON_RESUMED: &str = "SlurmNodeResumed";

/// What the condition should say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Condition (and Event) reason.
    pub reason: &'static str,
    /// Condition message (and Event note).
    pub message: String,
}

/// The condition a bridged node should carry; `None` for no condition (also for a Kubernetes
/// node without a Slurm node).
pub fn view(slurm: Option<&SlurmNode>) -> Option<View> {
    let n = slurm?;
    let reason = if n.has_state(&NodeState::Down) {
        "SlurmNodeDown"
    } else if n.has_state(&NodeState::Fail) {
        "SlurmNodeFail"
    } else if drained_by_admin(n) {
        "SlurmNodeDrained"
    } else {
        return None;
    };
    let states: Vec<&str> = n.state.iter().map(|s| s.as_str()).collect();
    let mut message = format!("Slurm node {} is {}", n.name, states.join("+"));
    match n.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => message.push_str(&format!(": {r}")),
        None => message.push_str(" (no reason given)"),
    }
    if let Some(user) = n.reason_set_by_user.as_deref().filter(|u| !u.is_empty()) {
        message.push_str(&format!(" (set by {user})"));
    }
    Some(View { reason, message })
}

/// How the node's condition must change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConditionChange {
    /// It already says what it should.
    Keep,
    /// Write it; `transition` when it was absent (or not True) before, so
    /// `lastTransitionTime` moves.
    Set { view: View, transition: bool },
    /// Remove it.
    Remove,
}

/// The change from the node's `current` condition of [`CONDITION_TYPE`] to `want`.
pub fn diff(current: Option<&NodeCondition>, want: Option<View>) -> ConditionChange {
    match (current, want) {
        (None, None) => ConditionChange::Keep,
        (Some(_), None) => ConditionChange::Remove,
        (Some(c), Some(v))
            if c.status == "True"
                && c.reason.as_deref() == Some(v.reason)
                && c.message.as_deref() == Some(v.message.as_str()) =>
        {
            ConditionChange::Keep
        }
        (c, Some(view)) => ConditionChange::Set {
            transition: c.is_none_or(|c| c.status != "True"),
            view,
        },
    }
}

/// The node's condition of [`CONDITION_TYPE`], if any.
pub fn current(node: &k8s_openapi::api::core::v1::Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION_TYPE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState::*;

    fn node(states: &[NodeState], reason: Option<&str>) -> SlurmNode {
        SlurmNode {
            name: "s1".into(),
            state: states.to_vec(),
            reason: reason.map(str::to_string),
            reason_set_by_user: reason.map(|_| "root".to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn view_table() {
        type Case = (Option<SlurmNode>, Option<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (None, None),
            (Some(node(&[Idle, External], None)), None),
            (Some(node(&[Allocated, External], None)), None),
            // The bridge's own drains show nothing.
            (
                Some(node(&[Idle, Drain], Some("slurm-bridge: cordoned"))),
                None,
            ),
            (
                Some(node(&[Idle, External, Drain], Some("maintenance"))),
                Some((
                    "SlurmNodeDrained",
                    "Slurm node s1 is IDLE+EXTERNAL+DRAIN: maintenance (set by root)",
                )),
            ),
            (
                Some(node(&[Mixed, Drain], Some("disk"))),
                Some((
                    "SlurmNodeDrained",
                    "Slurm node s1 is MIXED+DRAIN: disk (set by root)",
                )),
            ),
            (
                Some(node(&[Down, External], Some("broken"))),
                Some((
                    "SlurmNodeDown",
                    "Slurm node s1 is DOWN+EXTERNAL: broken (set by root)",
                )),
            ),
            (
                Some(node(&[Idle, Fail], None)),
                Some((
                    "SlurmNodeFail",
                    "Slurm node s1 is IDLE+FAIL (no reason given)",
                )),
            ),
            (
                Some(node(&[Idle, Drain, Undrain], Some("maintenance"))),
                None,
            ),
        ];
        for (n, want) in cases {
            let got = view(n.as_ref());
            assert_eq!(
                got.as_ref().map(|v| (v.reason, v.message.as_str())),
                want,
                "{n:?}"
            );
        }
    }

    fn cond(status: &str, reason: &str, message: &str) -> NodeCondition {
        NodeCondition {
            type_: CONDITION_TYPE.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    #[test]
    fn diff_table() {
        let v = View {
            reason: "SlurmNodeDrained",
            message: "m".into(),
        };
        let set = |transition| ConditionChange::Set {
            view: v.clone(),
            transition,
        };
        let cases: Vec<(Option<NodeCondition>, Option<View>, ConditionChange)> = vec![
            (None, None, ConditionChange::Keep),
            (None, Some(v.clone()), set(true)),
            (
                Some(cond("True", "SlurmNodeDrained", "m")),
                Some(v.clone()),
                ConditionChange::Keep,
            ),
            (
                Some(cond("True", "SlurmNodeDrained", "other")),
                Some(v.clone()),
                set(false),
            ),
            (
                Some(cond("True", "SlurmNodeDown", "m")),
                Some(v.clone()),
                set(false),
            ),
            (
                Some(cond("False", "SlurmNodeDrained", "m")),
                Some(v.clone()),
                set(true),
            ),
            (
                Some(cond("True", "SlurmNodeDrained", "m")),
                None,
                ConditionChange::Remove,
            ),
        ];
        for (c, want_view, want) in cases {
            assert_eq!(diff(c.as_ref(), want_view), want, "{c:?}");
        }
    }
}
