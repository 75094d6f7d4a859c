//! End-to-end harness: real Slurm (slurm-testenv), a real Kubernetes control plane
//! (kube-testenv: kube-apiserver, etcd, kube-controller-manager, the node agent and, on request,
//! the JobSet and LeaderWorkerSet controllers), the kube-rs client, and the scheduler in-process.

#![allow(dead_code)]

pub mod admission;
pub mod clients;
pub mod controllers;
mod figures;
mod gated;
pub mod helm;
mod invariants;
pub mod kube_proxy;
mod objects;
mod poll;
mod process;
pub mod prometheus;
pub mod tenants;
mod waits;

// What each test binary uses of these differs; every name stays reachable at `e2e::`.
#[allow(unused_imports)]
pub use figures::percentile;
#[allow(unused_imports)]
pub use gated::{Gated, SlurmWrites};
#[allow(unused_imports)]
pub use invariants::{is_pod_of_job, job_field};
#[allow(unused_imports)]
pub use objects::{
    allocated, claim_name, describe, is_terminal, job_id_of, node_name_is_set, node_of, pod,
    scheduled_condition, sleeper, terminated,
};
#[allow(unused_imports)]
pub use poll::{wait_for, wait_some, wait_until};
#[allow(unused_imports)]
pub use process::{free_port, spawn_run, temp_dir, terminate, write_config};
#[allow(unused_imports)]
pub use waits::{create_retrying, wait_phase};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use prometheus_client::registry::Registry;
use serde_json::Value;
use slurm_bridge::caches::Caches;
use slurm_bridge::config::Config;
use slurm_bridge::scheduler::{self, SchedulerHandle, SchedulerOptions};
use slurm_bridge::slurm::{Instrumented, Slurm};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const SCHEDULER: &str = "slurm-bridge-scheduler";
pub const NS: &str = "default";

pub struct Env {
    pub slurm: Arc<slurm_testenv::Instance>,
    pub kube_env: kube_testenv::Instance,
    pub kube: Client,
    pub rest: slurm_rest::Client,
    stop: Option<watch::Sender<bool>>,
    pub handle: Option<SchedulerHandle>,
}

/// The suites' config. Their pods' authors may set every `slurmjob.*` key, as under the Go
/// original (a `defaultTenant` allowing all): these suites test what Slurm does with what is
/// asked; tenancy_e2e tests what a tenant allows.
pub fn config(slurm: &slurm_testenv::Instance) -> Config {
    Config {
        scheduler_name: SCHEDULER.into(),
        slurm_rest_api: slurm.rest_url().into(),
        partition: "slurm-bridge".into(),
        mcs_label: String::new(),
        default_tenant: Some(slurm_bridge::tenancy::Tenant {
            name: "e2e".into(),
            allow_annotations: slurm_bridge::tenancy::PolicyKey::ALL.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn rest_client(slurm: &slurm_testenv::Instance) -> slurm_rest::Client {
    slurm_rest::Client::builder(slurm.rest_url())
        .token(slurm_rest::TokenProvider::file(slurm.token_file()))
        .build()
        .expect("slurm client")
}

impl Env {
    /// Real Slurm with `nodes` external nodes and a real control plane with the same node names.
    pub async fn start(nodes: u32) -> Env {
        Self::start_configured(nodes, |_| {}).await
    }

    /// As [`Env::start`], with the JobSet and LeaderWorkerSet controllers running too.
    pub async fn start_with_workload_controllers(nodes: u32) -> Env {
        Self::start_configured(nodes, |o| o.workload_controllers = true).await
    }

    /// As [`Env::start`], with the control plane's options changed by `configure`.
    pub async fn start_configured(
        nodes: u32,
        configure: impl FnOnce(&mut kube_testenv::InstanceOptions),
    ) -> Env {
        let mut opts = kube_testenv::InstanceOptions::with_nodes(nodes as usize);
        // Slurm's external nodes stand for these nodes: the node controller keeps them (an
        // unlabelled node's external Slurm node is drained and removed).
        for n in &mut opts.nodes {
            n.labels.insert(
                slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
                "true".into(),
            );
        }
        configure(&mut opts);
        let slurm_opts = slurm_testenv::InstanceOptions {
            nodes,
            ..Default::default()
        };
        Self::start_with(slurm_opts, opts).await
    }

    /// Hybrid nodes: Slurm nodes `node-1` .. `node-N` run by real slurmd daemons under
    /// `policy`, and the Kubernetes nodes of the same hosts (same names, not labelled external:
    /// slurmd, not the bridge, owns their Slurm nodes), changed by `configure`.
    pub async fn start_hybrid(
        slurmd_nodes: u32,
        policy: slurm_testenv::conf::Policy,
        configure: impl FnOnce(&mut kube_testenv::InstanceOptions),
    ) -> Env {
        let mut opts = kube_testenv::InstanceOptions::with_nodes(slurmd_nodes as usize);
        configure(&mut opts);
        let slurm_opts = slurm_testenv::InstanceOptions {
            slurmd_nodes,
            policy,
            ..Default::default()
        };
        Self::start_with(slurm_opts, opts).await
    }

    /// A control plane of its own beside `slurm`, a Slurm another Env uses too (several
    /// Kubernetes clusters sharing one Slurm).
    pub async fn start_sharing(
        slurm: Arc<slurm_testenv::Instance>,
        kube_opts: kube_testenv::InstanceOptions,
    ) -> Env {
        init_tracing();
        let kube_env = kube_testenv::Instance::start(kube_opts)
            .await
            .expect("start the Kubernetes control plane");
        let kube = kube_env.client();
        let rest = rest_client(&slurm);
        Env {
            slurm,
            kube_env,
            kube,
            rest,
            stop: None,
            handle: None,
        }
    }

    /// Real Slurm and a real control plane, started side by side.
    pub async fn start_with(
        slurm_opts: slurm_testenv::InstanceOptions,
        kube_opts: kube_testenv::InstanceOptions,
    ) -> Env {
        init_tracing();
        let slurm = tokio::task::spawn_blocking(move || slurm_testenv::Instance::start(slurm_opts));
        let kube_env = kube_testenv::Instance::start(kube_opts)
            .await
            .expect("start the Kubernetes control plane");
        let slurm = slurm.await.unwrap().expect("start Slurm");
        let kube = kube_env.client();
        let rest = rest_client(&slurm);
        Env {
            slurm: Arc::new(slurm),
            kube_env,
            kube,
            rest,
            stop: None,
            handle: None,
        }
    }

    /// Starts the scheduler (job poll 200 ms) with the real Slurm client.
    pub async fn start_scheduler(&mut self) {
        let slurm = rest_client(&self.slurm);
        self.start_scheduler_with(slurm).await;
    }

    pub async fn start_scheduler_with<S: Slurm>(&mut self, slurm: S) {
        self.start_scheduler_led(slurm, watch::channel(true).1)
            .await;
    }

    /// Starts the scheduler with the given leadership signal.
    pub async fn start_scheduler_led<S: Slurm>(&mut self, slurm: S, leader: watch::Receiver<bool>) {
        self.start_scheduler_opts(slurm, leader, |_| {}).await;
    }

    /// Starts the scheduler with the given leadership signal and options changed by `configure`
    /// (defaults: job poll 200 ms, node poll and sweep 2 s, shutdown grace 200 ms), as
    /// `scheduler::run` does; returns its caches (they stop once the scheduler has stopped), so
    /// a test can see what the scheduler sees.
    pub async fn start_scheduler_opts<S: Slurm>(
        &mut self,
        slurm: S,
        leader: watch::Receiver<bool>,
        configure: impl FnOnce(&mut SchedulerOptions),
    ) -> Arc<Caches<Instrumented<S>>> {
        let mut opts = scheduler_options(&self.slurm);
        configure(&mut opts);
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let (ready_tx, _ready_rx) = watch::channel(false);
        let mut registry = Registry::default();
        let slurm = Arc::new(Instrumented::new(slurm, &mut registry));
        let (caches, tasks) = Caches::start(self.kube.clone(), slurm, &opts.cache_options());
        let mut handle = scheduler::run_with(
            self.kube.clone(),
            caches.clone(),
            opts,
            &mut registry,
            leader,
            ready_tx,
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )
        .await;
        tasks.stop_after(&mut handle.stopped);
        self.adopt_scheduler(handle, stop_tx).await;
        caches
    }

    /// Waits until a scheduler started by the test is ready, then keeps its handle and its stop
    /// signal (sent by [`Env::begin_stop`], or when the Env is dropped).
    pub async fn adopt_scheduler(&mut self, handle: SchedulerHandle, stop: watch::Sender<bool>) {
        let mut ready = handle.ready.clone();
        tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
            .await
            .expect("scheduler ready within 60 s")
            .unwrap();
        self.stop = Some(stop);
        self.handle = Some(handle);
    }

    /// The running scheduler's handle.
    pub fn handle(&self) -> &SchedulerHandle {
        self.handle.as_ref().expect("a scheduler was started")
    }

    /// Sends the scheduler its shutdown signal without waiting (see [`Env::wait_stopped`]).
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }

    /// Waits until the scheduler has stopped after [`Env::begin_stop`].
    pub async fn wait_stopped(&mut self, timeout: Duration) {
        let mut stopped = self.handle.take().expect("handle").stopped;
        tokio::time::timeout(timeout, stopped.wait_for(|s| *s))
            .await
            .expect("scheduler stopped in time")
            .unwrap();
    }

    /// Stops the scheduler as a crash would: in-flight work is abandoned after 200 ms (the
    /// default grace of [`Env::start_scheduler_opts`]) and no Kubernetes or Slurm state is
    /// cleaned up.
    pub async fn stop_scheduler(&mut self) {
        if self.stop.is_some() {
            self.begin_stop();
            self.wait_stopped(Duration::from_secs(10)).await;
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.kube.clone(), NS)
    }

    pub async fn create(&self, manifest: Value) -> DynamicObject {
        let (group, version) = match manifest["apiVersion"].as_str().unwrap().rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                manifest["apiVersion"].as_str().unwrap().to_string(),
            ),
        };
        let kind = manifest["kind"].as_str().unwrap().to_string();
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.kube, &gvk)
            .await
            .expect("kind served");
        let api: Api<DynamicObject> = Api::namespaced_with(self.kube.clone(), NS, &ar);
        let obj: DynamicObject = serde_json::from_value(manifest).unwrap();
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create")
    }

    pub async fn create_pod(&self, pod: Value) -> Pod {
        let p: Pod = serde_json::from_value(pod).unwrap();
        self.pods()
            .create(&PostParams::default(), &p)
            .await
            .expect("create pod")
    }
}

/// The scheduler's options in tests: job poll 200 ms, node poll and sweep 2 s, shutdown grace
/// 200 ms.
pub fn scheduler_options(slurm: &slurm_testenv::Instance) -> SchedulerOptions {
    let mut opts = SchedulerOptions::new(config(slurm));
    opts.job_poll_interval = Duration::from_millis(200);
    opts.node_poll_interval = Duration::from_secs(2);
    opts.sweep_interval = Duration::from_secs(2);
    opts.shutdown_grace = Duration::from_millis(200);
    opts
}

/// Test logs (`RUST_LOG`, default info) go to the test's captured output.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=warn,kube_runtime=warn".into()),
        )
        .with_test_writer()
        .try_init();
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}
