//! The controllers in-process next to [`super::Env`]'s scheduler, and the lifecycle invariants.

use super::{Env, NS, is_terminal};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use prometheus_client::registry::Registry;
use slurm_bridge::controllers::{self, ControllersHandle, ControllersOptions};
use slurm_bridge::wellknown::LABEL_SLURM_JOBID;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Running controllers; dropping this stops them.
pub struct Controllers {
    stop: Option<watch::Sender<bool>>,
    pub handle: ControllersHandle,
}

impl Controllers {
    /// Starts the controllers against `env`'s Slurm and Kubernetes with short intervals (job poll
    /// 200 ms, node listing 1 s, lost-node grace 3 s, resync 30 s), changed by `configure`.
    pub async fn start(env: &Env, configure: impl FnOnce(&mut ControllersOptions)) -> Controllers {
        Self::start_with(env, super::rest_client(&env.slurm), configure).await
    }

    /// As [`Controllers::start`], talking to Slurm through `slurm` (another user's token, ...).
    pub async fn start_with(
        env: &Env,
        slurm: slurm_rest::Client,
        configure: impl FnOnce(&mut ControllersOptions),
    ) -> Controllers {
        let mut opts = ControllersOptions::new(super::config(&env.slurm));
        opts.job_poll_interval = Duration::from_millis(200);
        opts.node_poll_interval = Duration::from_secs(1);
        opts.lost_node_grace = Duration::from_secs(3);
        opts.resync = Duration::from_secs(30);
        opts.shutdown_grace = Duration::from_millis(200);
        configure(&mut opts);
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let handle = controllers::run(
            env.kube.clone(),
            slurm,
            opts,
            &mut Registry::default(),
            watch::channel(true).1,
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )
        .await;
        let mut leading = handle.leading.clone();
        tokio::time::timeout(Duration::from_secs(60), leading.wait_for(|l| *l))
            .await
            .expect("controllers running within 60 s")
            .unwrap();
        Controllers {
            stop: Some(stop_tx),
            handle,
        }
    }

    /// Stops them and waits until they have.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let mut stopped = self.handle.stopped.clone();
        tokio::time::timeout(Duration::from_secs(10), stopped.wait_for(|s| *s))
            .await
            .expect("controllers stopped within 10 s")
            .unwrap();
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

/// The pod's `DisruptionTarget=True` condition, as (reason, message).
pub fn disruption(p: &Pod) -> Option<(String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

impl Env {
    /// The lifecycle invariants, over every namespace: no live Slurm job without a live pod, no
    /// finished pod holding the bridge finalizer, every bound live pod on a node of its job's
    /// allocation.
    pub async fn assert_invariants(&self) {
        let pods = Api::<Pod>::all(self.kube.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        for p in &pods {
            assert!(
                !(is_terminal(p) && slurm_bridge::wellknown::holds_finalizer(p)),
                "finished pod {} still holds the finalizer",
                p.name_any()
            );
        }
        for id in self.active_job_ids() {
            let uids = self.job_pod_uids(id).await;
            let live = pods
                .iter()
                .any(|p| !is_terminal(p) && super::is_pod_of_job(p, id, &uids));
            assert!(
                live,
                "Slurm job {id} is live without a live pod: {}",
                self.scontrol_job(id)
            );
        }
        let slurm_names = self.slurm_names().await;
        for p in pods.iter().filter(|p| !is_terminal(p)) {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            let id: u32 = p
                .labels()
                .get(LABEL_SLURM_JOBID)
                .unwrap_or_else(|| panic!("bound pod {} has no job id label", p.name_any()))
                .parse()
                .unwrap();
            self.assert_on_its_job(&p.name_any(), node, id, &slurm_names)
                .await;
        }
    }

    /// Waits until `check` holds for the pod `name` (`None` once the pod is gone).
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(Option<&Pod>) -> bool,
    ) -> Option<Pod> {
        let api: Api<Pod> = Api::namespaced(self.kube.clone(), NS);
        let deadline = Instant::now() + timeout;
        loop {
            let p = api.get_opt(name).await.unwrap();
            if check(p.as_ref()) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "pod {name}: {what} within {timeout:?}; now {:?}",
                p.as_ref().map(|p| (
                    p.status.as_ref().and_then(|s| s.phase.clone()),
                    p.finalizers().to_vec(),
                    p.metadata.deletion_timestamp.is_some()
                ))
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until Slurm reports job `id` neither pending nor running; returns the time it took.
    pub async fn wait_job_ended(&self, id: u32, timeout: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let job = self.rest.job(id).await.expect("job");
            if !job.job_state.iter().any(|s| {
                matches!(
                    s,
                    slurm_rest::models::JobState::Pending | slurm_rest::models::JobState::Running
                )
            }) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < timeout,
                "job {id} still {:?} after {timeout:?}",
                job.job_state
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// True while Slurm reports job `id` running.
    pub async fn job_running(&self, id: u32) -> bool {
        let job = self.rest.job(id).await.expect("job");
        job.job_state
            .contains(&slurm_rest::models::JobState::Running)
    }
}
