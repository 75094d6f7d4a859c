//! The churn: bare pods, Jobs and gangs (coscheduling PodGroups) created at a steady rate until
//! the plan's pod count, each running 1-5 s and sharing nodes; about one workload in five deleted again
//! (pending, running or done), Jobs with background or foreground propagation.

use super::{Rng, within};
use crate::e2e::{NS, SCHEDULER};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use slurm_bridge::wellknown::slurmjob::EXCLUSIVE;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bare,
    Job,
    Gang,
}

/// One created workload.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub kind: Kind,
    pub pods: usize,
    pub deleted: bool,
    /// A delete was sent but its answer was lost (a fault, a timeout): it may have happened.
    pub maybe_deleted: bool,
}

/// What the churn did so far.
#[derive(Default, Debug)]
pub struct Churn {
    pub workloads: Vec<Workload>,
    pub pods_created: usize,
    pub deleted: usize,
    /// Creations or deletions refused or unanswered (the API server was down): retried later.
    pub api_errors: usize,
}

pub fn coscheduling(kube: &Client) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    Api::namespaced_with(kube.clone(), NS, &ar)
}

fn pod_spec(secs: u64) -> Value {
    json!({
        "schedulerName": SCHEDULER,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", secs.to_string()],
                        "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
    })
}

/// The annotations of each workload's root object (the pod, the Job, the PodGroup: the
/// translation reads no controlled pod's own): they share their nodes (`exclusive: "false"`). Whole-node jobs (the
/// default) are left out: with no time limits Slurm cannot backfill behind a pending
/// whole-node gang, so one at the head of the queue stalls every job behind it.
fn annotations() -> Value {
    json!({EXCLUSIVE: "false"})
}

fn pod(name: &str, labels: Value, annotations: Value, secs: u64) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": pod_spec(secs),
    }))
    .unwrap()
}

/// Creates workloads until `target` pods, paced to take `over`; deletes some on the way.
pub async fn run(kube: Client, target: usize, over: Duration, seed: u64, state: Arc<Mutex<Churn>>) {
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    let mut n = 0;
    loop {
        let created = state.lock().unwrap().pods_created;
        if created >= target {
            return;
        }
        let due = (target as f64 * started.elapsed().as_secs_f64() / over.as_secs_f64()) as usize;
        if created >= due.max(1) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        n += 1;
        let secs = rng.between(1, 5);
        let notes = annotations();
        let kind = match rng.between(0, 9) {
            0..=3 => Kind::Bare,
            4..=6 => Kind::Job,
            _ => Kind::Gang,
        };
        let size = if kind == Kind::Bare {
            1
        } else {
            rng.between(2, 3) as usize
        };
        let name = match kind {
            Kind::Bare => format!("cp-{n}"),
            Kind::Job => format!("cj-{n}"),
            Kind::Gang => format!("cg-{n}"),
        };
        let made = match kind {
            Kind::Bare => within(
                5,
                pods.create(&PostParams::default(), &pod(&name, json!({}), notes, secs)),
            )
            .await
            .map(|_| ()),
            Kind::Job => {
                let job: Job = serde_json::from_value(json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": NS, "annotations": notes},
                    "spec": {"parallelism": size, "completions": size, "backoffLimit": 6,
                             "template": {"spec": pod_spec(secs)}},
                }))
                .unwrap();
                within(
                    5,
                    Api::<Job>::namespaced(kube.clone(), NS).create(&PostParams::default(), &job),
                )
                .await
                .map(|_| ())
            }
            Kind::Gang => create_gang(&kube, &name, size, secs, notes).await,
        };
        let victim = {
            let mut s = state.lock().unwrap();
            match made {
                Ok(()) => {
                    s.pods_created += size;
                    s.workloads.push(Workload {
                        name,
                        kind,
                        pods: size,
                        deleted: false,
                        maybe_deleted: false,
                    });
                }
                Err(e) => {
                    s.api_errors += 1;
                    tracing::info!(workload = %name, error = %e, "chaos: create failed, retried later");
                }
            }
            // About one in five: delete an earlier workload, whatever its state.
            let i = rng.between(0, s.workloads.len().max(2) as u64 - 2) as usize;
            (s.workloads.len() > 3 && rng.chance(0.2) && !s.workloads[i].deleted)
                .then(|| (i, s.workloads[i].clone()))
        };
        if let Some((i, w)) = victim {
            let r = delete(&kube, &w, rng.chance(0.5)).await;
            let mut s = state.lock().unwrap();
            match r {
                Ok(()) => {
                    s.workloads[i].deleted = true;
                    s.deleted += 1;
                }
                Err(e) => {
                    s.api_errors += 1;
                    s.workloads[i].maybe_deleted = true;
                    tracing::info!(workload = %w.name, error = %e, "chaos: delete failed");
                }
            }
        }
    }
}

async fn create_gang(
    kube: &Client,
    name: &str,
    size: usize,
    secs: u64,
    notes: Value,
) -> Result<(), String> {
    let group: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "annotations": notes},
        "spec": {"minMember": size},
    }))
    .unwrap();
    let api = coscheduling(kube);
    match within(5, api.create(&PostParams::default(), &group)).await {
        Ok(_) => {}
        Err(e) if e.contains("already exists") => {}
        Err(e) => return Err(e),
    }
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    for i in 0..size {
        let p = pod(
            &format!("{name}-{i}"),
            json!({"scheduling.x-k8s.io/pod-group": name}),
            notes.clone(),
            secs,
        );
        match within(5, pods.create(&PostParams::default(), &p)).await {
            Ok(_) => {}
            Err(e) if e.contains("already exists") => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Deletes a workload through its owner (a Job with `foreground` or background propagation; a
/// gang's pods and PodGroup; a bare pod).
pub async fn delete(kube: &Client, w: &Workload, foreground: bool) -> Result<(), String> {
    let gone = |r: Result<(), String>| match r {
        Err(e) if e.contains("not found") => Ok(()),
        other => other,
    };
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    match w.kind {
        Kind::Bare => gone(
            within(5, pods.delete(&w.name, &DeleteParams::default()))
                .await
                .map(|_| ()),
        ),
        Kind::Job => {
            let dp = DeleteParams {
                propagation_policy: Some(if foreground {
                    PropagationPolicy::Foreground
                } else {
                    PropagationPolicy::Background
                }),
                ..Default::default()
            };
            gone(
                within(
                    5,
                    Api::<Job>::namespaced(kube.clone(), NS).delete(&w.name, &dp),
                )
                .await
                .map(|_| ()),
            )
        }
        Kind::Gang => {
            for i in 0..w.pods {
                gone(
                    within(
                        5,
                        pods.delete(&format!("{}-{i}", w.name), &DeleteParams::default()),
                    )
                    .await
                    .map(|_| ()),
                )?;
            }
            gone(
                within(
                    5,
                    coscheduling(kube).delete(&w.name, &DeleteParams::default()),
                )
                .await
                .map(|_| ()),
            )
        }
    }
}
