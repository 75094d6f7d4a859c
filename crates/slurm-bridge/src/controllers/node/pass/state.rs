//! State step: drain for a cordon or a removal, lift the bridge's own drain, delete (and for a
//! re-creation register again) once the node is idle.

use super::super::{Ctx, NodeError, WAIT_IDLE_RETRY, slurm_err};
use super::Pass;
use super::fresh;
use super::register::create;
use super::register::refresh_listing;
use crate::controllers::node::drain::{Removal, StateAction, decide, is_drained};
use crate::controllers::node::registration::Desired;
use crate::slurm::NodeControl;
use crate::slurm::SlurmNodes;
use crate::wellknown::LABEL_EXTERNAL_NODE;
use slurm_rest::models::{NodeState, UpdateNodeMsg};
use std::time::Duration;

/// A census of the held pods this recent is reused by a node pass (each census reads every
/// cached pod; the census task takes one every second and passes the nodes whose held pods
/// changed).
const HELD_CENSUS_AGE: Duration = Duration::from_millis(500);

/// Drains, lifts the bridge's drain, deletes (and for a re-creation registers again).
pub(super) async fn state_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    desired: Option<&Desired>,
    mut removal: Option<Removal>,
) -> Result<(), NodeError> {
    let cordoned = p
        .node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    // The pods on this node kept though Slurm lost their jobs: the node stays drained.
    let held = ctx
        .state_loss
        .as_ref()
        .map(|s| s.census_within(HELD_CENSUS_AGE).held_on(&p.name))
        .unwrap_or_default();
    // At most: drain, then (idle already) delete, then (re-created) drain for the cordon.
    for _ in 0..3 {
        let Some(s) = p.slurm.clone() else {
            return Ok(());
        };
        let action = decide(&p.name, cordoned, removal.as_ref(), &held, &s);
        match action {
            StateAction::Nothing => return Ok(()),
            StateAction::WaitAdmin => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, reason = ?s.reason,
                    "re-creation waits until the admin's drain is lifted");
                return Ok(());
            }
            StateAction::WaitIdle => {
                tracing::debug!(node = %p.name, slurm_node = %p.slurm_name, "waiting for the node to go idle before removing it");
                p.requeue_within(WAIT_IDLE_RETRY);
                return Ok(());
            }
            StateAction::Drain(reason) => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, %reason, "draining Slurm node");
                let u = UpdateNodeMsg::state(NodeState::Drain, Some(reason));
                ctx.slurm
                    .update_node(&p.slurm_name, &u)
                    .await
                    .map_err(slurm_err(format!("draining node {}", p.slurm_name)))?;
                ctx.metrics.nodes_drained.inc();
                p.slurm = fresh(ctx, &p.slurm_name).await?;
                if removal.is_none() {
                    return Ok(());
                }
                // Already idle: removed in this pass.
                if !p.slurm.as_ref().is_some_and(is_drained) {
                    p.requeue_within(WAIT_IDLE_RETRY);
                    return Ok(());
                }
            }
            StateAction::Undrain => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, "lifting the bridge's drain of the Slurm node");
                let u = UpdateNodeMsg::state(NodeState::Undrain, None);
                ctx.slurm
                    .update_node(&p.slurm_name, &u)
                    .await
                    .map_err(slurm_err(format!("undraining node {}", p.slurm_name)))?;
                p.slurm = fresh(ctx, &p.slurm_name).await?;
                return Ok(());
            }
            StateAction::Delete => {
                delete(ctx, p, removal.as_ref()).await?;
                match (removal.take(), desired) {
                    (Some(Removal::Recreate(_)), Some(d)) => create(ctx, p, d).await?,
                    _ => return Ok(()),
                }
            }
        }
    }
    Ok(())
}

/// Deletes the Slurm node (gone already counts as deleted), lists the nodes again and records
/// an Event saying why.
pub(super) async fn delete<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    removal: Option<&Removal>,
) -> Result<(), NodeError> {
    tracing::info!(node = %p.name, slurm_node = %p.slurm_name, ?removal, "removing Slurm node");
    if let Err(e) = ctx.slurm.delete_node(&p.slurm_name).await {
        // Gone meanwhile is as good as removed.
        if fresh(ctx, &p.slurm_name).await?.is_some() {
            return Err(NodeError::Slurm {
                action: format!("removing node {}", p.slurm_name),
                source: e,
            });
        }
    }
    ctx.metrics.nodes_removed.inc();
    refresh_listing(ctx).await;
    p.slurm = None;
    let note = match removal {
        Some(Removal::Recreate(why)) => format!(
            "removed Slurm node {} to register it again: {}",
            p.slurm_name,
            why.join(", ")
        ),
        _ => format!(
            "removed Slurm node {}: label {LABEL_EXTERNAL_NODE} is gone",
            p.slurm_name
        ),
    };
    ctx.writer
        .event(p.node, false, "SlurmNodeRemoved", "Remove", &note)
        .await;
    Ok(())
}
