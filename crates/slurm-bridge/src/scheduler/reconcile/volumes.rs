//! A group's PersistentVolumeClaims, as kube-scheduler's VolumeBinding plugin sees to them, with
//! Slurm choosing the node: before submit, the nodes that cannot serve a pod's volumes are
//! excluded (or the group waits, saying why); after the allocation and before binding, each
//! claim gets its PV on the pod's node (or the node is selected for provisioning), and the pod
//! is bound once all its claims are. The rules themselves are [`crate::volumes`].

use super::ReconcileError;
use super::report::report;
use crate::k8s::slim_pod::Pod;
use crate::k8s::slurm_node_name;
use crate::scheduler::context::{CachedPlacement, Ctx, Slurm};
use crate::scheduler::reason;
use crate::sync::MutexExt;
use crate::volumes::{self, Applied, Reserved, VolumeError, VolumeSnapshot};
use crate::workload::ir::pod_key;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// The placement narrowed to the nodes that can serve the group's volumes.
pub(super) struct Restricted {
    pub feasible: usize,
    pub excluded: Vec<String>,
    pub rejections: String,
}

/// `None` when no pod of the group has claims; `Err` when the group cannot be submitted yet
/// (a claim missing, an unbound Immediate claim, a missing class...).
pub(super) fn restrict<S: Slurm>(
    ctx: &Ctx<S>,
    pods: &[Pod],
    placement: &CachedPlacement,
) -> Result<Option<Restricted>, VolumeError> {
    if !pods.iter().any(volumes::has_claims) {
        return Ok(None);
    }
    let snapshot = ctx.volumes.snapshot();
    let nodes: Vec<Arc<Node>> = ctx.nodes.state();
    let mut allowed: BTreeSet<String> = nodes.iter().map(|n| slurm_node_name(n)).collect();
    let mut reasons: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for pod in pods.iter().filter(|p| volumes::has_claims(p)) {
        let fit = volumes::fit(pod, &snapshot, nodes.iter().map(|n| n.as_ref()))?;
        for (kube_name, why) in fit.rejected() {
            let slurm = nodes
                .iter()
                .find(|n| n.name_any() == kube_name)
                .map(|n| slurm_node_name(n))
                .unwrap_or_else(|| kube_name.to_string());
            if placement.feasible_nodes.contains(&slurm) {
                reasons.entry(why).or_default().insert(slurm.clone());
            }
            allowed.remove(&slurm);
        }
    }
    let feasible: BTreeSet<&String> = placement
        .feasible_nodes
        .iter()
        .filter(|n| allowed.contains(*n))
        .collect();
    let all = ctx.slurm_nodes.snapshot().names.clone();
    let excluded: Vec<String> = all
        .iter()
        .filter(|n| !feasible.contains(n))
        .cloned()
        .collect();
    let mut rejections: Vec<String> = reasons
        .iter()
        .map(|(why, nodes)| format!("{} {why}", nodes.len()))
        .collect();
    if !placement.rejections.is_empty() {
        rejections.insert(0, placement.rejections.clone());
    }
    Ok(Some(Restricted {
        feasible: feasible.len(),
        excluded: if excluded.is_empty() {
            Vec::new()
        } else {
            vec![slurm_rest::hostlist::compress(&excluded)]
        },
        rejections: rejections.join(", "),
    }))
}

/// What binding the pods waits for: the pods whose claims are not all bound yet.
#[derive(Default)]
pub(super) struct VolumeGate {
    /// Pods to hold back this pass (their claims are being bound).
    pub waiting: BTreeSet<String>,
}

/// Gives every member with claims its volumes on its planned node, in group order (two pods of
/// a gang never get one PV), and tells which pods must wait for the binding to complete. A
/// failed write is undone, shown on the pod and fails the pass (retried with backoff).
pub(super) async fn prepare<S: Slurm>(
    ctx: &Ctx<S>,
    job_id: u32,
    members: &[&Pod],
    plan: &BTreeMap<String, String>,
) -> Result<VolumeGate, ReconcileError> {
    let mut gate = VolumeGate::default();
    let with_claims: Vec<&Pod> = members
        .iter()
        .copied()
        .filter(|p| !crate::k8s::is_bound(p) && volumes::has_claims(p))
        .collect();
    if with_claims.is_empty() {
        return Ok(gate);
    }
    let snapshot = ctx.volumes.snapshot();
    let nodes = ctx.nodes.state();
    let mut reserved = Reserved::default();
    for pod in with_claims {
        let key = pod_key(pod);
        let Some(node_name) = plan.get(&key) else {
            continue;
        };
        let Some(node) = nodes.iter().find(|n| n.name_any() == *node_name) else {
            continue;
        };
        let wait = (key.clone(), job_id);
        // Timed out and cancelled: the passes that run before the watcher sees the job gone
        // must not reserve the claims again, nor replace the pod's VolumeBindingFailed.
        if ctx.volume_waits.locked().get(&wait) == Some(&None) {
            gate.waiting.insert(key);
            continue;
        }
        let planned = match plan_and_apply(ctx, &snapshot, pod, node, &mut reserved).await {
            Ok(p) => p,
            Err(e) => {
                let message =
                    format!("Slurm job {job_id} on node {node_name}: binding volumes failed: {e}");
                report(ctx, pod, reason::VOLUME_BINDING_FAILED, &message);
                return Err(ReconcileError::Volume(e));
            }
        };
        let ns = pod.namespace().unwrap_or_default();
        let progress = volumes::fetch_progress(&ctx.client, &ns, &planned.claims())
            .await
            .map_err(ReconcileError::Volume)?;
        if progress.done() {
            ctx.volume_waits.locked().remove(&wait);
            continue;
        }
        let Some(since) = *ctx
            .volume_waits
            .locked()
            .entry(wait.clone())
            .or_insert_with(|| Some(Instant::now()))
        else {
            // Timed out while this pass awaited the API server (checked above before writing).
            gate.waiting.insert(key);
            continue;
        };
        gate.waiting.insert(key);
        if since.elapsed() < ctx.volume_bind_timeout {
            let message = format!(
                "Slurm job {job_id} allocated node {node_name}: waiting for its volumes to be \
                 bound ({}/{} claims bound; waiting for {})",
                progress.bound,
                progress.total,
                progress.waiting.join(", ")
            );
            report(ctx, pod, reason::WAITING_FOR_VOLUMES, &message);
            continue;
        }
        // As kube-scheduler after bindTimeoutSeconds: take back what was reserved and schedule
        // again; here, with a new Slurm job, which may get other nodes.
        for e in volumes::undo(&ctx.client, &written(&planned)).await {
            tracing::warn!(error = %e, "undoing a volume reservation failed");
        }
        let message = format!(
            "Slurm job {job_id} on node {node_name}: claims {} were not bound within {:?}; \
             their reservations are undone and the job is cancelled, to be scheduled again",
            progress.waiting.join(", "),
            ctx.volume_bind_timeout
        );
        tracing::warn!(job_id, "volume binding timed out");
        report(ctx, pod, reason::VOLUME_BINDING_FAILED, &message);
        ctx.slurm.cancel(job_id).await?;
        ctx.volume_waits.locked().insert(wait, None);
        return Ok(gate);
    }
    Ok(gate)
}

/// Every write `plan` stands for (done by this pass or an earlier one), for [`volumes::undo`].
fn written(plan: &volumes::VolumePlan) -> Applied {
    let mut applied = Applied {
        namespace: plan.namespace.clone(),
        ..Default::default()
    };
    for a in &plan.actions {
        match a {
            volumes::ClaimAction::BindPv { claim, pv } => {
                applied.pvs.push((pv.clone(), claim.clone()))
            }
            volumes::ClaimAction::SelectNode { claim, .. } => applied.selected.push(claim.clone()),
            volumes::ClaimAction::Bound { .. } => {}
        }
    }
    applied
}

/// Plans `pod`'s claims on `node` and writes what the plan says; a PV another writer took
/// meanwhile is left out and the plan made again (a few times).
async fn plan_and_apply<S: Slurm>(
    ctx: &Ctx<S>,
    snapshot: &VolumeSnapshot,
    pod: &Pod,
    node: &Node,
    reserved: &mut Reserved,
) -> Result<volumes::VolumePlan, VolumeError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let plan = volumes::plan_pod(pod, snapshot, node, reserved)?;
        let mut applied = Applied::default();
        match volumes::apply(&ctx.client, snapshot, &plan, &mut applied).await {
            Ok(()) => {
                reserved.add(&plan);
                return Ok(plan);
            }
            Err(e) => {
                for undo_err in volumes::undo(&ctx.client, &applied).await {
                    tracing::warn!(error = %undo_err, "undoing a volume write failed");
                }
                match &e {
                    VolumeError::PvTaken { pv, .. } if attempt < 3 => reserved.exclude(pv),
                    _ => return Err(e),
                }
            }
        }
    }
}
