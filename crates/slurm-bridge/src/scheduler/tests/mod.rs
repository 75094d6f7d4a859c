//! One reconcile pass, tested in milliseconds: a fake Slurm ([`fake_slurm`]) and an in-memory
//! Kubernetes API ([`fake_kube`]) behind the real [`Ctx`], the real `reconcile` and
//! `error_policy`.
//!
//! A test describes a [`World`] (objects in the API server, nodes, Slurm jobs in the watcher
//! index and in Slurm, failures to inject, passes to run first), runs one pass of one pod, and
//! compares what the pass did with a [`Row`]: the Slurm writes (in order), the Kubernetes writes
//! (as a set), and the returned [`Action`] (or the error and `error_policy`'s retry). Rows live
//! in [`reconcile_table`]; adding a case is adding a `Row`.

mod fake_kube;
mod fake_slurm;
mod reconcile_table;

use crate::caches::CacheHandles;
use crate::config::Config;
use crate::scheduler::context::Ctx;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::reconcile::{error_policy, reconcile};
use crate::slurm::{JobEvent, WatchedJob};
use crate::wellknown::{FINALIZER, LABEL_COSCHEDULING_POD_GROUP, LABEL_SLURM_JOBID};
use crate::workload::admin_comment::AdminComment;
use fake_kube::{FakeKube, object_path};
use fake_slurm::{FakeSlurm, SlurmFailure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use slurm_rest::models::{JobInfo, JobState};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use axum::http::Method;
pub use fake_slurm::FIRST_SUBMITTED_ID;

/// The scheduler's name in the tests' config.
pub const SCHEDULER: &str = "slurm-bridge-scheduler";

/// The namespace of every namespaced object the builders make.
pub const NS: &str = "ns";

/// A Kubernetes object under construction (JSON, as the API server would hold it).
#[derive(Clone, Debug)]
pub struct Obj(pub Value);

/// A pending, unbound pod `ns/<name>` with one container.
pub fn pod(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }))
}

/// A Ready node; its Slurm name is its name.
pub fn node(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }))
}

/// A batch/v1 Job `ns/<name>`.
pub fn batch_job(name: &str) -> Obj {
    Obj(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
}

/// A built-in PodGroup (scheduling.k8s.io/v1alpha2); a gang of `min_count` when given.
pub fn podgroup(name: &str, min_count: Option<i32>) -> Obj {
    let policy = match min_count {
        Some(n) => json!({"gang": {"minCount": n}}),
        None => json!({"basic": {}}),
    };
    Obj(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"schedulingPolicy": policy},
    }))
}

/// A coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1) with `minMember` and a phase.
pub fn coscheduling_podgroup(name: &str, min_member: i32, phase: &str) -> Obj {
    Obj(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": min_member},
        "status": {"phase": phase},
    }))
}

impl Obj {
    /// Sets the value at a JSON pointer (`/spec/nodeName`), creating objects on the way.
    pub fn set(mut self, pointer: &str, value: Value) -> Self {
        let mut at = &mut self.0;
        for key in pointer.trim_start_matches('/').split('/') {
            if !at.is_object() {
                *at = json!({});
            }
            at = at
                .as_object_mut()
                .expect("object")
                .entry(key.replace("~1", "/").replace("~0", "~"))
                .or_insert(Value::Null);
        }
        *at = value;
        self
    }

    fn meta_entry(mut self, map: &str, key: &str, value: &str) -> Self {
        if !self.0["metadata"][map].is_object() {
            self.0["metadata"][map] = json!({});
        }
        self.0["metadata"][map][key] = json!(value);
        self
    }

    pub fn label(self, key: &str, value: &str) -> Self {
        self.meta_entry("labels", key, value)
    }

    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.meta_entry("annotations", key, value)
    }

    /// The Slurm job id label.
    pub fn job_label(self, job_id: u32) -> Self {
        self.label(LABEL_SLURM_JOBID, &job_id.to_string())
    }

    /// A controller owner reference.
    pub fn owned_by(self, api_version: &str, kind: &str, name: &str) -> Self {
        self.set(
            "/metadata/ownerReferences",
            json!([{"apiVersion": api_version, "kind": kind, "name": name,
                    "uid": format!("uid-{name}"), "controller": true}]),
        )
    }

    /// A pod of the batch Job `name`.
    pub fn of_job(self, name: &str) -> Self {
        self.owned_by("batch/v1", "Job", name)
            .label("batch.kubernetes.io/job-name", name)
    }

    /// A pod of the built-in PodGroup `name` (`spec.schedulingGroup`).
    pub fn in_podgroup(self, name: &str) -> Self {
        self.set("/spec/schedulingGroup", json!({"podGroupName": name}))
    }

    /// A pod of the coscheduling PodGroup `name` (label).
    pub fn in_coscheduling(self, name: &str) -> Self {
        self.label(LABEL_COSCHEDULING_POD_GROUP, name)
    }

    /// A pod with a scheduling gate.
    pub fn gated(self) -> Self {
        self.set(
            "/spec/schedulingGates",
            json!([{"name": "example.com/quota"}]),
        )
    }

    pub fn bound_to(self, node: &str) -> Self {
        self.set("/spec/nodeName", json!(node))
    }

    /// As the scheduler's label patch for job `job_id` leaves a pod: the job id label, the
    /// finalizer and the bridge toleration.
    pub fn labelled(self, job_id: u32) -> Self {
        let toleration = crate::wellknown::managed_node_toleration(SCHEDULER);
        self.job_label(job_id)
            .with_finalizer()
            .set("/spec/tolerations", json!([toleration]))
    }

    pub fn with_finalizer(self) -> Self {
        self.set("/metadata/finalizers", json!([FINALIZER]))
    }

    /// Deleted (deletionTimestamp set), held by the bridge finalizer.
    pub fn deleting(self) -> Self {
        self.with_finalizer()
            .set("/metadata/deletionTimestamp", json!("2026-01-01T00:00:00Z"))
    }

    pub fn phase(self, phase: &str) -> Self {
        self.set("/status/phase", json!(phase))
    }

    pub fn node_selector(self, key: &str, value: &str) -> Self {
        self.set("/spec/nodeSelector", json!({ key: value }))
    }

    /// The container's CPU request.
    pub fn cpu(mut self, cpu: &str) -> Self {
        self.0["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
        self
    }

    /// A node that is not Ready.
    pub fn not_ready(self) -> Self {
        self.set(
            "/status/conditions",
            json!([{"type": "Ready", "status": "False"}]),
        )
    }

    fn kind(&self) -> &str {
        self.0["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.0["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// A bridge job as both the watcher index and Slurm know it.
#[derive(Clone, Debug)]
pub struct SlurmJob {
    pub id: u32,
    pub state: JobState,
    pub reason: Option<String>,
    pub nodes: Option<String>,
    /// Pod keys (`ns/name`) of the admin_comment.
    pub pods: Vec<String>,
    /// Group key of the admin_comment; `None` for a job of the Go original.
    pub group: Option<String>,
}

/// A PENDING bridge job for these pods (`name` in [`NS`]) of the group `group`.
pub fn job(id: u32, group: &str, pods: &[&str]) -> SlurmJob {
    SlurmJob {
        id,
        state: JobState::Pending,
        reason: None,
        nodes: None,
        pods: pods.iter().map(|p| format!("{NS}/{p}")).collect(),
        group: Some(group.to_string()),
    }
}

impl SlurmJob {
    /// RUNNING on these Slurm nodes (a host list).
    pub fn running(mut self, nodes: &str) -> Self {
        self.state = JobState::Running;
        self.nodes = Some(nodes.to_string());
        self
    }

    pub fn suspended(mut self, nodes: &str) -> Self {
        self.state = JobState::Suspended;
        self.nodes = Some(nodes.to_string());
        self
    }

    /// Slurm's pending reason.
    pub fn reason(mut self, reason: &str) -> Self {
        self.reason = Some(reason.to_string());
        self
    }

    pub fn state(mut self, state: JobState) -> Self {
        self.state = state;
        self
    }

    /// Made by the Go original: no group key in the admin_comment.
    pub fn without_group(mut self) -> Self {
        self.group = None;
        self
    }

    fn comment(&self) -> AdminComment {
        AdminComment {
            pods: self.pods.clone(),
            group: self.group.clone(),
            uids: vec![],
        }
    }

    pub fn watched(&self) -> WatchedJob {
        WatchedJob {
            job_id: self.id,
            state: vec![self.state.clone()],
            state_reason: self.reason.clone(),
            nodes: self.nodes.clone(),
            comment: self.comment(),
        }
    }

    pub fn info(&self) -> JobInfo {
        JobInfo {
            job_id: self.id,
            job_state: vec![self.state.clone()],
            state_reason: self.reason.clone(),
            nodes: self.nodes.clone(),
            admin_comment: Some(self.comment().encode()),
            ..Default::default()
        }
    }
}

/// Something that happens before the pass under test (its writes are not counted).
#[derive(Clone, Debug)]
pub enum Step {
    /// A reconcile pass of this pod (read from the API server as it is then).
    Pass(&'static str),
    /// Slurm and the watcher now show this job (the watcher's `Changed` event included).
    Job(SlurmJob),
    /// This object is created or replaced in the API server.
    Put(Obj),
    /// From now on this failure is injected.
    Fault(Fault),
    /// Every injected failure is lifted (for a failure in the steps only: `Fault(..)`, a
    /// `Pass`, then `Heal`).
    Heal,
}

/// Failures injected after the [`Step`]s, for the pass under test.
#[derive(Clone, Debug)]
pub enum Fault {
    Submit(SlurmFailure),
    Update(SlurmFailure),
    Cancel(SlurmFailure),
    /// Kubernetes requests with this method whose path contains the text fail with the code.
    Kube(Method, &'static str, u16),
}

/// The state a pass starts from.
#[derive(Clone, Debug)]
pub struct World {
    pub objects: Vec<Obj>,
    /// Slurm's node names; `None`: the Kubernetes nodes' names.
    pub slurm_nodes: Option<Vec<String>>,
    pub jobs: Vec<SlurmJob>,
    /// Jobs as Slurm has them when the watcher's index says otherwise (it has not polled yet).
    pub slurm_only: Vec<SlurmJob>,
    pub before: Vec<Step>,
    pub faults: Vec<Fault>,
    pub leader: bool,
    /// The pod the pass is given when it is not the API server's (a cache behind the server).
    pub given: Option<Obj>,
}

impl Default for World {
    fn default() -> Self {
        World {
            objects: Vec::new(),
            slurm_nodes: None,
            jobs: Vec::new(),
            slurm_only: Vec::new(),
            before: Vec::new(),
            faults: Vec::new(),
            leader: true,
            given: None,
        }
    }
}

impl World {
    /// Ready nodes with these names (Kubernetes and Slurm).
    pub fn nodes(names: &[&str]) -> World {
        World::default().with_nodes(names)
    }

    pub fn with_nodes(mut self, names: &[&str]) -> World {
        self.objects.extend(names.iter().map(|n| node(n)));
        self
    }

    pub fn with(mut self, obj: Obj) -> World {
        self.objects.push(obj);
        self
    }

    pub fn job(mut self, job: SlurmJob) -> World {
        self.jobs.push(job);
        self
    }

    pub fn slurm_has(mut self, job: SlurmJob) -> World {
        self.slurm_only.push(job);
        self
    }

    pub fn then(mut self, step: Step) -> World {
        self.before.push(step);
        self
    }

    pub fn fault(mut self, fault: Fault) -> World {
        self.faults.push(fault);
        self
    }

    pub fn not_leader(mut self) -> World {
        self.leader = false;
        self
    }

    pub fn given(mut self, pod: Obj) -> World {
        self.given = Some(pod);
        self
    }
}

/// What one pass did.
#[derive(Debug)]
pub struct Outcome {
    pub action: Action,
    /// The pass's error, when it failed (`action` is then `error_policy`'s).
    pub error: Option<String>,
    pub slurm: Vec<String>,
    pub kube: Vec<String>,
}

/// The real scheduler context on the fakes.
pub struct Harness {
    pub ctx: Arc<Ctx<FakeSlurm>>,
    pub slurm: Arc<FakeSlurm>,
    pub kube: Arc<FakeKube>,
    pods: Writer<Pod>,
    given: Option<Obj>,
}

impl Harness {
    pub async fn new(world: World) -> Harness {
        let kube = FakeKube::new();
        let client = kube.client();
        let slurm = Arc::new(FakeSlurm::default());
        let (pod_store, pods) = reflector::store();
        let (node_store, mut nodes) = reflector::store::<Node>();
        let mut slurm_names = Vec::new();
        for obj in &world.objects {
            kube.put(obj.0.clone());
            if obj.kind() == "Node" {
                let n: Node = serde_json::from_value(obj.0.clone()).expect("node");
                slurm_names.push(crate::k8s::slurm_node_name(&n));
                nodes.apply_watcher_event(&watcher::Event::Apply(n));
            }
        }
        slurm.set_nodes(world.slurm_nodes.as_deref().unwrap_or(&slurm_names));
        let config = Config {
            scheduler_name: SCHEDULER.into(),
            ..Default::default()
        };
        let ctx = Arc::new(Ctx::new(
            config,
            client,
            CacheHandles::detached(slurm.clone(), node_store, pod_store),
            Metrics::new(&mut Default::default()),
        ));
        ctx.leader.store(world.leader, Ordering::Relaxed);
        ctx.slurm_nodes.refresh().await.expect("slurm nodes");
        let mut h = Harness {
            ctx,
            slurm,
            kube,
            pods,
            given: None,
        };
        for j in &world.jobs {
            h.set_job(j);
        }
        for j in &world.slurm_only {
            h.slurm.set_job(j.info());
        }
        h.sync_pods();
        for step in world.before {
            match step {
                Step::Pass(name) => {
                    h.pass(name).await;
                }
                Step::Job(j) => h.set_job(&j),
                Step::Put(obj) => h.kube.put(obj.0),
                Step::Fault(f) => h.inject(f),
                Step::Heal => h.heal(),
            }
            h.sync_pods();
        }
        for fault in world.faults {
            h.inject(fault);
        }
        h.given = world.given;
        h.slurm.clear_calls();
        h.kube.clear_writes();
        h
    }

    pub fn inject(&self, fault: Fault) {
        match fault {
            Fault::Submit(f) => self.slurm.fail_submit(Some(f)),
            Fault::Update(f) => self.slurm.fail_update(Some(f)),
            Fault::Cancel(f) => self.slurm.fail_cancel(Some(f)),
            Fault::Kube(method, path, code) => self.kube.fail(method, path, code),
        }
    }

    /// No more injected failures.
    pub fn heal(&self) {
        self.slurm.fail_submit(None);
        self.slurm.fail_update(None);
        self.slurm.fail_cancel(None);
        self.kube.heal();
    }

    /// Slurm and the watcher's index show `job`, as after a poll that saw it change.
    pub fn set_job(&self, job: &SlurmJob) {
        self.slurm.set_job(job.info());
        self.ctx.watcher.record(job.watched());
        self.ctx
            .job_event(&JobEvent::Changed(Arc::new(job.watched())));
    }

    /// The pod cache catches up with the API server (and the writer learns it, as
    /// `Ctx::pod_event` does in production).
    fn sync_pods(&mut self) {
        for pod in self.kube.pods() {
            let event = watcher::Event::Apply(pod);
            self.pods.apply_watcher_event(&event);
            self.ctx.pod_event(&event);
        }
    }

    /// The pod `ns/<name>` as the API server holds it now.
    pub fn pod(&self, name: &str) -> Pod {
        let obj = self
            .kube
            .get(&object_path("v1", "Pod", Some(NS), name))
            .unwrap_or_else(|| panic!("no pod {NS}/{name} in the fake API server"));
        serde_json::from_value(obj).expect("pod")
    }

    /// One pass of `ns/<name>` (or of the given stale copy), with `error_policy` on failure.
    pub async fn pass(&self, name: &str) -> Outcome {
        let pod = match &self.given {
            Some(obj) if obj.name() == name => {
                let mut v = obj.0.clone();
                if v["metadata"]["uid"].is_null() {
                    v["metadata"]["uid"] = json!(format!("uid-{name}"));
                }
                serde_json::from_value(v).expect("pod")
            }
            _ => self.pod(name),
        };
        let pod = Arc::new(pod);
        let (calls, writes) = (self.slurm.calls().len(), self.kube.writes().len());
        let pass = reconcile(pod.clone(), self.ctx.clone());
        let Ok(result) = tokio::time::timeout(Duration::from_secs(5), pass).await else {
            panic!("the pass of {name} did not end within 5 s");
        };
        let (action, error) = match result {
            Ok(action) => (action, None),
            Err(e) => (error_policy(pod, &e, self.ctx.clone()), Some(e.to_string())),
        };
        Outcome {
            action,
            error,
            slurm: self.slurm.calls()[calls..].to_vec(),
            kube: self.kube.writes()[writes..].to_vec(),
        }
    }
}

/// What a row expects the pass to return.
#[derive(Clone, Debug)]
pub enum Expect {
    /// `Action::await_change()`.
    Await,
    /// `Action::requeue(d)`.
    Requeue(Duration),
    /// A requeue after more than zero and at most this (a delay counted from a time stamp).
    RequeueWithin(Duration),
    /// The pass failed with an error whose text contains this; `error_policy` retries after
    /// `retry` (the first failure of the pod: 0.5 s).
    Failed {
        error: &'static str,
        retry: Duration,
    },
}

/// The requeue delay of an action (`Action` keeps it private; its Debug shows it).
pub fn requeue_after(action: &Action) -> Option<Duration> {
    if *action == Action::await_change() {
        return None;
    }
    let text = format!("{action:?}");
    let inner = text
        .split_once("Some(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(d, _)| d)
        .unwrap_or_else(|| panic!("unexpected Action debug form {text}"));
    let split = inner
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(inner.len());
    let (number, unit) = inner.split_at(split);
    let number: f64 = number.parse().expect("a number");
    let secs = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" => number / 1e6,
        "ns" => number / 1e9,
        other => panic!("unexpected unit {other} in {text}"),
    };
    Some(Duration::from_secs_f64(secs))
}

/// One case: the world, the pod whose pass is tested, and what the pass must do.
#[derive(Clone)]
pub struct Row {
    pub name: &'static str,
    pub world: fn() -> World,
    /// The pod (`ns/<pod>`) whose pass is tested.
    pub pod: &'static str,
    /// Slurm writes, in order ([`fake_slurm::SlurmCall::describe`]).
    pub slurm: &'static [&'static str],
    /// Kubernetes writes, in any order ([`fake_kube::KubeWrite::describe`]).
    pub kube: &'static [&'static str],
    pub action: Expect,
}

impl Row {
    /// Runs the row; `Err` says what differed.
    pub async fn check(&self) -> Result<(), String> {
        let h = Harness::new((self.world)()).await;
        let out = h.pass(self.pod).await;
        let mut problems = Vec::new();
        if out.slurm != self.slurm {
            problems.push(format!(
                "Slurm calls: expected {:?}, got {:?}",
                self.slurm, out.slurm
            ));
        }
        let mut want: Vec<&str> = self.kube.to_vec();
        want.sort();
        let mut got: Vec<&str> = out.kube.iter().map(String::as_str).collect();
        got.sort();
        if want != got {
            problems.push(format!("Kubernetes writes: expected {want:?}, got {got:?}"));
        }
        let after = requeue_after(&out.action);
        match (&self.action, &out.error) {
            (Expect::Failed { error, retry }, Some(e)) => {
                if !e.contains(error) {
                    problems.push(format!("error {e:?} does not contain {error:?}"));
                }
                if after != Some(*retry) {
                    problems.push(format!("retry after {after:?}, expected {retry:?}"));
                }
            }
            (Expect::Failed { error, .. }, None) => problems.push(format!(
                "the pass succeeded ({:?}), expected an error containing {error:?}",
                out.action
            )),
            (_, Some(e)) => problems.push(format!("the pass failed: {e}")),
            (Expect::Await, None) if after.is_some() => {
                problems.push(format!("expected await_change, got {:?}", out.action))
            }
            (Expect::Requeue(d), None) if after != Some(*d) => problems.push(format!(
                "expected requeue after {d:?}, got {:?}",
                out.action
            )),
            (Expect::RequeueWithin(d), None)
                if !after.is_some_and(|a| a > Duration::ZERO && a <= *d) =>
            {
                problems.push(format!(
                    "expected requeue within {d:?}, got {:?}",
                    out.action
                ))
            }
            _ => {}
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n    "))
        }
    }
}

/// Runs every row and reports every failing one (not only the first).
pub async fn check_rows(rows: &[Row]) {
    let mut names = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for row in rows {
        assert!(names.insert(row.name), "two rows are named {}", row.name);
        let started = std::time::Instant::now();
        if let Err(e) = row.check().await {
            failures.push(format!("{}:\n    {e}", row.name));
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "row {} took {took:?}",
            row.name
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
