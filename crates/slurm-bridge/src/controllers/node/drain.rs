//! Slurm node state predicates and the one decision a pass makes about a Slurm node's state:
//! drain, undrain, delete, or leave it.
//!
//! The reference drained a node for removal in one step and undrained it for a schedulable
//! Kubernetes node in the next step of the same pass (quirk 6), so a busy node being removed
//! flip-flopped and was only removed if idle at the moment of the check. Here both wishes go
//! into [`decide`], which drains while a removal or re-creation is pending and resumes only when
//! neither it nor a cordon asks for the drain: every pass computes the same answer from the same
//! state, so a drain made for removal is never undone while the removal stands.

use slurm_rest::models::{Node as SlurmNode, NodeState};

/// Every drain reason the bridge writes starts with this; drains without it are an admin's.
pub const REASON_MARK: &str = "slurm-bridge:";

/// Slurm reports the node as external (created by the REST API, no slurmd).
pub fn is_external(n: &SlurmNode) -> bool {
    n.has_state(&NodeState::External)
}

/// DRAIN is set (and not being lifted).
pub fn is_drain(n: &SlurmNode) -> bool {
    n.has_state(&NodeState::Drain) && !n.has_state(&NodeState::Undrain)
}

/// Jobs still hold (part of) the node.
pub fn is_busy(n: &SlurmNode) -> bool {
    n.has_state(&NodeState::Allocated)
        || n.has_state(&NodeState::Mixed)
        || n.has_state(&NodeState::Completing)
}

/// Drained and idle: no job runs on it and none will start.
pub fn is_drained(n: &SlurmNode) -> bool {
    is_drain(n) && !is_busy(n)
}

/// The reason was written by the bridge (this one or the Go original, whose reasons read
/// `slurm-bridge: slurm-bridge: ...`).
pub fn reason_is_ours(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.contains(REASON_MARK))
}

/// Drained by an admin (or anything but the bridge): never undone by the bridge.
pub fn drained_by_admin(n: &SlurmNode) -> bool {
    is_drain(n) && !reason_is_ours(n.reason.as_deref())
}

/// Why the Slurm node is to go away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The external-node label was removed from the Kubernetes node.
    LabelRemoved,
    /// CPUs, memory or GRES changed: drained, deleted once idle, then registered again.
    Recreate(Vec<String>),
    /// The Kubernetes node (named here) is gone: drained, deleted once idle.
    NodeDeleted(String),
}

/// The drain reason of a removal.
pub fn removal_reason(slurm_name: &str, removal: &Removal) -> String {
    match removal {
        Removal::LabelRemoved => format!("{REASON_MARK} removing external node {slurm_name}"),
        Removal::Recreate(why) => format!(
            "{REASON_MARK} re-creating external node {slurm_name} ({})",
            why.join(", ")
        ),
        Removal::NodeDeleted(kube) => format!(
            "{REASON_MARK} removing external node {slurm_name}: Kubernetes node {kube} is gone"
        ),
    }
}

/// The drain reason of a cordon (the reference's text, with the mark once).
pub fn cordon_reason(kube_name: &str) -> String {
    format!("{REASON_MARK} Corresponding Kubernetes node ({kube_name}) is unschedulable")
}

/// How many held pods a state-loss drain reason names before `+N more`.
const LOST_REASON_PODS: usize = 3;

/// The drain reason of a node hosting pods whose Slurm jobs Slurm lost (state-loss hold,
/// [`crate::controllers::state_loss`]): `held` are the pods (`ns/name`), sorted.
pub fn lost_reason(held: &[String]) -> String {
    let mut named = held
        .iter()
        .take(LOST_REASON_PODS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if held.len() > LOST_REASON_PODS {
        named.push_str(&format!(", +{} more", held.len() - LOST_REASON_PODS));
    }
    format!("{REASON_MARK} Slurm lost the jobs of running pods ({named})")
}

/// What a pass does to the Slurm node's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateAction {
    /// Nothing to change.
    Nothing,
    /// Set DRAIN with this reason.
    Drain(String),
    /// Lift the bridge's own DRAIN.
    Undrain,
    /// Drained and idle, to be removed: delete it (and register it again for a re-creation).
    Delete,
    /// A removal waits for the jobs on the node to end (the listing reports when).
    WaitIdle,
    /// A re-creation waits for an admin's drain to be lifted: re-creating would drop it.
    WaitAdmin,
}

/// The state decision for a Slurm node: `unschedulable` is the Kubernetes node's cordon,
/// `removal` a pending removal or re-creation, `held` the pods on the Kubernetes node kept
/// though Slurm lost their jobs (state-loss hold): while there are any, the node stays drained
/// so Slurm places nothing on the CPUs they use; a drain already there (the cordon's, an
/// admin's) is kept as it is, and the bridge's drain is lifted only once neither a cordon nor a
/// held pod asks for it.
pub fn decide(
    kube_name: &str,
    unschedulable: bool,
    removal: Option<&Removal>,
    held: &[String],
    slurm: &SlurmNode,
) -> StateAction {
    match removal {
        Some(Removal::Recreate(_)) if drained_by_admin(slurm) => StateAction::WaitAdmin,
        Some(r) if !is_drain(slurm) => StateAction::Drain(removal_reason(&slurm.name, r)),
        Some(_) if is_busy(slurm) => StateAction::WaitIdle,
        Some(_) => StateAction::Delete,
        None if !held.is_empty() && !is_drain(slurm) => StateAction::Drain(lost_reason(held)),
        None if !held.is_empty() => StateAction::Nothing,
        None if unschedulable && !is_drain(slurm) => StateAction::Drain(cordon_reason(kube_name)),
        None if !unschedulable && is_drain(slurm) && reason_is_ours(slurm.reason.as_deref()) => {
            StateAction::Undrain
        }
        None => StateAction::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState::*;

    /// A Slurm node `s1` with these states and drain reason.
    pub(super) fn node(states: &[NodeState], reason: Option<&str>) -> SlurmNode {
        SlurmNode {
            name: "s1".into(),
            state: states.to_vec(),
            reason: reason.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn predicates() {
        // (states, drain, busy, drained)
        let cases: &[(&[NodeState], bool, bool, bool)] = &[
            (&[Idle, External], false, false, false),
            (&[Idle, Drain], true, false, true),
            (&[Allocated, Drain], true, true, false),
            (&[Mixed, Drain], true, true, false),
            (&[Idle, Completing, Drain], true, true, false),
            (&[Idle, Drain, Undrain], false, false, false),
            (&[Down, Drain], true, false, true),
            (&[Allocated], false, true, false),
        ];
        for (states, drain, busy, drained) in cases {
            let n = node(states, None);
            assert_eq!(
                (is_drain(&n), is_busy(&n), is_drained(&n)),
                (*drain, *busy, *drained),
                "{states:?}"
            );
        }
        assert!(is_external(&node(&[Idle, External], None)));
        assert!(!is_external(&node(&[Idle], None)));
        assert!(reason_is_ours(Some("slurm-bridge: x")));
        assert!(reason_is_ours(Some("slurm-bridge: slurm-bridge: x")));
        assert!(!reason_is_ours(Some("maintenance")));
        assert!(!reason_is_ours(None));
    }

    /// (cordoned, removal, states, reason, want)
    type Case<'a> = (
        bool,
        Option<&'a Removal>,
        &'a [NodeState],
        Option<&'a str>,
        StateAction,
    );

    #[test]
    fn decide_table() {
        let recreate = Removal::Recreate(vec!["CPUs 4 -> 8".into()]);
        let gone = Removal::LabelRemoved;
        let ours = Some("slurm-bridge: whatever");
        let admin = Some("maintenance");
        let cordon = StateAction::Drain(cordon_reason("k1"));
        let remove = StateAction::Drain(removal_reason("s1", &gone));
        let re = StateAction::Drain(removal_reason("s1", &recreate));
        let removal_drain = removal_reason("s1", &gone);
        // (cordoned, removal, states, reason, want)
        let cases: Vec<Case> = vec![
            // Cordon and uncordon.
            (false, None, &[Idle, External], None, StateAction::Nothing),
            (true, None, &[Idle, External], None, cordon.clone()),
            (true, None, &[Idle, Drain], ours, StateAction::Nothing),
            (true, None, &[Idle, Drain], admin, StateAction::Nothing),
            (false, None, &[Idle, Drain], ours, StateAction::Undrain),
            // Never undo an admin's drain, nor a drain without a reason.
            (false, None, &[Idle, Drain], admin, StateAction::Nothing),
            (false, None, &[Idle, Drain], None, StateAction::Nothing),
            (false, None, &[Down], admin, StateAction::Nothing),
            // Label removed: drain, wait for idle, delete; schedulable or not (quirk 6: a
            // schedulable node's drain is not undone while the removal stands).
            (
                false,
                Some(&gone),
                &[Allocated, External],
                None,
                remove.clone(),
            ),
            (
                false,
                Some(&gone),
                &[Allocated, Drain],
                ours,
                StateAction::WaitIdle,
            ),
            (
                true,
                Some(&gone),
                &[Mixed, Drain],
                ours,
                StateAction::WaitIdle,
            ),
            (
                false,
                Some(&gone),
                &[Idle, Drain],
                ours,
                StateAction::Delete,
            ),
            // An admin's drain is enough for a removal; a DOWN node is drained first.
            (
                false,
                Some(&gone),
                &[Idle, Drain],
                admin,
                StateAction::Delete,
            ),
            (false, Some(&gone), &[Down], admin, remove.clone()),
            // Re-creation: the same, but an admin's drain is kept until lifted.
            (false, Some(&recreate), &[Idle, External], None, re.clone()),
            (
                false,
                Some(&recreate),
                &[Allocated, Drain],
                ours,
                StateAction::WaitIdle,
            ),
            (
                false,
                Some(&recreate),
                &[Idle, Drain],
                ours,
                StateAction::Delete,
            ),
            (
                false,
                Some(&recreate),
                &[Idle, Drain],
                admin,
                StateAction::WaitAdmin,
            ),
            // A removal drain is ours: once the removal is off, uncordoned, it is lifted.
            (
                false,
                None,
                &[Idle, Drain],
                Some(removal_drain.as_str()),
                StateAction::Undrain,
            ),
        ];
        for (cordoned, removal, states, reason, want) in cases {
            let n = node(states, reason);
            assert_eq!(
                decide("k1", cordoned, removal, &[], &n),
                want,
                "cordoned={cordoned} removal={removal:?} {states:?} {reason:?}"
            );
        }
    }

    #[test]
    fn reasons_carry_the_mark_once() {
        for r in [
            cordon_reason("k1"),
            removal_reason("s1", &Removal::LabelRemoved),
            removal_reason("s1", &Removal::Recreate(vec!["a".into(), "b".into()])),
            lost_reason(&["ns/a".into()]),
        ] {
            assert!(r.starts_with(REASON_MARK), "{r}");
            assert_eq!(r.matches(REASON_MARK).count(), 1, "{r}");
        }
        assert_eq!(
            removal_reason("s1", &Removal::Recreate(vec!["a".into(), "b".into()])),
            "slurm-bridge: re-creating external node s1 (a, b)"
        );
    }
}

#[cfg(test)]
mod state_loss_tests {
    use super::tests::node;
    use super::*;
    use NodeState::*;

    #[test]
    fn lost_reason_names_a_few_pods() {
        assert_eq!(
            lost_reason(&["ns/a".into(), "ns/b".into()]),
            "slurm-bridge: Slurm lost the jobs of running pods (ns/a, ns/b)"
        );
        let many: Vec<String> = (0..5).map(|i| format!("ns/p{i}")).collect();
        assert_eq!(
            lost_reason(&many),
            "slurm-bridge: Slurm lost the jobs of running pods (ns/p0, ns/p1, ns/p2, +2 more)"
        );
    }

    /// Held pods (state-loss hold) drain the node; the drain is lifted once none is held, unless
    /// a cordon keeps it; an admin's drain is never touched; removals go first.
    #[test]
    fn held_pods_drain_the_node() {
        let held = vec!["ns/a".to_string()];
        let none: Vec<String> = Vec::new();
        let lost = lost_reason(&held);
        let ours_lost = Some(lost.as_str());
        let cordon = cordon_reason("k1");
        let ours_cordon = Some(cordon.as_str());
        let admin = Some("maintenance");
        let gone = Removal::LabelRemoved;
        // (cordoned, removal, held, states, reason, want)
        type Case<'a> = (
            bool,
            Option<&'a Removal>,
            &'a [String],
            &'a [NodeState],
            Option<&'a str>,
            StateAction,
        );
        let cases: Vec<Case> = vec![
            // Held pods on an idle node (re-created after the loss, or a hybrid node): drained.
            (
                false,
                None,
                &held,
                &[Idle, External],
                None,
                StateAction::Drain(lost.clone()),
            ),
            (
                false,
                None,
                &held,
                &[Idle],
                None,
                StateAction::Drain(lost.clone()),
            ),
            // Drained already (ours, the cordon's, an admin's): kept as it is.
            (
                false,
                None,
                &held,
                &[Idle, Drain],
                ours_lost,
                StateAction::Nothing,
            ),
            (
                true,
                None,
                &held,
                &[Idle, Drain],
                ours_cordon,
                StateAction::Nothing,
            ),
            (
                false,
                None,
                &held,
                &[Idle, Drain],
                admin,
                StateAction::Nothing,
            ),
            // A cordon during the hold: still drained, with either reason.
            (
                true,
                None,
                &held,
                &[Mixed, Drain],
                ours_lost,
                StateAction::Nothing,
            ),
            // No pod held any more: lifted, unless cordoned; an admin's drain stays.
            (
                false,
                None,
                &none,
                &[Idle, Drain],
                ours_lost,
                StateAction::Undrain,
            ),
            (
                true,
                None,
                &none,
                &[Idle, Drain],
                ours_lost,
                StateAction::Nothing,
            ),
            (
                false,
                None,
                &none,
                &[Idle, Drain],
                admin,
                StateAction::Nothing,
            ),
            // A removal goes first, held pods or not.
            (
                false,
                Some(&gone),
                &held,
                &[Idle, External],
                None,
                StateAction::Drain(removal_reason("s1", &gone)),
            ),
            (
                false,
                Some(&gone),
                &held,
                &[Idle, Drain],
                ours_lost,
                StateAction::Delete,
            ),
        ];
        for (cordoned, removal, held, states, reason, want) in cases {
            let n = node(states, reason);
            assert_eq!(
                decide("k1", cordoned, removal, held, &n),
                want,
                "cordoned={cordoned} removal={removal:?} held={held:?} {states:?} {reason:?}"
            );
        }
    }
}
