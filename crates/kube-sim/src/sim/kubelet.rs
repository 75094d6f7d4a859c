//! The simulated kubelet: one pod watch for all simulated nodes, one timer queue, and a
//! per-pod queue of API writes so a pod's status updates land in order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::nodes::{node_ip, pod_cidr_prefix};
use super::runtime::{RunPlan, plan_for_pod};
use super::util::{self, now, sha1_hex};

/// Grace period when neither the deletion nor the pod spec gives one.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// Exit code of a container killed by SIGKILL.
const KILLED_EXIT_CODE: i32 = 137;
/// Conditions the kubelet owns; others (PodScheduled, DisruptionTarget, ...) are kept.
const KUBELET_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

type Key = (String, String);

#[derive(Debug, Clone)]
struct NodeNet {
    host_ip: String,
    cidr_prefix: String,
    next_ip: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Bound but not started (only while the first write is being prepared).
    Pending,
    /// Containers running.
    Running,
    /// A container ended and waits to be restarted (restartPolicy Always/OnFailure).
    Waiting,
    /// Succeeded or Failed.
    Terminal,
}

#[derive(Debug, Clone)]
enum Op {
    Status(serde_json::Value),
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerKind {
    /// The containers end on their own.
    Finish,
    /// The grace period of a deleted pod is over.
    Kill,
    /// A crashed container under restartPolicy Always/OnFailure starts again.
    Restart,
    /// `spec.activeDeadlineSeconds` has passed (not invalidated by the pod's other timers).
    Deadline,
}

#[derive(Debug)]
struct Timer {
    at: Instant,
    seq: u64,
    key: Key,
    uid: String,
    gen_: u64,
    kind: TimerKind,
}

impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Debug)]
struct PodState {
    uid: String,
    pod: Pod,
    phase: Phase,
    plan: RunPlan,
    /// When the current container run started (monotonic).
    run_started: Instant,
    /// `status.startTime` (wall clock).
    start_time: Time,
    /// When the current container run started (wall clock).
    run_started_wall: Time,
    pod_ip: String,
    host_ip: String,
    restart_count: i32,
    /// Kill deadline once the pod is being deleted.
    deleting: Option<Instant>,
    delete_enqueued: bool,
    /// Bumped to invalidate pending timers.
    gen_: u64,
    busy: bool,
    queue: VecDeque<Op>,
}

struct Done {
    key: Key,
    uid: String,
    result: Result<(), kube::Error>,
}

/// The simulated kubelet of every simulated node.
pub struct Kubelet {
    client: kube::Client,
    api: Api<Pod>,
    nodes: HashMap<String, NodeNet>,
    pods: HashMap<Key, PodState>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    sem: Arc<Semaphore>,
    done_tx: mpsc::UnboundedSender<Done>,
    done_rx: mpsc::UnboundedReceiver<Done>,
    /// Keys seen since the last watch (re)list started.
    relist: Option<HashSet<Key>>,
}

impl Kubelet {
    /// A kubelet for the named nodes (in registration order, which fixes their IPs).
    pub fn new(client: kube::Client, nodes: &[String], max_in_flight: usize) -> Self {
        let nodes = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    NodeNet {
                        host_ip: node_ip(i),
                        cidr_prefix: pod_cidr_prefix(i),
                        next_ip: 2,
                    },
                )
            })
            .collect();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Kubelet {
            api: Api::all(client.clone()),
            client,
            nodes,
            pods: HashMap::new(),
            timers: BinaryHeap::new(),
            seq: 0,
            sem: Arc::new(Semaphore::new(max_in_flight)),
            done_tx,
            done_rx,
            relist: None,
        }
    }

    /// Run until the task is aborted.
    pub async fn run(mut self) {
        let cfg = watcher::Config::default().fields("spec.nodeName!=");
        let mut events = std::pin::pin!(watcher(self.api.clone(), cfg).default_backoff());
        loop {
            let next = self.timers.peek().map(|t| t.0.at);
            tokio::select! {
                biased;
                Some(done) = self.done_rx.recv() => self.on_done(done),
                ev = events.next() => match ev {
                    Some(Ok(ev)) => self.on_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "kube-sim kubelet: pod watch error"),
                    None => return,
                },
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    self.fire_due();
                }
            }
        }
    }

    fn on_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(seen) = &mut self.relist {
                    seen.insert(key_of(&pod));
                }
                self.on_apply(pod);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    self.pods.retain(|k, _| seen.contains(k));
                }
            }
            watcher::Event::Apply(pod) => self.on_apply(pod),
            watcher::Event::Delete(pod) => {
                let key = key_of(&pod);
                if self
                    .pods
                    .get(&key)
                    .is_some_and(|s| Some(&s.uid) == pod.metadata.uid.as_ref())
                {
                    self.pods.remove(&key);
                }
            }
        }
    }

    fn on_apply(&mut self, pod: Pod) {
        let key = key_of(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !self.nodes.contains_key(&node) {
            self.pods.remove(&key);
            return;
        }
        let known = self.pods.get(&key).is_some_and(|s| s.uid == uid);
        if !known {
            let state = self.new_state(&node, uid, pod);
            let starting = state.phase == Phase::Pending;
            self.pods.insert(key.clone(), state);
            if starting {
                self.start(&key);
            } else {
                self.resume(&key);
            }
        } else if let Some(s) = self.pods.get_mut(&key) {
            s.pod = pod;
        }
        let deleting = self
            .pods
            .get(&key)
            .is_some_and(|s| s.pod.metadata.deletion_timestamp.is_some());
        if deleting {
            self.on_deletion(&key);
        }
    }

    fn new_state(&mut self, node: &str, uid: String, pod: Pod) -> PodState {
        let (plan, warning) = plan_for_pod(&pod);
        if let Some(w) = warning {
            tracing::warn!(pod = %pod.name_any(), "kube-sim kubelet: {w}");
        }
        let status = pod.status.clone().unwrap_or_default();
        let phase = match status.phase.as_deref() {
            Some("Succeeded") | Some("Failed") => Phase::Terminal,
            Some("Running") => Phase::Running,
            _ => Phase::Pending,
        };
        let net = self.nodes.get_mut(node).expect("node checked by caller");
        let pod_ip = match status.pod_ip.clone() {
            Some(ip) if phase != Phase::Pending => ip,
            _ => {
                let ip = format!("{}.{}", net.cidr_prefix, net.next_ip);
                net.next_ip = if net.next_ip >= 254 {
                    2
                } else {
                    net.next_ip + 1
                };
                ip
            }
        };
        let restart_count = status
            .container_statuses
            .as_ref()
            .and_then(|c| c.first())
            .map_or(0, |c| c.restart_count);
        let start_time = status.start_time.clone().unwrap_or_else(now);
        // A pod found Running (the sim restarted): its current run began at startTime or at
        // the last container start.
        let run_started_wall = status
            .container_statuses
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone())
            .unwrap_or_else(|| start_time.clone());
        let elapsed = (k8s_openapi::jiff::Timestamp::now() - run_started_wall.0)
            .get_milliseconds()
            .max(0) as u64;
        let run_started = if phase == Phase::Running {
            Instant::now()
                .checked_sub(Duration::from_millis(elapsed))
                .unwrap_or_else(Instant::now)
        } else {
            Instant::now()
        };
        PodState {
            uid,
            pod,
            phase,
            plan,
            run_started,
            start_time,
            run_started_wall,
            pod_ip,
            host_ip: net.host_ip.clone(),
            restart_count,
            deleting: None,
            delete_enqueued: false,
            gen_: 0,
            busy: false,
            queue: VecDeque::new(),
        }
    }

    /// Start a newly bound pod: Running now, finishing after its planned duration.
    fn start(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        if s.pod.metadata.deletion_timestamp.is_some() {
            return; // deleted before it started: on_deletion removes it
        }
        s.phase = Phase::Running;
        s.run_started = Instant::now();
        s.start_time = now();
        s.run_started_wall = s.start_time.clone();
        let status = running_status(s, true);
        s.queue.push_back(Op::Status(status));
        let due = s.plan.duration.map(|d| s.run_started + d);
        let deadline = s
            .pod
            .spec
            .as_ref()
            .and_then(|p| p.active_deadline_seconds)
            .filter(|d| *d > 0)
            .map(|d| s.run_started + Duration::from_secs(d as u64));
        self.pump(key);
        if let Some(at) = due {
            self.schedule(key, at, TimerKind::Finish);
        }
        if let Some(at) = deadline {
            self.schedule(key, at, TimerKind::Deadline);
        }
    }

    /// Pick up a pod found Running or terminal when (re)listing.
    fn resume(&mut self, key: &Key) {
        let Some(s) = self.pods.get(key) else { return };
        if s.phase == Phase::Running
            && let Some(d) = s.plan.duration
        {
            let at = s.run_started + d;
            self.schedule(key, at, TimerKind::Finish);
        }
    }

    fn on_deletion(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        let grace = s
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                s.pod
                    .spec
                    .as_ref()
                    .and_then(|p| p.termination_grace_period_seconds)
            })
            .map_or(DEFAULT_GRACE, |g| Duration::from_secs(g.max(0) as u64));
        let deadline = Instant::now() + grace;
        if s.deleting.is_some_and(|d| d <= deadline) {
            return; // already handled with an earlier or equal deadline
        }
        s.deleting = Some(deadline);
        match s.phase {
            Phase::Pending | Phase::Terminal => {
                s.phase = Phase::Terminal;
                s.gen_ += 1;
                self.enqueue_delete(key);
            }
            Phase::Waiting => {
                // No container runs: it ends at once with its last exit code.
                s.phase = Phase::Terminal;
                s.gen_ += 1;
                let status = terminal_status(s, s.plan.exit_code);
                s.queue.push_back(Op::Status(status));
                self.pump(key);
                self.enqueue_delete(key);
            }
            Phase::Running => {
                let natural_end = s.plan.duration.map(|d| s.run_started + d);
                if natural_end.is_some_and(|e| e <= deadline) {
                    return; // the Finish timer ends it, then deletes
                }
                self.schedule(key, deadline, TimerKind::Kill);
            }
        }
    }

    fn enqueue_delete(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        if !s.delete_enqueued {
            s.delete_enqueued = true;
            s.queue.push_back(Op::Delete);
            self.pump(key);
        }
    }

    fn schedule(&mut self, key: &Key, at: Instant, kind: TimerKind) {
        let Some(s) = self.pods.get(key) else { return };
        self.seq += 1;
        self.timers.push(Reverse(Timer {
            at,
            seq: self.seq,
            key: key.clone(),
            uid: s.uid.clone(),
            gen_: s.gen_,
            kind,
        }));
    }

    fn fire_due(&mut self) {
        let now_i = Instant::now();
        while self.timers.peek().is_some_and(|t| t.0.at <= now_i) {
            let Some(Reverse(t)) = self.timers.pop() else {
                break;
            };
            if self.pods.get(&t.key).is_some_and(|s| {
                s.uid == t.uid && (s.gen_ == t.gen_ || t.kind == TimerKind::Deadline)
            }) {
                self.fire(&t.key, t.kind);
            }
        }
    }

    fn fire(&mut self, key: &Key, kind: TimerKind) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        match kind {
            TimerKind::Finish if s.phase == Phase::Running => {
                s.gen_ += 1;
                let code = s.plan.exit_code;
                if s.deleting.is_none() && will_restart(s) {
                    // Crash-loop style backoff before the next run: 10 s doubling to 5 min.
                    let backoff = Duration::from_secs(10u64 << s.restart_count.clamp(0, 5))
                        .min(Duration::from_secs(300));
                    s.restart_count += 1;
                    s.phase = Phase::Waiting;
                    let status = waiting_status(s, code);
                    s.queue.push_back(Op::Status(status));
                    self.pump(key);
                    self.schedule(key, Instant::now() + backoff, TimerKind::Restart);
                } else {
                    s.phase = Phase::Terminal;
                    let status = terminal_status(s, code);
                    s.queue.push_back(Op::Status(status));
                    let deleting = s.deleting.is_some();
                    self.pump(key);
                    if deleting {
                        self.enqueue_delete(key);
                    }
                }
            }
            TimerKind::Restart if s.phase == Phase::Waiting && s.deleting.is_none() => {
                s.gen_ += 1;
                s.phase = Phase::Running;
                s.run_started = Instant::now();
                s.run_started_wall = now();
                let status = running_status(s, false);
                s.queue.push_back(Op::Status(status));
                let due = s.plan.duration.map(|d| s.run_started + d);
                self.pump(key);
                if let Some(at) = due {
                    self.schedule(key, at, TimerKind::Finish);
                }
            }
            TimerKind::Deadline
                if matches!(s.phase, Phase::Running | Phase::Waiting) && s.deleting.is_none() =>
            {
                s.gen_ += 1;
                s.phase = Phase::Terminal;
                let mut status = terminal_status(s, KILLED_EXIT_CODE);
                status["status"]["reason"] = "DeadlineExceeded".into();
                status["status"]["message"] =
                    "Pod was active on the node longer than the specified deadline".into();
                s.queue.push_back(Op::Status(status));
                self.pump(key);
            }
            TimerKind::Kill => {
                s.gen_ += 1;
                if s.phase == Phase::Running {
                    s.phase = Phase::Terminal;
                    let status = terminal_status(s, KILLED_EXIT_CODE);
                    s.queue.push_back(Op::Status(status));
                    self.pump(key);
                }
                self.enqueue_delete(key);
            }
            _ => {}
        }
    }

    /// Send the pod's next queued write if none is in flight.
    fn pump(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        if s.busy {
            return;
        }
        let Some(op) = s.queue.pop_front() else {
            return;
        };
        s.busy = true;
        let api = Api::<Pod>::namespaced(self.client.clone(), &key.0);
        let (name, uid) = (key.1.clone(), s.uid.clone());
        let sem = self.sem.clone();
        let tx = self.done_tx.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = match op {
                Op::Status(patch) => util::retry!(api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch)
                ))
                .map(|_| ()),
                Op::Delete => {
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match util::retry!(api.delete(&name, &dp)) {
                        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()), // UID changed: not ours
                        r => r.map(|_| ()),
                    }
                }
            };
            let _ = tx.send(Done { key, uid, result });
        });
    }

    fn on_done(&mut self, done: Done) {
        let Some(s) = self.pods.get_mut(&done.key) else {
            return;
        };
        if s.uid != done.uid {
            return;
        }
        s.busy = false;
        if let Err(e) = &done.result {
            if util::is_not_found(e) {
                s.queue.clear();
                return;
            }
            tracing::warn!(pod = %done.key.1, namespace = %done.key.0, error = %e, "kube-sim kubelet: API write failed");
        }
        self.pump(&done.key);
    }
}

fn key_of(pod: &Pod) -> Key {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

fn restart_policy(s: &PodState) -> &str {
    s.pod
        .spec
        .as_ref()
        .and_then(|p| p.restart_policy.as_deref())
        .unwrap_or("Always")
}

fn will_restart(s: &PodState) -> bool {
    match restart_policy(s) {
        "Always" => true,
        "OnFailure" => s.plan.exit_code != 0,
        _ => false,
    }
}

fn container_id(s: &PodState, name: &str) -> String {
    format!(
        "containerd://{}",
        sha1_hex(&format!("{}/{name}/{}", s.uid, s.restart_count))
    )
}

fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    format!("{repo}@sha256:{}{}", sha1_hex(image), &sha1_hex(repo)[..24])
}

fn condition(type_: &str, status: bool, reason: Option<&str>, t: &Time) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.map(Into::into),
        last_transition_time: Some(t.clone()),
        ..Default::default()
    }
}

/// Existing conditions the kubelet does not own, plus `ours`.
fn merge_conditions(s: &PodState, ours: Vec<PodCondition>) -> Vec<PodCondition> {
    let mut out: Vec<PodCondition> = s
        .pod
        .status
        .as_ref()
        .and_then(|st| st.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    if !out.iter().any(|c| c.type_ == "PodScheduled") {
        out.push(condition("PodScheduled", true, None, &s.start_time));
    }
    out.extend(ours);
    out
}

fn base_status(s: &PodState, phase: &str, conditions: Vec<PodCondition>) -> PodStatus {
    let t = s.start_time.clone();
    let init_statuses: Vec<ContainerStatus> = s
        .pod
        .spec
        .as_ref()
        .and_then(|p| p.init_containers.as_ref())
        .map(|ics| {
            ics.iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    image_id: image_id(c.image.as_deref().unwrap_or_default()),
                    container_id: Some(container_id(s, &c.name)),
                    ready: true,
                    started: Some(false),
                    restart_count: 0,
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 0,
                            reason: Some("Completed".into()),
                            started_at: Some(t.clone()),
                            finished_at: Some(t.clone()),
                            container_id: Some(container_id(s, &c.name)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(merge_conditions(s, conditions)),
        host_ip: Some(s.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: s.host_ip.clone(),
        }]),
        pod_ip: Some(s.pod_ip.clone()),
        pod_ips: Some(vec![PodIP {
            ip: s.pod_ip.clone(),
        }]),
        start_time: Some(t),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..Default::default()
    }
}

fn containers(s: &PodState) -> Vec<(String, String)> {
    s.pod
        .spec
        .as_ref()
        .map(|p| {
            p.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn last_terminated(s: &PodState, name: &str, code: i32) -> Option<ContainerState> {
    (s.restart_count > 0).then(|| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            finished_at: Some(s.run_started_wall.clone()),
            container_id: Some(container_id(s, name)),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn to_patch(status: PodStatus) -> serde_json::Value {
    serde_json::json!({ "status": status })
}

/// Status of a pod whose containers run (`first`: the pod just started).
fn running_status(s: &PodState, first: bool) -> serde_json::Value {
    let t = s.run_started_wall.clone();
    let conds = vec![
        condition("PodReadyToStartContainers", true, None, &s.start_time),
        condition("Initialized", true, None, &s.start_time),
        condition("ContainersReady", true, None, &t),
        condition("Ready", true, None, &t),
    ];
    let mut st = base_status(s, "Running", conds);
    let last_code = if first { 0 } else { s.plan.exit_code };
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name)),
                ready: true,
                started: Some(true),
                restart_count: s.restart_count,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(t.clone()),
                    }),
                    ..Default::default()
                }),
                last_state: last_terminated(s, &name, last_code),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(st)
}

/// Status of a pod whose container crashed and waits to be restarted.
fn waiting_status(s: &PodState, code: i32) -> serde_json::Value {
    let t = now();
    let conds = vec![
        condition("PodReadyToStartContainers", true, None, &s.start_time),
        condition("Initialized", true, None, &s.start_time),
        condition("ContainersReady", false, Some("ContainersNotReady"), &t),
        condition("Ready", false, Some("ContainersNotReady"), &t),
    ];
    let mut st = base_status(s, "Running", conds);
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name)),
                ready: false,
                started: Some(false),
                restart_count: s.restart_count,
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("CrashLoopBackOff".into()),
                        message: Some(format!("back-off restarting failed container {name}")),
                    }),
                    ..Default::default()
                }),
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                        started_at: Some(s.run_started_wall.clone()),
                        finished_at: Some(t.clone()),
                        container_id: Some(container_id(s, &name)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(st)
}

/// Status of a pod whose containers have ended with `code` (137 when killed).
fn terminal_status(s: &PodState, code: i32) -> serde_json::Value {
    let t = now();
    let succeeded = code == 0;
    let reason = if succeeded {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    let conds = vec![
        condition("PodReadyToStartContainers", false, None, &t),
        condition("Initialized", true, None, &s.start_time),
        condition("ContainersReady", false, Some(reason), &t),
        condition("Ready", false, Some(reason), &t),
    ];
    let phase = if succeeded { "Succeeded" } else { "Failed" };
    let mut st = base_status(s, phase, conds);
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name)),
                ready: false,
                started: Some(false),
                restart_count: s.restart_count,
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        reason: Some(if succeeded { "Completed" } else { "Error" }.into()),
                        started_at: Some(s.run_started_wall.clone()),
                        finished_at: Some(t.clone()),
                        container_id: Some(container_id(s, &name)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn state(restart: &str, plan: RunPlan) -> PodState {
        let pod = Pod {
            spec: Some(PodSpec {
                restart_policy: Some(restart.into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox:1.36".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        PodState {
            uid: "u1".into(),
            pod,
            phase: Phase::Running,
            plan,
            run_started: Instant::now(),
            start_time: now(),
            run_started_wall: now(),
            pod_ip: "10.64.0.2".into(),
            host_ip: "172.18.0.2".into(),
            restart_count: 0,
            deleting: None,
            delete_enqueued: false,
            gen_: 0,
            busy: false,
            queue: VecDeque::new(),
        }
    }

    #[test]
    fn restart_policies() {
        let ok = RunPlan {
            duration: Some(Duration::ZERO),
            exit_code: 0,
        };
        let bad = RunPlan {
            duration: Some(Duration::ZERO),
            exit_code: 2,
        };
        assert!(!will_restart(&state("Never", bad)));
        assert!(will_restart(&state("Always", ok)));
        assert!(will_restart(&state("OnFailure", bad)));
        assert!(!will_restart(&state("OnFailure", ok)));
    }

    #[test]
    fn status_shapes() {
        let s = state(
            "Never",
            RunPlan {
                duration: None,
                exit_code: 0,
            },
        );
        let v = running_status(&s, true);
        assert_eq!(v["status"]["phase"], "Running");
        assert_eq!(v["status"]["podIP"], "10.64.0.2");
        assert_eq!(v["status"]["containerStatuses"][0]["ready"], true);
        assert!(v["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let conds = v["status"]["conditions"].as_array().unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        );
        assert!(conds.iter().any(|c| c["type"] == "PodScheduled"));

        let v = terminal_status(&s, 137);
        assert_eq!(v["status"]["phase"], "Failed");
        let term = &v["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(term["exitCode"], 137);
        assert_eq!(term["reason"], "Error");
        let v = terminal_status(&s, 0);
        assert_eq!(v["status"]["phase"], "Succeeded");
        assert_eq!(
            v["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }
}
