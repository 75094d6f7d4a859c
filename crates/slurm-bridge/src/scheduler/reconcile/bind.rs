//! An allocation turned into bound pods, in named steps: Slurm's node list mapped to Kubernetes
//! nodes ([`allocated_nodes`]), the pods the job stands for ([`members`]) each assigned a node
//! ([`assign_nodes`]), their DRA claims planned ([`plan_claims`]), then every unbound pod
//! labelled, given its claim and bound ([`bind_one`]), and the outcomes tallied ([`tally`]).

use super::ReconcileError;
use super::report::report;
use crate::dra::claims::{self, ClaimPlan, ClaimWriter};
use crate::k8s::slim_pod::Pod;
use crate::k8s::{bound_node, is_bound};
use crate::scheduler::assign;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::reason;
use crate::slurm::WatchedJob;
use crate::wellknown::ANNOTATION_SLURM_NODE;
use crate::workload::Translation;
use crate::workload::ir::pod_key;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// What a pass did with an allocation.
pub(super) struct Allocation {
    /// `pod key -> node` for every pod on the allocation, bound before or now.
    pub(super) plan: BTreeMap<String, String>,
    /// The pods this pass bound (or found bound by an earlier pass of its own).
    pub(super) bound_now: Vec<String>,
    /// Pods held back until their volumes are bound (look again soon).
    pub(super) waiting_for_volumes: bool,
}

/// Binds the unbound pods the allocation covers.
pub(super) async fn bind_allocation<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
) -> Result<Allocation, ReconcileError> {
    let slurm_to_kube = ctx.slurm_to_kube();
    let kube = allocated_nodes(ctx, pod, tr, job, &slurm_to_kube).await?;
    let members = members(tr, job);
    let plan = assign_nodes(tr, &members, &kube);
    ctx.metrics.allocated(job.job_id);
    let claim_writer = &ctx.claims();
    let claim_plan =
        &plan_claims(ctx, claim_writer, pod, job, &plan, &members, &slurm_to_kube).await?;
    let gate = super::volumes::prepare(ctx, job.job_id, &members, &plan).await?;
    let to_bind: Vec<(&Pod, &String)> = members
        .iter()
        .filter(|p| !is_bound(p) && !gate.waiting.contains(&pod_key(p)))
        .filter_map(|p| plan.get(&pod_key(p)).map(|n| (*p, n)))
        .collect();
    // Decided: from here on the pass only writes, and its worker goes on to the next pod.
    let _stage = if to_bind.is_empty() {
        None
    } else {
        ctx.triggers.binding_stage(pod).await
    };
    let results = futures::future::join_all(
        to_bind
            .iter()
            .map(|(p, node)| bind_one(ctx, claim_writer, claim_plan, job, p, node)),
    )
    .await;
    let bound_now = tally(results, &to_bind)?;
    let bound = bound_now.len() as u64;
    ctx.metrics.group_bound(job.job_id, bound);
    let nodes = job.allocated_nodes().unwrap_or_default();
    tracing::info!(job_id = job.job_id, nodes, bound, "bound pods");
    Ok(Allocation {
        plan,
        bound_now,
        waiting_for_volumes: !gate.waiting.is_empty(),
    })
}

/// The Kubernetes nodes of the job's allocation, in Slurm's order; a node list that does not
/// parse or names a node Kubernetes does not have is shown on the pod and fails the pass. A job
/// allocated a node whose Kubernetes node is gone, none of whose pods is bound yet, is cancelled
/// ([`cancel_unmapped`]): the next pass submits the group again, and the node, matching no
/// Kubernetes node, is among the new job's excluded nodes.
async fn allocated_nodes<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
    slurm_to_kube: &BTreeMap<String, String>,
) -> Result<Vec<String>, ReconcileError> {
    let nodes = job.allocated_nodes().unwrap_or_default();
    let slurm_names = match slurm_rest::hostlist::expand(nodes) {
        Ok(n) => n,
        Err(e) => {
            let message = format!(
                "Slurm job {} has a malformed node list {nodes:?}: {e}",
                job.job_id
            );
            report(ctx, pod, reason::ALLOCATION_UNMAPPED, &message);
            return Err(ReconcileError::NodeList {
                job_id: job.job_id,
                nodes: nodes.to_string(),
                message: e.to_string(),
            });
        }
    };
    match assign::kube_nodes(&slurm_names, slurm_to_kube) {
        Ok(k) => Ok(k),
        Err(e) => {
            let assign::AssignError::UnknownSlurmNode(missing) = &e;
            let mut message = format!("Slurm job {} allocated {nodes}: {e}", job.job_id);
            if cancel_unmapped(ctx, tr, job, missing).await? {
                message.push_str(&format!(
                    "; the job was cancelled and the group is submitted again without {missing}"
                ));
            }
            report(ctx, pod, reason::ALLOCATION_UNMAPPED, &message);
            Err(e.into())
        }
    }
}

/// Cancels `job`, allocated the Slurm node `missing` that no Kubernetes node stands for, when
/// none of its pods is bound yet and the API server confirms there is no node of that name (the
/// node cache may lag). Returns whether it was cancelled. Waiting instead would hold the
/// allocation forever: no pod can ever be bound to a node that does not exist.
async fn cancel_unmapped<S: Slurm>(
    ctx: &Ctx<S>,
    tr: &Translation,
    job: &WatchedJob,
    missing: &str,
) -> Result<bool, ReconcileError> {
    if members(tr, job).iter().any(|p| is_bound(p)) {
        return Ok(false);
    }
    // A list by name, not a GET: the scheduler's role may list nodes, not get them.
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(ctx.client.clone());
    let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={missing}"));
    if !api.list_metadata(&by_name).await?.items.is_empty() {
        return Ok(false);
    }
    tracing::warn!(job_id = job.job_id, slurm_node = %missing,
        "allocated a Slurm node without a Kubernetes node; cancelling the job to submit it again");
    ctx.slurm.cancel(job.job_id).await?;
    ctx.watcher.refresh(job.job_id).await?;
    Ok(true)
}

/// The group's pods the job stands for (its admin_comment; a lone pod always).
fn members<'a>(tr: &'a Translation, job: &WatchedJob) -> Vec<&'a Pod> {
    tr.ir
        .pods
        .iter()
        .filter(|p| job.comment.pods.contains(&pod_key(p)) || tr.ir.pods.len() == 1)
        .collect()
}

/// `pod key -> node` for the members: pods bound to a node of the allocation keep it, then the
/// unbound ones go where their node annotation says if there is room. A member bound elsewhere
/// (on a job of its own) is not this allocation's.
fn assign_nodes(tr: &Translation, members: &[&Pod], kube: &[String]) -> BTreeMap<String, String> {
    let mut wanted: Vec<(String, Option<String>)> = members
        .iter()
        .filter_map(|p| bound_node(p).map(|n| (pod_key(p), n.to_string())))
        .filter(|(_, n)| kube.contains(n))
        .map(|(k, n)| (k, Some(n)))
        .collect();
    wanted.extend(members.iter().filter(|p| !is_bound(p)).map(|p| {
        (
            pod_key(p),
            p.annotations().get(ANNOTATION_SLURM_NODE).cloned(),
        )
    }));
    assign::assign(&wanted, kube, tr.ir.job.pods_per_node())
}

/// The DRA devices each member asking for them gets (no Slurm call for pods without); a failure
/// is shown on the pod it concerns, else on the reconciled one.
async fn plan_claims<S: Slurm>(
    ctx: &Ctx<S>,
    writer: &ClaimWriter,
    pod: &Pod,
    job: &WatchedJob,
    plan: &BTreeMap<String, String>,
    members: &[&Pod],
    slurm_to_kube: &BTreeMap<String, String>,
) -> Result<ClaimPlan, ReconcileError> {
    // Called only for pods that ask for DRA devices: a search, not a reversed map per pass.
    let slurm_node = |k: &str| {
        slurm_to_kube
            .iter()
            .find(|(_, kube)| kube.as_str() == k)
            .map(|(s, _)| s.to_string())
            .unwrap_or_else(|| k.to_string())
    };
    let known = ctx.watcher.recent_layout(job);
    match claims::plan(
        writer,
        &*ctx.slurm,
        job.job_id,
        known,
        plan,
        members,
        slurm_node,
    )
    .await
    {
        Ok(c) => Ok(c),
        Err((who, e)) => {
            let message = format!("Slurm job {}: {e}", job.job_id);
            let target = who
                .and_then(|k| members.iter().find(|p| pod_key(p) == k).copied())
                .unwrap_or(pod);
            report(ctx, target, claims::REASON_CLAIM_FAILED, &message);
            Err(e.into())
        }
    }
}

/// Labels one pod with the job (or has the Binding carry the label), makes its ResourceClaim
/// (if it asks for DRA devices) and binds it to `node`; a failed binding deletes the claim
/// again. `Ok(true)`: the pod is bound (now or
/// by an earlier pass of this scheduler); `Ok(false)`: it was deleted meanwhile.
async fn bind_one<S: Slurm>(
    ctx: &Ctx<S>,
    claim_writer: &ClaimWriter,
    claim_plan: &ClaimPlan,
    job: &WatchedJob,
    p: &Pod,
    node: &str,
) -> Result<bool, ReconcileError> {
    let writes = &ctx.metrics.kube_writes;
    let bound = match ctx.writer.label_for_binding(writes, p, job.job_id).await {
        // The pod's ResourceClaim, if it asks for DRA devices, is allocated before binding.
        Ok(label) => match claims::ensure_claim(claim_writer, claim_plan, p).await {
            Ok(claim) => {
                let bound = ctx.writer.bind_carrying(writes, p, node, label).await;
                if let (Err(_), Some(name)) = (&bound, &claim) {
                    claims::undo(claim_writer, p, name).await;
                }
                bound
            }
            Err(e) => {
                let message = format!("Slurm job {} on node {node}: {e}", job.job_id);
                report(ctx, p, claims::REASON_CLAIM_FAILED, &message);
                return Err(ReconcileError::Claim(e));
            }
        },
        Err(e) => Err(e),
    };
    match bound {
        Ok(true) => {
            let note = format!(
                "Successfully assigned {} to {node} (Slurm job {})",
                pod_key(p),
                job.job_id
            );
            // Off the bind path: nothing waits for the Event.
            ctx.writer.event_in_background(writes, p, "Scheduled", note);
            Ok(true)
        }
        // Bound by an earlier pass (this one read the pod before the cache showed it):
        // its Scheduled Event was sent then.
        Ok(false) => Ok(true),
        // Deleted meanwhile.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => {
            let message = format!(
                "binding to node {node} (Slurm job {}) failed: {}",
                job.job_id,
                crate::k8s::api_error::Brief(&e)
            );
            report(ctx, p, reason::BINDING_FAILED, &message);
            Err(e.into())
        }
    }
}

/// The keys of the pods bound, or the first error once every bind has been tried.
fn tally<E>(results: Vec<Result<bool, E>>, to_bind: &[(&Pod, &String)]) -> Result<Vec<String>, E> {
    let mut bound_now = Vec::new();
    let mut first_error = None;
    for (r, (p, _)) in results.into_iter().zip(to_bind) {
        match r {
            Ok(true) => bound_now.push(pod_key(p)),
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(bound_now),
    }
}
