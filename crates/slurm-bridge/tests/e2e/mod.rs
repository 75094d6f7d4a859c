//! End-to-end harness: real Slurm (slurm-testenv), a real Kubernetes control plane
//! (kube-testenv: kube-apiserver, etcd, kube-controller-manager, the node agent and, on request,
//! the JobSet and LeaderWorkerSet controllers), the kube-rs client, and the scheduler in-process.

#![allow(dead_code)]

pub mod admission;
pub mod clients;
pub mod controllers;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use slurm_bridge::config::Config;
use slurm_bridge::scheduler::{self, SchedulerHandle, SchedulerOptions};
use slurm_bridge::slurm::JobControl;
use slurm_bridge::slurm::Slurm;
use slurm_bridge::slurm::{SlurmJobs, SlurmNodes};
use slurm_bridge::wellknown::LABEL_SLURM_JOBID;
use slurm_bridge::workload::admin_comment::AdminComment;
use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};

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

pub fn config(slurm: &slurm_testenv::Instance) -> Config {
    Config {
        scheduler_name: SCHEDULER.into(),
        slurm_rest_api: slurm.rest_url().into(),
        partition: "slurm-bridge".into(),
        mcs_label: String::new(),
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
    /// (defaults: job poll 200 ms, node poll and sweep 2 s, shutdown grace 200 ms).
    pub async fn start_scheduler_opts<S: Slurm>(
        &mut self,
        slurm: S,
        leader: watch::Receiver<bool>,
        configure: impl FnOnce(&mut SchedulerOptions),
    ) {
        let mut opts = scheduler_options(&self.slurm);
        configure(&mut opts);
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let (ready_tx, _ready_rx) = watch::channel(false);
        let mut registry = Registry::default();
        let handle = scheduler::run(
            self.kube.clone(),
            slurm,
            opts,
            &mut registry,
            leader,
            ready_tx,
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )
        .await;
        self.adopt_scheduler(handle, stop_tx).await;
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

    /// Ids of the external jobs (the bridge's kind) Slurm lists in `states`; batch jobs of
    /// hybrid nodes belong to no pod and are left out.
    fn external_job_ids(&self, states: &str) -> Vec<u32> {
        let out = self
            .slurm
            .run(&["squeue", "--json", &format!("--states={states}")])
            .unwrap();
        let v: Value = serde_json::from_str(&out).expect("squeue --json");
        v["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| {
                j["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == "EXTERNAL_JOB"))
            })
            .filter_map(|j| j["job_id"].as_u64())
            .map(|id| id as u32)
            .collect()
    }

    /// Ids of every external job Slurm lists (any state).
    pub fn slurm_job_ids(&self) -> Vec<u32> {
        self.external_job_ids("all")
    }

    /// Ids of pending or running external jobs.
    pub fn active_job_ids(&self) -> Vec<u32> {
        self.external_job_ids("PENDING,RUNNING")
    }

    /// Kubernetes node name -> the Slurm node behind it (the `slurm-nodename` label, else the
    /// node's own name).
    pub async fn slurm_names(&self) -> BTreeMap<String, String> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.kube.clone());
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| {
                let slurm = n
                    .labels()
                    .get(slurm_bridge::wellknown::LABEL_SLURM_NODENAME)
                    .cloned()
                    .unwrap_or_else(|| n.name_any());
                (n.name_any(), slurm)
            })
            .collect()
    }

    pub fn scontrol_job(&self, id: u32) -> String {
        self.slurm
            .run(&["scontrol", "show", "job", &id.to_string()])
            .unwrap()
    }

    /// The invariants every test checks: each bound pod runs on the Kubernetes node behind one
    /// of its Slurm job's allocated nodes, each bridge job's admin_comment lists exactly the pods
    /// labelled with its id, and Slurm has no other job (none submitted twice or cancelled).
    pub async fn assert_consistent(&self) {
        let pods = self
            .pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let slurm_names = self.slurm_names().await;
        let mut by_job: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
        for p in &pods {
            if let Some(id) = p.labels().get(LABEL_SLURM_JOBID) {
                let id: u32 = id.parse().expect("numeric job id label");
                by_job
                    .entry(id)
                    .or_default()
                    .insert(format!("{NS}/{}", p.name_any()));
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    let job = self.rest.job(id).await.expect("job of a bound pod exists");
                    let allocated =
                        slurm_rest::hostlist::expand(job.nodes.as_deref().unwrap_or("")).unwrap();
                    let slurm_node = slurm_names.get(node).map_or(node, String::as_str);
                    assert!(
                        allocated.iter().any(|n| n == slurm_node),
                        "pod {} runs on {node} (Slurm node {slurm_node}), not on its job {id}'s nodes {allocated:?}",
                        p.name_any()
                    );
                }
            }
        }
        // Every job Slurm knows (any state) stands for labelled pods: no stray or cancelled
        // duplicate was ever submitted.
        let known: BTreeSet<u32> = by_job.keys().copied().collect();
        for id in self.slurm_job_ids() {
            assert!(
                known.contains(&id),
                "Slurm job {id} belongs to no pod: {}",
                self.scontrol_job(id)
            );
        }
        for (id, labelled) in by_job {
            let job = self.rest.job(id).await.expect("labelled job exists");
            let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap_or("")).unwrap();
            let listed: BTreeSet<String> = comment.pods.into_iter().collect();
            assert_eq!(listed, labelled, "job {id}: admin_comment vs labelled pods");
        }
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

pub fn node_name_is_set(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

pub fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

pub fn describe(p: &Pod) -> String {
    format!(
        "{} node={:?} labels={:?} condition={:?}",
        p.name_any(),
        p.spec.as_ref().and_then(|s| s.node_name.clone()),
        p.labels(),
        scheduled_condition(p)
    )
}

/// A pod for the bridge scheduler that runs until deleted.
pub fn pod(name: &str, annotations: Value, spec_extra: Value) -> Value {
    let mut spec = json!({
        "schedulerName": SCHEDULER,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                         "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": spec,
    })
}

pub fn job_id_of(p: &Pod) -> u32 {
    p.labels()
        .get(LABEL_SLURM_JOBID)
        .expect("job id label")
        .parse()
        .unwrap()
}

/// What the scheduler asked of Slurm through a [`Gated`] client, and the gate its submits pass.
pub struct SlurmWrites {
    /// Submits that reached the client (passed the gate or waiting at it).
    pub submits_entered: watch::Sender<usize>,
    pub submitted: AtomicUsize,
    pub updated: AtomicUsize,
    pub cancelled: AtomicUsize,
    /// A submit takes a permit before it reaches Slurm.
    pub gate: Semaphore,
}

impl SlurmWrites {
    /// Submits wait at the gate until [`SlurmWrites::let_through`].
    pub fn closed() -> Arc<Self> {
        Arc::new(SlurmWrites {
            submits_entered: watch::Sender::new(0),
            submitted: AtomicUsize::new(0),
            updated: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            gate: Semaphore::new(0),
        })
    }

    /// Every submit passes.
    pub fn open() -> Arc<Self> {
        let w = Self::closed();
        w.let_through(Semaphore::MAX_PERMITS);
        w
    }

    /// Lets `n` more submits through the gate.
    pub fn let_through(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Waits until `n` submits have reached the client.
    pub async fn wait_entered(&self, n: usize, timeout: Duration) {
        let mut entered = self.submits_entered.subscribe();
        tokio::time::timeout(timeout, entered.wait_for(|e| *e >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} submit(s) within {timeout:?}"))
            .unwrap();
    }

    /// Submits, updates and cancels that reached Slurm.
    pub fn writes(&self) -> usize {
        self.submitted.load(Ordering::SeqCst)
            + self.updated.load(Ordering::SeqCst)
            + self.cancelled.load(Ordering::SeqCst)
    }
}

/// The real Slurm client, counting the scheduler's writes and holding each submit at a gate.
pub struct Gated {
    pub inner: slurm_rest::Client,
    pub writes: Arc<SlurmWrites>,
}

impl JobControl for Gated {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        self.writes.submits_entered.send_modify(|n| *n += 1);
        self.writes
            .gate
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
        let id = JobControl::submit(&self.inner, desc).await?;
        self.writes.submitted.fetch_add(1, Ordering::SeqCst);
        Ok(id)
    }
    async fn update(&self, id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        self.writes.updated.fetch_add(1, Ordering::SeqCst);
        JobControl::update(&self.inner, id, desc).await
    }
    async fn cancel(&self, id: u32) -> Result<(), slurm_rest::Error> {
        self.writes.cancelled.fetch_add(1, Ordering::SeqCst);
        JobControl::cancel(&self.inner, id).await
    }
}

impl SlurmJobs for Gated {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        SlurmJobs::list_jobs(&self.inner).await
    }
    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        SlurmJobs::job_states(&self.inner).await
    }
    async fn job(&self, id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        SlurmJobs::job(&self.inner, id).await
    }
}

impl SlurmNodes for Gated {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        SlurmNodes::list_nodes(&self.inner).await
    }
}

impl Env {
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
                panic!("pods not bound within {timeout:?}:\n{}", states.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The ResourceClaim a pod's `extendedResourceClaimStatus` names.
pub fn claim_name(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|s| s.resource_claim_name.clone())
}

/// A claim's allocated (driver, pool, device) triples.
pub fn allocated(
    c: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> Vec<(String, String, String)> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.driver, r.pool, r.device))
        .collect()
}

/// Sends SIGTERM to a process this test started and waits (up to 30 s) for its exit status.
pub async fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "no exit within 30 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `slurm-bridge run` as an admin would, against `env`'s Slurm and control plane: a config
/// file in `dir` (the scheduler name, the Slurm URL, the partition, then `config_extra` lines),
/// KUBECONFIG and SLURM_JWT_FILE, no leader election, a 200 ms job poll, the probes on a free
/// port, then `args`; the log goes to `dir/run.log`. Returns the process and the config path.
pub fn spawn_run<A: AsRef<std::ffi::OsStr>>(
    env: &Env,
    dir: &std::path::Path,
    config_extra: &str,
    args: impl IntoIterator<Item = A>,
) -> (std::process::Child, std::path::PathBuf) {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "schedulerName: {SCHEDULER}\nslurmRestApi: {}\npartition: slurm-bridge\n{config_extra}",
            env.slurm.rest_url()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args(["run", "--config"])
        .arg(&config)
        .args([
            "--leader-elect=false",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--slurm-poll-interval",
            "200ms",
        ])
        .args(args)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env_remove("SLURM_JWT")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start slurm-bridge run");
    (child, config)
}
