//! The managed-node taint (reference §1.5): `slinky.slurm.net/managed-node=<scheduler>:NoExecute`
//! on every bridged node (its Slurm name is a Slurm node), on no other. Pure.

use crate::wellknown::{TAINT_EFFECT, TAINT_MANAGED_NODE, managed_node_taint};
use k8s_openapi::api::core::v1::Taint;

fn is_managed(t: &Taint) -> bool {
    t.key == TAINT_MANAGED_NODE && t.effect == TAINT_EFFECT
}

/// The node's new taint list, or `None` when it already is as it should be (no patch).
///
/// Bridged: "add or update": every taint with the managed key and effect NoExecute is replaced
/// by one with the scheduler's name as value. Not bridged: every such taint is removed, whatever
/// its value. Other taints are kept, in order.
pub fn desired_taints(
    current: &[Taint],
    bridged: bool,
    scheduler_name: &str,
) -> Option<Vec<Taint>> {
    let managed: Vec<&Taint> = current.iter().filter(|t| is_managed(t)).collect();
    let ok = if bridged {
        matches!(managed.as_slice(), [t] if t.value.as_deref() == Some(scheduler_name))
    } else {
        managed.is_empty()
    };
    if ok {
        return None;
    }
    let mut taints: Vec<Taint> = current.iter().filter(|t| !is_managed(t)).cloned().collect();
    if bridged {
        taints.push(managed_node_taint(scheduler_name));
    }
    Some(taints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(str::to_string),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn table() {
        let ours = t(TAINT_MANAGED_NODE, Some("sched"), "NoExecute");
        let other_value = t(TAINT_MANAGED_NODE, Some("old"), "NoExecute");
        let other_effect = t(TAINT_MANAGED_NODE, Some("sched"), "NoSchedule");
        let foreign = t("example.com/x", None, "NoSchedule");
        // (current, bridged, want)
        let cases: Vec<(Vec<Taint>, bool, Option<Vec<Taint>>)> = vec![
            // Already right: no patch.
            (vec![], false, None),
            (vec![foreign.clone()], false, None),
            (vec![foreign.clone(), ours.clone()], true, None),
            (vec![other_effect.clone()], false, None),
            // Added, keeping the others.
            (vec![], true, Some(vec![ours.clone()])),
            (
                vec![foreign.clone()],
                true,
                Some(vec![foreign.clone(), ours.clone()]),
            ),
            (
                vec![other_effect.clone()],
                true,
                Some(vec![other_effect.clone(), ours.clone()]),
            ),
            // Updated: another scheduler's value, or duplicates.
            (
                vec![other_value.clone(), foreign.clone()],
                true,
                Some(vec![foreign.clone(), ours.clone()]),
            ),
            (
                vec![ours.clone(), ours.clone()],
                true,
                Some(vec![ours.clone()]),
            ),
            // Removed, whatever the value.
            (
                vec![ours.clone(), foreign.clone()],
                false,
                Some(vec![foreign.clone()]),
            ),
            (
                vec![other_value.clone(), other_effect.clone()],
                false,
                Some(vec![other_effect.clone()]),
            ),
        ];
        for (current, bridged, want) in cases {
            assert_eq!(
                desired_taints(&current, bridged, "sched"),
                want,
                "{current:?} bridged={bridged}"
            );
        }
    }
}
