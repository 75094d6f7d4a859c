//! `slurm-bridge release-finalizers`: run once when the bridge goes away for good (by an admin, or
//! the chart's `pre-delete` hook). No bridge is left to release pods then, so a pod that ends
//! afterwards would keep the bridge's finalizer forever and its Slurm job would never end.
//!
//! What it does, in one pass (idempotent: a second run finds nothing to do):
//! - the Slurm job of every pod group none of whose pods is alive any more (each finished or
//!   being deleted) is cancelled, through the same [`JobControl`] trait the pod controller uses;
//! - the jobs of groups with a live pod keep running (their pods keep their nodes); nothing
//!   cancels them later, so their ids are printed for `scancel`, unless `--cancel-running`
//!   cancels them too (their pods then run on without Slurm's accounting);
//! - the bridge's finalizer is removed from every pod that holds it, live or not.

use crate::config::Config;
use crate::k8s::slim_pod::Pod;
use crate::slurm::{JobControl, SlurmJobs};
use crate::wellknown::{FINALIZER, LABEL_SLURM_JOBID};
use crate::workload::kinds::is_terminal;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use slurm_rest::models::JobState;
use std::collections::{BTreeMap, BTreeSet};

/// Flags of `release-finalizers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReleaseFinalizersArgs {
    /// Only pods in this namespace (repeatable). Default: every namespace.
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
    /// Cancel the Slurm jobs of pods that still run too (default: they keep running and their
    /// ids are printed, for `scancel`).
    #[arg(long)]
    pub cancel_running: bool,
}

/// What went wrong; each names the object and the call.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("listing pods in {scope}: {source}")]
    List {
        scope: String,
        #[source]
        source: kube::Error,
    },
    #[error("removing the finalizer {FINALIZER} from pod {pod}: {source}")]
    Finalizer {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "removing the finalizer {FINALIZER} from pod {pod}: it changed under 5 patches in a row (conflicts); run again"
    )]
    Conflicts { pod: String },
    #[error("cancelling Slurm job {job_id}: {source}")]
    Cancel {
        job_id: u32,
        #[source]
        source: slurm_rest::Error,
    },
    #[error("reading Slurm job {job_id}: {source}")]
    ReadJob {
        job_id: u32,
        #[source]
        source: slurm_rest::Error,
    },
    #[error(
        "pod {pod} has an invalid {LABEL_SLURM_JOBID} label {value:?}: a decimal job id is expected"
    )]
    BadJobId { pod: String, value: String },
}

/// The pod facts the plan needs (a table test builds them without Kubernetes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// `namespace/name`.
    pub key: String,
    /// The bridge's Slurm job of the pod, if it has one.
    pub job_id: Option<u32>,
    /// Finished (Succeeded, Failed) or being deleted: its containers stop, its job may end.
    pub done: bool,
    /// Holds the bridge's finalizer.
    pub holds_finalizer: bool,
}

/// What to do: the jobs to cancel, the jobs left running, the pods to release.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Jobs none of whose pods is alive (or every job, with `--cancel-running`).
    pub cancel: BTreeSet<u32>,
    /// Jobs with a live pod, left running.
    pub left_running: BTreeSet<u32>,
    /// Pods holding the finalizer.
    pub release: Vec<String>,
}

/// Decides from the pods alone: a job is cancelled when every pod of it is done (or always with
/// `cancel_running`), else left running; every pod with the finalizer is released.
pub fn plan(pods: &[PodFacts], cancel_running: bool) -> Plan {
    let mut live: BTreeMap<u32, bool> = BTreeMap::new();
    for p in pods {
        if let Some(id) = p.job_id {
            *live.entry(id).or_default() |= !p.done;
        }
    }
    let mut out = Plan::default();
    for (id, any_live) in live {
        if any_live && !cancel_running {
            out.left_running.insert(id);
        } else {
            out.cancel.insert(id);
        }
    }
    out.release = pods
        .iter()
        .filter(|p| p.holds_finalizer)
        .map(|p| p.key.clone())
        .collect();
    out
}

/// The counts the pass prints.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Pods whose finalizer was removed.
    pub released: usize,
    /// Jobs cancelled.
    pub cancelled: Vec<u32>,
    /// Jobs to cancel that had already ended (or Slurm no longer knew).
    pub already_ended: Vec<u32>,
    /// Jobs of live pods, left running.
    pub left_running: Vec<u32>,
}

fn facts(pod: &Pod) -> Result<Option<PodFacts>, ReleaseError> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let holds_finalizer = crate::wellknown::holds_finalizer(pod);
    let job_id = match pod.labels().get(LABEL_SLURM_JOBID) {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| ReleaseError::BadJobId {
            pod: key.clone(),
            value: v.clone(),
        })?),
    };
    if !holds_finalizer && job_id.is_none() {
        return Ok(None);
    }
    let done = is_terminal(pod) || pod.metadata.deletion_timestamp.is_some();
    Ok(Some(PodFacts {
        key,
        job_id,
        done,
        holds_finalizer,
    }))
}

fn is_active(state: &[JobState]) -> bool {
    state.iter().any(|s| {
        matches!(
            s,
            JobState::Pending | JobState::Running | JobState::Suspended
        )
    })
}

/// Cancels `job_id` unless it has ended; true when this call cancelled it.
async fn cancel_job<S: JobControl + SlurmJobs>(
    slurm: &S,
    job_id: u32,
) -> Result<bool, ReleaseError> {
    let read = |source| ReleaseError::ReadJob { job_id, source };
    match slurm.job(job_id).await.map_err(read)? {
        Some(j) if is_active(&j.job_state) => {}
        _ => return Ok(false),
    }
    if let Err(source) = slurm.cancel(job_id).await {
        // Slurm refuses to cancel a job that ended meanwhile.
        if slurm
            .job(job_id)
            .await
            .map_err(read)?
            .is_some_and(|j| is_active(&j.job_state))
        {
            return Err(ReleaseError::Cancel { job_id, source });
        }
        return Ok(false);
    }
    tracing::info!(job_id, "cancelled Slurm job");
    Ok(true)
}

/// Removes the finalizer from one pod, guarded by its resourceVersion; on a conflict the pod is
/// read again and the patch retried.
async fn release_pod(
    client: &kube::Client,
    mut pod: Pod,
    manager: &str,
) -> Result<bool, ReleaseError> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let err = |source| ReleaseError::Finalizer {
        pod: key.clone(),
        source,
    };
    for _ in 0..5 {
        if !crate::wellknown::holds_finalizer(&pod) {
            return Ok(false);
        }
        let rest: Vec<&String> = pod
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        let patch =
            json!({"metadata": {"finalizers": rest, "resourceVersion": pod.resource_version()}});
        let params = PatchParams {
            field_manager: Some(manager.to_string()),
            ..Default::default()
        };
        match api
            .patch(&pod.name_any(), &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %key, "finalizer removed");
                return Ok(true);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&pod.name_any()).await {
                Ok(Some(p)) => pod = p,
                Ok(None) => return Ok(false),
                Err(e) => return Err(err(e)),
            },
            Err(e) => return Err(err(e)),
        }
    }
    Err(ReleaseError::Conflicts { pod: key })
}

/// Every pod in `namespaces` (empty: every namespace). A failed list names its scope
/// (`namespace x`, `every namespace`) beside the error. `release-lost` lists the same way.
pub(super) async fn list_pods(
    client: &kube::Client,
    namespaces: &[String],
) -> Result<Vec<Pod>, (String, kube::Error)> {
    let mut pods = Vec::new();
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    for scope in scopes {
        let api: Api<Pod> = match scope {
            None => Api::all(client.clone()),
            Some(ns) => Api::namespaced(client.clone(), ns),
        };
        let list = api.list(&ListParams::default()).await.map_err(|source| {
            let scope = scope.map_or("every namespace".into(), |n| format!("namespace {n}"));
            (scope, source)
        })?;
        pods.extend(list.items);
    }
    Ok(pods)
}

/// One pass: lists the pods, cancels the jobs the [`plan`] says, then removes the finalizers
/// (jobs first: a released pod may vanish, and with it what says which job was its).
pub async fn release<S: JobControl + SlurmJobs>(
    client: &kube::Client,
    slurm: &S,
    namespaces: &[String],
    cancel_running: bool,
    manager: &str,
) -> Result<Outcome, ReleaseError> {
    let pods = list_pods(client, namespaces)
        .await
        .map_err(|(scope, source)| ReleaseError::List { scope, source })?;
    let mut relevant = Vec::new();
    for p in pods {
        if let Some(f) = facts(&p)? {
            relevant.push((f, p));
        }
    }
    let facts: Vec<PodFacts> = relevant.iter().map(|(f, _)| f.clone()).collect();
    let plan = plan(&facts, cancel_running);
    let mut out = Outcome {
        left_running: plan.left_running.iter().copied().collect(),
        ..Default::default()
    };
    for &id in &plan.cancel {
        if cancel_job(slurm, id).await? {
            out.cancelled.push(id);
        } else {
            out.already_ended.push(id);
        }
    }
    for (f, p) in relevant {
        if f.holds_finalizer && release_pod(client, p, manager).await? {
            out.released += 1;
        }
    }
    for id in &out.left_running {
        tracing::warn!(
            job_id = id,
            "Slurm job left running: a pod of it still runs, and nothing will cancel it (scancel it, or rerun with --cancel-running)"
        );
    }
    Ok(out)
}

/// Runs the pass and prints its counts.
pub async fn run(cfg: Config, args: ReleaseFinalizersArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let slurm = super::process::slurm_client(&cfg)?;
    let manager = if cfg.scheduler_name.is_empty() {
        "slurm-bridge-release-finalizers".to_string()
    } else {
        format!("{}-release-finalizers", cfg.scheduler_name)
    };
    let out = release(
        &client,
        &slurm,
        &args.namespaces,
        args.cancel_running,
        &manager,
    )
    .await?;
    let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    println!("finalizers removed: {} pods", out.released);
    println!(
        "Slurm jobs cancelled: {} [{}]; already ended: {} [{}]",
        out.cancelled.len(),
        ids(&out.cancelled),
        out.already_ended.len(),
        ids(&out.already_ended)
    );
    println!(
        "Slurm jobs left running (their pods still run; scancel them when the pods end): {} [{}]",
        out.left_running.len(),
        ids(&out.left_running)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(key: &str, job: Option<u32>, done: bool, fin: bool) -> PodFacts {
        PodFacts {
            key: key.into(),
            job_id: job,
            done,
            holds_finalizer: fin,
        }
    }

    #[test]
    fn finished_groups_are_cancelled_live_ones_left_running() {
        let pods = [
            pod("a/done", Some(1), true, true),
            pod("a/w0", Some(2), true, true),
            pod("a/w1", Some(2), false, true),
            pod("a/run", Some(3), false, true),
            pod("a/released", Some(4), true, false),
            pod("a/pending", None, false, true),
        ];
        let p = plan(&pods, false);
        assert_eq!(p.cancel, [1, 4].into());
        assert_eq!(p.left_running, [2, 3].into(), "a live pod keeps its job");
        assert_eq!(p.release, ["a/done", "a/w0", "a/w1", "a/run", "a/pending"]);
        let p = plan(&pods, true);
        assert_eq!(p.cancel, [1, 2, 3, 4].into());
        assert!(p.left_running.is_empty());
    }

    #[test]
    fn a_bad_job_label_is_named() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "labels": {LABEL_SLURM_JOBID: "x"}}
        }))
        .unwrap();
        let e = facts(&p).unwrap_err().to_string();
        assert!(
            e.contains("n/p") && e.contains("\"x\"") && e.contains("decimal"),
            "{e}"
        );
    }
}
