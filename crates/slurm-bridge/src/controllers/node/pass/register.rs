//! Registration step: register a labelled node in Slurm, keep its topology in step, find what
//! is to be removed (label gone, or a capacity change that needs a re-creation).

use super::super::{BAD_PARTITION_RETRY, Ctx, NodeError, registration, slurm_err};
use super::Pass;
use super::fresh;
use crate::controllers::node::drain::Removal;
use crate::controllers::node::ownership::{self, Ownership};
use crate::controllers::node::registration::Desired;
use crate::slurm::NodeControl;
use crate::slurm::SlurmNodes;
use crate::wellknown::ANNOTATION_EXTERNAL_NODE_PARTITIONS;

/// Registers, or keeps in step, a labelled node; finds what is to be removed. Returns the
/// desired Slurm node (labelled and valid) and a pending removal.
pub(super) async fn registration_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    labelled: bool,
) -> Result<(Option<Desired>, Option<Removal>), NodeError> {
    if !labelled {
        let Some(s) = p.slurm.as_ref() else {
            return Ok((None, None));
        };
        let removal = match ownership::ownership(s, false, ctx.opts.cluster.as_deref()) {
            Ownership::Ours => Some(Removal::LabelRemoved),
            Ownership::Foreign => {
                p.warnings
                    .push(("SlurmNodeNotOwned", ownership::foreign_warning(s, false)));
                None
            }
            Ownership::NotExternal | Ownership::Adopt => None,
        };
        return Ok((None, removal));
    }
    let inv = crate::dra::NodeInventory::with_drivers(
        &p.name,
        ctx.slices.state().iter().map(|s| s.as_ref()),
        &ctx.opts.gres_drivers,
    );
    let d = match registration::desired(p.node, &inv) {
        Ok(d) => d,
        Err(e) => {
            p.warnings.push((
                "InvalidExternalNode",
                format!("not registered in Slurm: {e}"),
            ));
            return Ok((None, None));
        }
    };
    let partitions_ok = partitions_exist(ctx, p, &d).await?;
    let Some(s) = p.slurm.clone() else {
        if partitions_ok {
            create(ctx, p, &d).await?;
        }
        return Ok((Some(d), None));
    };
    match ownership::ownership(&s, true, ctx.opts.cluster.as_deref()) {
        Ownership::Ours => {}
        Ownership::Adopt => {
            mark(
                ctx,
                p,
                "adopting an unmarked external node (the Go original's registration)",
            )
            .await?;
        }
        Ownership::Foreign => {
            p.warnings
                .push(("SlurmNodeNotOwned", ownership::foreign_warning(&s, true)));
            return Ok((Some(d), None));
        }
        Ownership::NotExternal => {
            p.warnings.push((
                "SlurmNodeNotExternal",
                format!(
                    "Slurm node {} exists and is not an external node (it is run by slurmd): \
                 slurm-bridge does not manage it",
                    p.slurm_name
                ),
            ));
            return Ok((Some(d), None));
        }
    }
    let why = registration::recreate_reasons(&d, &s);
    if !why.is_empty() {
        // Re-created only once it can be registered again (its partitions exist).
        let removal = partitions_ok.then_some(Removal::Recreate(why));
        return Ok((Some(registration::keeping_features(d, &s)), removal));
    }
    let mut updates = Vec::new();
    if let Some(u) = registration::topology_update(&d, &s) {
        updates.push(("topology", u));
    }
    for (what, u) in &updates {
        tracing::info!(node = %p.name, slurm_node = %p.slurm_name, ?u, "updating Slurm node {what}");
        ctx.slurm
            .update_node(&p.slurm_name, u)
            .await
            .map_err(slurm_err(format!(
                "updating the {what} of node {}",
                p.slurm_name
            )))?;
    }
    if !updates.is_empty() {
        p.slurm = fresh(ctx, &p.slurm_name).await?;
    }
    Ok((Some(d), None))
}

/// True when every partition of the annotation exists; else a warning naming them.
pub(super) async fn partitions_exist<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    d: &Desired,
) -> Result<bool, NodeError> {
    if d.partitions.is_empty() {
        return Ok(true);
    }
    let existing = ctx
        .slurm
        .partition_names()
        .await
        .map_err(slurm_err("listing partitions"))?;
    let missing = registration::missing_partitions(&d.partitions, &existing);
    if missing.is_empty() {
        return Ok(true);
    }
    let quoted = |v: &[String]| {
        v.iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let action = if p.slurm.is_some() {
        "its features are left as they are"
    } else {
        "it is not registered"
    };
    p.warnings.push((
        "InvalidPartition",
        format!(
            "annotation {ANNOTATION_EXTERNAL_NODE_PARTITIONS}: partition {} not found in Slurm \
             (existing partitions: {}); {action}",
            quoted(&missing),
            quoted(&existing)
        ),
    ));
    p.requeue_within(BAD_PARTITION_RETRY);
    Ok(false)
}

/// Lists the Slurm nodes again after this controller added or removed one; a failure only
/// delays the change to the next poll.
pub(super) async fn refresh_listing<S: NodeControl, C: SlurmNodes>(ctx: &Ctx<S, C>) {
    if let Err(e) = ctx.slurm_nodes.refresh().await {
        tracing::debug!(error = %e, "listing Slurm nodes after a change failed");
    }
}

/// Creates the Slurm node and reads it back.
pub(super) async fn create<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    d: &Desired,
) -> Result<(), NodeError> {
    let conf = registration::node_conf(d);
    tracing::info!(node = %p.name, slurm_node = %d.slurm_name, node_conf = %conf, "registering node in Slurm");
    ctx.slurm
        .create_node(&conf)
        .await
        .map_err(slurm_err(format!("creating node {}", d.slurm_name)))?;
    ctx.metrics.nodes_registered.inc();
    mark(ctx, p, "registered").await?;
    // The scheduler places pods on the listed Slurm nodes: list them now, not at the next poll.
    refresh_listing(ctx).await;
    p.slurm = fresh(ctx, &p.slurm_name).await?;
    ctx.writer
        .event(
            p.node,
            false,
            "SlurmNodeRegistered",
            "Register",
            &format!("registered in Slurm as external node: {conf}"),
        )
        .await;
    Ok(())
}

/// Writes the bridge's mark ([`ownership::owner_comment`]) on the Slurm node, so that only
/// nodes the bridge registered are ever removed by it.
pub(super) async fn mark<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &Pass<'_>,
    why: &str,
) -> Result<(), NodeError> {
    let comment = ownership::owner_comment(&p.name, ctx.opts.cluster.as_deref());
    tracing::info!(node = %p.name, slurm_node = %p.slurm_name, %comment, "marking Slurm node as the bridge's: {why}");
    let u = slurm_rest::models::UpdateNodeMsg {
        comment: Some(comment),
        ..Default::default()
    };
    ctx.slurm
        .update_node(&p.slurm_name, &u)
        .await
        .map_err(slurm_err(format!("marking node {}", p.slurm_name)))
}
