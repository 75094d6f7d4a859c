//! `slurm-bridge release-lost`: the admin accepts that Slurm lost the jobs of the pods the
//! controllers hold (state-loss hold, docs/controllers.md "Slurm losing its state"): prints the
//! pods marked `SlurmJobLost=True` and deletes them (each with a UID precondition, so a pod
//! recreated under the same name is never touched). The pod controller then releases their
//! finalizers as for any finished pod whose job is gone, their workload controllers recreate
//! them as new jobs, and the node controller lifts the drains once no held pod remains.

use crate::controllers::state_loss::is_marked;
use crate::k8s::slim_pod::Pod;
use crate::workload::ir::pod_key;
use crate::workload::kinds::jobid_label;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

/// Flags of `release-lost`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReleaseLostArgs {
    /// Only pods in this namespace (repeatable). Default: every namespace.
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
    /// Print the held pods without deleting them.
    #[arg(long)]
    pub dry_run: bool,
}

/// What went wrong; each names the object and the call.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseLostError {
    #[error("listing pods in {scope}: {source}")]
    List {
        scope: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting pod {pod}: {source}")]
    Delete {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// A pod held for a job Slurm lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPod {
    /// `namespace/name`.
    pub key: String,
    pub uid: Option<String>,
    /// Its job id label.
    pub job: String,
    /// The node it runs on.
    pub node: String,
}

impl std::fmt::Display for HeldPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (Slurm job {}, node {})",
            self.key, self.job, self.node
        )
    }
}

/// The held pods among `pods`: marked `SlurmJobLost=True` and not being deleted already.
pub fn held(pods: &[Pod]) -> Vec<HeldPod> {
    let mut out: Vec<HeldPod> = pods
        .iter()
        .filter(|p| is_marked(p) && p.metadata.deletion_timestamp.is_none())
        .map(|p| HeldPod {
            key: pod_key(p),
            uid: p.uid(),
            job: jobid_label(p).unwrap_or("?").to_string(),
            node: crate::k8s::bound_node(p).unwrap_or("?").to_string(),
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Lists the held pods in `namespaces` (empty: every namespace) and, unless `dry_run`, deletes
/// them; returns them.
pub async fn release_lost(
    client: &kube::Client,
    namespaces: &[String],
    dry_run: bool,
) -> Result<Vec<HeldPod>, ReleaseLostError> {
    let pods = super::release_finalizers::list_pods(client, namespaces)
        .await
        .map_err(|(scope, source)| ReleaseLostError::List { scope, source })?;
    let held = held(&pods);
    if dry_run {
        return Ok(held);
    }
    for h in &held {
        let (ns, name) = h.key.split_once('/').unwrap_or(("", &h.key));
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: h.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        tracing::info!(pod = %h.key, job = %h.job, "deleting a pod held for a job Slurm lost");
        match api.delete(name, &params).await {
            Ok(_) => {}
            // Gone, or another pod under that name now: nothing of ours to delete.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(ReleaseLostError::Delete {
                    pod: h.key.clone(),
                    source,
                });
            }
        }
    }
    Ok(held)
}

/// Runs `release-lost` once.
pub async fn run(args: ReleaseLostArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let held = release_lost(&client, &args.namespaces, args.dry_run).await?;
    let verb = if args.dry_run {
        "held (not deleted: --dry-run)"
    } else {
        "deleted"
    };
    for h in &held {
        println!("{h}");
    }
    println!("pods held for jobs Slurm lost, {verb}: {}", held.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cond: Option<&str>, deleting: bool) -> Pod {
        let conditions = match cond {
            Some(status) => json!([{"type": "SlurmJobLost", "status": status}]),
            None => json!([]),
        };
        let mut meta = json!({"name": name, "namespace": "ns", "uid": format!("u-{name}"),
            "labels": {crate::wellknown::LABEL_SLURM_JOBID: "4"}});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn only_pods_marked_held_and_not_deleting() {
        let pods = vec![
            pod("b", Some("True"), false),
            pod("a", Some("True"), false),
            pod("found", Some("False"), false),
            pod("plain", None, false),
            pod("going", Some("True"), true),
        ];
        let held = held(&pods);
        let keys: Vec<&str> = held.iter().map(|h| h.key.as_str()).collect();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        assert_eq!(held[0].to_string(), "ns/a (Slurm job 4, node n1)");
        assert_eq!(held[0].uid.as_deref(), Some("u-a"));
    }
}
