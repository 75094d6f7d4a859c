//! Waiting for what the tests observe on the API server: pods bound, a pod's PodScheduled
//! condition, a pod's Events.

use super::{Env, NS, describe, node_name_is_set, scheduled_condition, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use std::time::{Duration, Instant};

impl Env {
    /// Waits until all `names` are bound; panics with their state after `timeout`.
    pub async fn wait_bound(&self, names: &[String], timeout: Duration) -> Vec<Pod> {
        self.wait_bound_in(NS, names, timeout).await
    }

    /// Waits for a pod's PodScheduled=False condition with `reason`; returns its message.
    pub async fn wait_condition(&self, name: &str, reason: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let pod = self.pods().get(name).await.unwrap();
            if let Some(c) = scheduled_condition(&pod)
                && c.0 == "False"
                && c.1 == reason
            {
                return c.2;
            }
            if Instant::now() > deadline {
                panic!(
                    "pod {name} has no PodScheduled={reason} within {timeout:?}: {}",
                    describe(&pod)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The job id a pod is labelled with, once it is: a waiting pod's label follows its submit
    /// by up to `LABEL_MAX_LAG`. Panics after 30 s.
    pub async fn wait_job_id(&self, name: &str) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pod = self.pods().get(name).await.unwrap();
            if let Some(id) = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(slurm_bridge::wellknown::LABEL_SLURM_JOBID))
            {
                return id.parse().expect("numeric job id label");
            }
            assert!(
                Instant::now() < deadline,
                "pod {name} has no job id label within 30 s: {}",
                describe(&pod)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pod's Events once one with `reason` is among them (the scheduler writes a pod's
    /// condition first, its Event right after); panics after 30 s.
    pub async fn wait_event(&self, pod: &str, reason: &str) -> Vec<(String, String)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let events = self.event_reasons(pod).await;
            if events.iter().any(|(r, _)| r == reason) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "no {reason} Event for pod {pod} within 30 s: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Event reasons recorded for a pod.
    pub async fn event_reasons(&self, pod: &str) -> Vec<(String, String)> {
        let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
        let api: Api<DynamicObject> = Api::namespaced_with(self.kube.clone(), NS, &ar);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.data["regarding"]["name"] == pod)
            .map(|e| {
                (
                    e.data["reason"].as_str().unwrap_or_default().to_string(),
                    e.data["note"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// As [`Env::wait_bound`], for pods in namespace `ns`.
    pub async fn wait_bound_in(&self, ns: &str, names: &[String], timeout: Duration) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.kube.clone(), ns);
        let deadline = Instant::now() + timeout;
        loop {
            let mut pods = Vec::new();
            for n in names {
                if let Some(p) = api.get_opt(n).await.unwrap() {
                    pods.push(p);
                }
            }
            if pods.len() == names.len() && pods.iter().all(node_name_is_set) {
                return pods;
            }
            if Instant::now() > deadline {
                let states: Vec<String> = pods.iter().map(describe).collect();
                // Slurm's side too: which jobs hold which nodes, and why the others wait.
                let queue = self
                    .slurm
                    .run(&["squeue", "--all", "--noheader", "--format=%i %j %T %r %N"])
                    .unwrap_or_else(|e| format!("(squeue failed: {e})"));
                panic!(
                    "pods not bound within {timeout:?}:\n{}\nSlurm's jobs (id name state reason nodes):\n{queue}",
                    states.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Creates `pod`, retrying every 250 ms for up to `timeout` while the API server cannot call
/// the webhooks yet (a configuration change not yet picked up, a caBundle not yet filled: it
/// answers with a webhook call failure until then).
pub async fn create_retrying(api: &Api<Pod>, pod: &Pod, timeout: Duration) -> Pod {
    let deadline = Instant::now() + timeout;
    loop {
        match api.create(&kube::api::PostParams::default(), pod).await {
            Ok(p) => return p,
            Err(e) if Instant::now() < deadline => {
                eprintln!(
                    "create {}: {e}; retrying",
                    pod.metadata.name.as_deref().unwrap_or("")
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("create {}: {e}", pod.metadata.name.as_deref().unwrap_or("")),
        }
    }
}

/// Waits until pod `name` reaches `phase` (e.g. Succeeded).
pub async fn wait_phase(api: &Api<Pod>, name: &str, phase: &str, timeout: Duration) {
    wait_until(&format!("pod {name} {phase}"), timeout, async || {
        api.get(name)
            .await
            .ok()
            .and_then(|p| p.status?.phase)
            .is_some_and(|p| p == phase)
    })
    .await
}

impl Env {
    /// Waits until pod `ns/name` is gone from the API server (its containers stopped and the
    /// bridge's finalizer released); panics after `timeout`.
    pub async fn wait_pod_gone(&self, ns: &str, name: &str, timeout: Duration) {
        let api: Api<Pod> = Api::namespaced(self.kube.clone(), ns);
        wait_until(&format!("pod {ns}/{name} gone"), timeout, async || {
            api.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
}
