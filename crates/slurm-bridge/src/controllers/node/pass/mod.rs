//! One pass for a node, in its four steps (module doc of [`super`]): registration
//! ([`register`]), state ([`state`]), the managed-node taint and Slurm's view; then the pass's
//! warnings as Events. The decisions are the pure modules of [`super`]; the writes are here.

mod register;
mod state;

use super::{CONFLICT_RETRY, Ctx, NodeError, slurm_err, slurm_view, taint};
use crate::controllers::node::slurm_view::ConditionChange;
use crate::k8s::slurm_node_name;
use crate::slurm::NodeControl;
use crate::slurm::SlurmNodes;
use crate::sync::MutexExt;
use crate::wellknown::{LABEL_EXTERNAL_NODE, TAINT_MANAGED_NODE};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use register::registration_step;
use slurm_rest::models::Node as SlurmNode;
use state::state_step;
use std::collections::BTreeSet;
use std::time::Duration;

/// What one pass found and did, for the steps after registration.
pub(super) struct Pass<'a> {
    node: &'a Node,
    name: String,
    slurm_name: String,
    /// The Slurm node as of the last fresh read or write of this pass.
    slurm: Option<SlurmNode>,
    requeue: Duration,
    warnings: Vec<(&'static str, String)>,
}

impl Pass<'_> {
    fn requeue_within(&mut self, d: Duration) {
        self.requeue = self.requeue.min(d);
    }
}

/// One pass for `node`: a fresh read of its Slurm node where it can matter, then the four
/// steps and the warnings; requeued at the soonest retry a step asked for.
pub(super) async fn pass<S: NodeControl, C: SlurmNodes>(
    node: &Node,
    ctx: &Ctx<S, C>,
) -> Result<Action, NodeError> {
    let name = node.name_any();
    let slurm_name = slurm_node_name(node);
    let labelled = node.labels().contains_key(LABEL_EXTERNAL_NODE);
    // A fresh read only where it can matter: a node to register, or a name the listing knows.
    let known = ctx
        .slurm_nodes
        .snapshot()
        .names
        .contains(slurm_name.as_str());
    let slurm = if labelled || known {
        fresh(ctx, &slurm_name).await?
    } else {
        None
    };
    let mut p = Pass {
        node,
        name,
        slurm_name,
        slurm,
        requeue: ctx.opts.resync,
        warnings: Vec::new(),
    };

    let (desired, removal) = registration_step(ctx, &mut p, labelled).await?;
    state_step(ctx, &mut p, desired.as_ref(), removal).await?;
    let conflict = taint_step(ctx, &p).await?;
    view_step(ctx, &p).await?;
    publish_warnings(ctx, &p).await;
    if conflict {
        p.requeue_within(CONFLICT_RETRY);
    }
    Ok(Action::requeue(p.requeue))
}

/// The Slurm node as slurmctld has it now (None: no such node).
pub(super) async fn fresh<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    slurm_name: &str,
) -> Result<Option<SlurmNode>, NodeError> {
    ctx.slurm
        .node(slurm_name)
        .await
        .map_err(slurm_err(format!("reading node {slurm_name}")))
}

/// The managed-node taint; returns true when the patch met a conflict (retried soon).
pub(super) async fn taint_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &Pass<'_>,
) -> Result<bool, NodeError> {
    let current = p
        .node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let bridged = p.slurm.is_some();
    let Some(taints) = taint::desired_taints(current, bridged, &ctx.opts.scheduler_name) else {
        return Ok(false);
    };
    tracing::info!(node = %p.name, bridged, "{} taint {TAINT_MANAGED_NODE}", if bridged { "setting" } else { "removing" });
    match ctx.writer.set_taints(p.node, &taints).await {
        Ok(()) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Slurm's view: the condition and its Events.
pub(super) async fn view_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &Pass<'_>,
) -> Result<(), NodeError> {
    let want = slurm_view::view(p.slurm.as_ref());
    let change = slurm_view::diff(slurm_view::current(p.node), want.clone());
    let announced = ctx.shown.locked().get(&p.name) == Some(&want);
    match change {
        ConditionChange::Keep => {}
        ConditionChange::Set { view, transition } => {
            tracing::info!(node = %p.name, reason = view.reason, message = %view.message, "Slurm node unavailable");
            ctx.writer.set_condition(p.node, &view, transition).await?;
            if !announced {
                ctx.writer
                    .event(p.node, true, view.reason, "SlurmNodeState", &view.message)
                    .await;
            }
        }
        ConditionChange::Remove => {
            tracing::info!(node = %p.name, "Slurm node available again");
            ctx.writer.remove_condition(p.node).await?;
            if !announced {
                let state = p
                    .slurm
                    .as_ref()
                    .map(|s| {
                        let st: Vec<&str> = s.state.iter().map(|x| x.as_str()).collect();
                        format!("Slurm node {} is {}", s.name, st.join("+"))
                    })
                    .unwrap_or_else(|| format!("Slurm node {} is gone", p.slurm_name));
                ctx.writer
                    .event(
                        p.node,
                        false,
                        slurm_view::REASON_RESUMED,
                        "SlurmNodeState",
                        &state,
                    )
                    .await;
            }
        }
    }
    ctx.shown.locked().insert(p.name.clone(), want);
    Ok(())
}

/// Publishes the pass's warnings not yet published for this node.
pub(super) async fn publish_warnings<S: NodeControl, C: SlurmNodes>(ctx: &Ctx<S, C>, p: &Pass<'_>) {
    let now: BTreeSet<String> = p.warnings.iter().map(|(_, w)| w.clone()).collect();
    let before = ctx
        .warned
        .locked()
        .insert(p.name.clone(), now)
        .unwrap_or_default();
    for (reason, note) in &p.warnings {
        if !before.contains(note) {
            tracing::warn!(node = %p.name, reason, "{note}");
            ctx.writer
                .event(p.node, true, reason, "Register", note)
                .await;
        }
    }
}
