//! The kubelet of every fake node: one pod watch for all of them, one timer queue, and a
//! per-pod queue of API writes so a pod's status updates land in order.
//!
//! Status writes are strategic-merge patches of `pods/status` carrying `metadata.uid`, as the
//! real kubelet sends: a patch meant for an earlier pod of the same name is refused by the
//! API server instead of landing on the new one. The kubelet's conditions merge by type, so
//! conditions written by others (PodScheduled, DisruptionTarget, ...) are kept.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::nodes::{node_ip, pod_cidr_prefix};
use super::runtime::{RunPlan, plan_for_pod};
use super::util::{self, now, sha1_hex};

/// Grace period when neither the deletion nor the pod spec gives one.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// Exit code of a container killed by SIGKILL.
const KILLED_EXIT_CODE: i32 = 137;
/// Conditions the kubelet owns (plus PodScheduled when nobody set it).
const KUBELET_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

type Key = (String, String);

/// Changes of the set of nodes the kubelet serves.
#[derive(Debug)]
pub enum KubeletCmd {
    /// Serve the node (registered `index`-th, which fixes its IPs) and adopt its pods.
    Add { name: String, index: usize },
    /// Stop serving the node: its pods are left alone from now on.
    Remove { name: String },
}

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

/// How the previous run of the containers ended (for `lastState`).
#[derive(Debug, Clone)]
struct LastExit {
    code: i32,
    started: Time,
    finished: Time,
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
    /// Restarts so far; the current run is number `restart_count` (from 0).
    restart_count: i32,
    last_exit: Option<LastExit>,
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

/// The kubelet of every served node.
pub struct Kubelet {
    client: kube::Client,
    api: Api<Pod>,
    cmds: mpsc::UnboundedReceiver<KubeletCmd>,
    /// Addresses of every node ever served (kept so a node served again keeps its IPs).
    nets: HashMap<String, NodeNet>,
    /// Nodes served now.
    active: HashSet<String>,
    pods: HashMap<Key, PodState>,
    /// Bound pods of nodes not served (now): adopted if their node is added.
    foreign: HashMap<Key, Pod>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    sem: Arc<Semaphore>,
    writes: JoinSet<Done>,
    /// Keys seen since the last watch (re)list started.
    relist: Option<HashSet<Key>>,
}

impl Kubelet {
    /// A kubelet serving no node yet; nodes come through `cmds`.
    pub fn new(
        client: kube::Client,
        cmds: mpsc::UnboundedReceiver<KubeletCmd>,
        max_in_flight: usize,
    ) -> Self {
        Kubelet {
            api: Api::all(client.clone()),
            client,
            cmds,
            nets: HashMap::new(),
            active: HashSet::new(),
            pods: HashMap::new(),
            foreign: HashMap::new(),
            timers: BinaryHeap::new(),
            seq: 0,
            sem: Arc::new(Semaphore::new(max_in_flight.max(1))),
            writes: JoinSet::new(),
            relist: None,
        }
    }

    /// Run until the task is aborted or the command channel closes.
    pub async fn run(mut self) {
        let cfg = watcher::Config::default().fields("spec.nodeName!=");
        let mut events = std::pin::pin!(watcher(self.api.clone(), cfg).default_backoff());
        loop {
            let next = self.timers.peek().map(|t| t.0.at);
            tokio::select! {
                biased;
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => match done {
                    Ok(done) => self.on_done(done),
                    Err(e) => tracing::warn!(error = %e, "kube-testenv agent: pod write task failed"),
                },
                cmd = self.cmds.recv() => match cmd {
                    Some(cmd) => self.on_cmd(cmd),
                    None => return,
                },
                ev = events.next() => match ev {
                    Some(Ok(ev)) => self.on_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "kube-testenv agent: pod watch error"),
                    None => return,
                },
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    self.fire_due();
                }
            }
        }
    }

    fn on_cmd(&mut self, cmd: KubeletCmd) {
        match cmd {
            KubeletCmd::Add { name, index } => {
                self.nets.entry(name.clone()).or_insert_with(|| NodeNet {
                    host_ip: node_ip(index),
                    cidr_prefix: pod_cidr_prefix(index),
                    next_ip: 2,
                });
                if !self.active.insert(name.clone()) {
                    return;
                }
                let adopt: Vec<Key> = self
                    .foreign
                    .iter()
                    .filter(|(_, p)| node_of(p) == name)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in adopt {
                    if let Some(pod) = self.foreign.remove(&key) {
                        self.on_apply(pod);
                    }
                }
            }
            KubeletCmd::Remove { name } => {
                if !self.active.remove(&name) {
                    return;
                }
                let dropped: Vec<Key> = self
                    .pods
                    .iter()
                    .filter(|(_, s)| node_of(&s.pod) == name)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in dropped {
                    if let Some(s) = self.pods.remove(&key) {
                        self.foreign.insert(key, s.pod);
                    }
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
                    self.foreign.retain(|k, _| seen.contains(k));
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
                if self
                    .foreign
                    .get(&key)
                    .is_some_and(|p| p.metadata.uid == pod.metadata.uid)
                {
                    self.foreign.remove(&key);
                }
            }
        }
    }

    fn on_apply(&mut self, pod: Pod) {
        let key = key_of(&pod);
        let node = node_of(&pod).to_string();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !self.active.contains(&node) {
            self.pods.remove(&key);
            self.foreign.insert(key, pod);
            return;
        }
        self.foreign.remove(&key);
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
            tracing::warn!(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default(), "kube-testenv agent: {w}");
        }
        let status = pod.status.clone().unwrap_or_default();
        let phase = match status.phase.as_deref() {
            Some("Succeeded") | Some("Failed") => Phase::Terminal,
            Some("Running") => Phase::Running,
            _ => Phase::Pending,
        };
        let net = self.nets.get_mut(node).expect("node checked by caller");
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        // Keep an address the pod already has; a host-network pod has the node's.
        let pod_ip = match status.pod_ip.clone().filter(|ip| !ip.is_empty()) {
            Some(ip) => ip,
            None if host_network => net.host_ip.clone(),
            None => {
                let ip = format!("{}.{}", net.cidr_prefix, net.next_ip);
                net.next_ip = if net.next_ip >= 254 {
                    2
                } else {
                    net.next_ip + 1
                };
                ip
            }
        };
        let first = status.container_statuses.as_ref().and_then(|c| c.first());
        let restart_count = first.map_or(0, |c| c.restart_count.max(0));
        let last_exit = first
            .and_then(|c| c.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(|t| LastExit {
                code: t.exit_code,
                started: t.started_at.clone().unwrap_or_else(now),
                finished: t.finished_at.clone().unwrap_or_else(now),
            });
        let start_time = status.start_time.clone().unwrap_or_else(now);
        // A pod found Running (the agent restarted): its current run began at the last
        // container start, else at startTime.
        let run_started_wall = first
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone())
            .unwrap_or_else(|| start_time.clone());
        let run_started = if phase == Phase::Running {
            instant_of(&run_started_wall)
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
            last_exit,
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
            return; // deleted before it started: on_deletion ends it
        }
        s.phase = Phase::Running;
        s.run_started = Instant::now();
        s.start_time = now();
        s.run_started_wall = s.start_time.clone();
        let status = running_status(s);
        s.queue.push_back(Op::Status(status));
        let due = s.plan.duration.map(|d| s.run_started + d);
        let deadline = active_deadline(s).map(|d| s.run_started + d);
        self.pump(key);
        if let Some(at) = due {
            self.schedule(key, at, TimerKind::Finish);
        }
        if let Some(at) = deadline {
            self.schedule(key, at, TimerKind::Deadline);
        }
    }

    /// Pick up a pod found Running or terminal when (re)listing or adopting.
    fn resume(&mut self, key: &Key) {
        let Some(s) = self.pods.get(key) else { return };
        if s.phase != Phase::Running {
            return;
        }
        let due = s.plan.duration.map(|d| s.run_started + d);
        let deadline = active_deadline(s).map(|d| instant_of(&s.start_time) + d);
        if let Some(at) = due {
            self.schedule(key, at, TimerKind::Finish);
        }
        if let Some(at) = deadline {
            self.schedule(key, at, TimerKind::Deadline);
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
            Phase::Terminal => {
                s.gen_ += 1;
                self.enqueue_delete(key);
            }
            Phase::Pending => {
                // Never started: it ends at once as killed, as a kubelet reports it.
                s.phase = Phase::Terminal;
                s.gen_ += 1;
                let status = terminal_status(s, KILLED_EXIT_CODE);
                s.queue.push_back(Op::Status(status));
                self.pump(key);
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
                    s.last_exit = Some(LastExit {
                        code,
                        started: s.run_started_wall.clone(),
                        finished: now(),
                    });
                    s.phase = Phase::Waiting;
                    let status = waiting_status(s);
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
                s.restart_count += 1;
                s.run_started = Instant::now();
                s.run_started_wall = now();
                let status = running_status(s);
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
        let key = key.clone();
        self.writes.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = match op {
                Op::Status(patch) => util::retry!(api.patch_status(
                    &name,
                    &util::patch_params(),
                    &Patch::Strategic(&patch)
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
            Done { key, uid, result }
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
            tracing::warn!(pod = %done.key.1, namespace = %done.key.0, error = %e, "kube-testenv agent: pod API write failed");
        }
        self.pump(&done.key);
    }
}

fn key_of(pod: &Pod) -> Key {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// The monotonic instant of a past wall-clock time (now if it lies in the future).
fn instant_of(t: &Time) -> Instant {
    // The whole duration: a Span's `get_milliseconds` is only its milliseconds field.
    let elapsed = k8s_openapi::jiff::Timestamp::now()
        .duration_since(t.0)
        .as_millis()
        .max(0) as u64;
    Instant::now()
        .checked_sub(Duration::from_millis(elapsed))
        .unwrap_or_else(Instant::now)
}

fn active_deadline(s: &PodState) -> Option<Duration> {
    s.pod
        .spec
        .as_ref()
        .and_then(|p| p.active_deadline_seconds)
        .filter(|d| *d > 0)
        .map(|d| Duration::from_secs(d as u64))
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

/// A restartable init container (sidecar): runs alongside the main containers.
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// ID of the `run`-th run (from 0) of a container.
fn container_id(s: &PodState, name: &str, run: i32) -> String {
    format!(
        "containerd://{}",
        sha1_hex(&format!("{}/{name}/{run}", s.uid))
    )
}

fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    format!("{repo}@sha256:{}{}", sha1_hex(image), &sha1_hex(repo)[..24])
}

fn condition(
    s: &PodState,
    type_: &str,
    status: bool,
    reason: Option<&str>,
    t: &Time,
) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.map(Into::into),
        last_transition_time: Some(t.clone()),
        observed_generation: s.pod.metadata.generation,
        ..Default::default()
    }
}

/// The kubelet's conditions, plus PodScheduled when the pod has none (a pod created with
/// `spec.nodeName` set); the others' conditions are kept by the strategic merge.
fn with_scheduled(s: &PodState, mut ours: Vec<PodCondition>) -> Vec<PodCondition> {
    debug_assert!(
        ours.iter()
            .all(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()))
    );
    let scheduled = s
        .pod
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled"));
    if !scheduled {
        ours.insert(0, condition(s, "PodScheduled", true, None, &s.start_time));
    }
    ours
}

fn terminated(code: i32, started: Option<Time>, finished: Time, id: String) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            started_at: started,
            finished_at: Some(finished),
            container_id: Some(id),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Status fields common to every write. `end` is the exit code and time the sidecars ended
/// with, `None` while they run.
fn base_status(
    s: &PodState,
    phase: &str,
    conditions: Vec<PodCondition>,
    end: Option<(i32, &Time)>,
) -> PodStatus {
    let t = s.start_time.clone();
    let init_statuses: Vec<ContainerStatus> = s
        .pod
        .spec
        .as_ref()
        .and_then(|p| p.init_containers.as_ref())
        .map(|ics| {
            ics.iter()
                .map(|c| {
                    let image = c.image.clone().unwrap_or_default();
                    let id = container_id(s, &c.name, 0);
                    let (state, running) = match (is_sidecar(c), end) {
                        (true, None) => (
                            ContainerState {
                                running: Some(ContainerStateRunning {
                                    started_at: Some(t.clone()),
                                }),
                                ..Default::default()
                            },
                            true,
                        ),
                        (true, Some((code, at))) => (
                            terminated(code, Some(t.clone()), at.clone(), id.clone()),
                            false,
                        ),
                        (false, _) => {
                            (terminated(0, Some(t.clone()), t.clone(), id.clone()), false)
                        }
                    };
                    ContainerStatus {
                        name: c.name.clone(),
                        image_id: image_id(&image),
                        image,
                        container_id: Some(id),
                        ready: running || (!is_sidecar(c)),
                        started: Some(running),
                        restart_count: 0,
                        state: Some(state),
                        ..Default::default()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    PodStatus {
        observed_generation: s.pod.metadata.generation,
        phase: Some(phase.into()),
        conditions: Some(with_scheduled(s, conditions)),
        host_ip: Some(s.host_ip.clone()),
        pod_ip: Some(s.pod_ip.clone()),
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

/// `lastState` of a container that ran before: how the previous run ended.
fn last_state(s: &PodState, name: &str, prev_run: i32) -> Option<ContainerState> {
    let last = s.last_exit.as_ref()?;
    Some(terminated(
        last.code,
        Some(last.started.clone()),
        last.finished.clone(),
        container_id(s, name, prev_run.max(0)),
    ))
}

/// The strategic-merge patch for `pods/status`: the status with `podIPs`/`hostIPs` replaced
/// (not merged by IP, so `podIP == podIPs[0]` holds) and the pod's UID as a precondition.
fn to_patch(s: &PodState, status: PodStatus) -> serde_json::Value {
    let mut st = serde_json::to_value(status).unwrap_or_default();
    st["podIPs"] = serde_json::json!([{ "$patch": "replace" }, { "ip": s.pod_ip }]);
    st["hostIPs"] = serde_json::json!([{ "$patch": "replace" }, { "ip": s.host_ip }]);
    serde_json::json!({ "metadata": { "uid": s.uid }, "status": st })
}

/// Status of a pod whose containers run.
fn running_status(s: &PodState) -> serde_json::Value {
    let t = s.run_started_wall.clone();
    let conds = vec![
        condition(s, "PodReadyToStartContainers", true, None, &s.start_time),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", true, None, &t),
        condition(s, "Ready", true, None, &t),
    ];
    let mut st = base_status(s, "Running", conds, None);
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name, s.restart_count)),
                ready: true,
                started: Some(true),
                restart_count: s.restart_count,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(t.clone()),
                    }),
                    ..Default::default()
                }),
                last_state: last_state(s, &name, s.restart_count - 1),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(s, st)
}

/// Status of a pod whose containers crashed and wait to be restarted.
fn waiting_status(s: &PodState) -> serde_json::Value {
    let t = now();
    let conds = vec![
        condition(s, "PodReadyToStartContainers", true, None, &s.start_time),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", false, Some("ContainersNotReady"), &t),
        condition(s, "Ready", false, Some("ContainersNotReady"), &t),
    ];
    let mut st = base_status(s, "Running", conds, None);
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name, s.restart_count)),
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
                last_state: last_state(s, &name, s.restart_count),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(s, st)
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
        condition(s, "PodReadyToStartContainers", false, None, &t),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", false, Some(reason), &t),
        condition(s, "Ready", false, Some(reason), &t),
    ];
    let phase = if succeeded { "Succeeded" } else { "Failed" };
    // Sidecars are stopped once the main containers end: a clean exit unless killed.
    let sidecar_code = if code == KILLED_EXIT_CODE { code } else { 0 };
    let mut st = base_status(s, phase, conds, Some((sidecar_code, &t)));
    st.container_statuses = Some(
        containers(s)
            .into_iter()
            .map(|(name, image)| ContainerStatus {
                image_id: image_id(&image),
                container_id: Some(container_id(s, &name, s.restart_count)),
                ready: false,
                started: Some(false),
                restart_count: s.restart_count,
                state: Some(terminated(
                    code,
                    Some(s.run_started_wall.clone()),
                    t.clone(),
                    container_id(s, &name, s.restart_count),
                )),
                last_state: last_state(s, &name, s.restart_count - 1),
                name,
                image,
                ..Default::default()
            })
            .collect(),
    );
    to_patch(s, st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn state(restart: &str, plan: RunPlan) -> PodState {
        let mut pod = Pod {
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
        pod.metadata.generation = Some(1);
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
            last_exit: None,
            deleting: None,
            delete_enqueued: false,
            gen_: 0,
            busy: false,
            queue: VecDeque::new(),
        }
    }

    fn forever() -> RunPlan {
        RunPlan {
            duration: None,
            exit_code: 0,
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
        let s = state("Never", forever());
        let v = running_status(&s);
        assert_eq!(v["metadata"]["uid"], "u1");
        assert!(v.get("spec").is_none(), "status patches never touch spec");
        let st = &v["status"];
        assert_eq!(st["phase"], "Running");
        assert_eq!(st["observedGeneration"], 1);
        // podIP is podIPs[0], and the lists replace the server's instead of merging.
        assert_eq!(st["podIP"], "10.64.0.2");
        assert_eq!(st["podIPs"][0]["$patch"], "replace");
        assert_eq!(st["podIPs"][1]["ip"], "10.64.0.2");
        assert_eq!(st["hostIP"], "172.18.0.2");
        assert_eq!(st["hostIPs"][1]["ip"], "172.18.0.2");
        assert_eq!(st["containerStatuses"][0]["name"], "main");
        assert_eq!(st["containerStatuses"][0]["ready"], true);
        assert!(st["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        assert!(st["containerStatuses"][0].get("lastState").is_none());
        let conds = st["conditions"].as_array().unwrap();
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

    #[test]
    fn existing_pod_scheduled_condition_is_left_to_its_writer() {
        let mut s = state("Never", forever());
        s.pod.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let v = running_status(&s);
        let conds = v["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 4);
        assert!(conds.iter().all(|c| c["type"] != "PodScheduled"));
    }

    #[test]
    fn restarts_record_the_previous_run() {
        let mut s = state(
            "Always",
            RunPlan {
                duration: Some(Duration::ZERO),
                exit_code: 3,
            },
        );
        s.last_exit = Some(LastExit {
            code: 3,
            started: now(),
            finished: now(),
        });
        let v = waiting_status(&s);
        let cs = &v["status"]["containerStatuses"][0];
        assert!(cs["state"]["waiting"].is_object());
        assert_eq!(cs["restartCount"], 0);
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 3);
        assert_eq!(
            cs["lastState"]["terminated"]["containerID"],
            cs["containerID"]
        );
        s.restart_count = 1;
        let v = running_status(&s);
        let cs2 = &v["status"]["containerStatuses"][0];
        assert_eq!(cs2["restartCount"], 1);
        assert_eq!(
            cs2["lastState"]["terminated"]["containerID"],
            cs["containerID"]
        );
        assert_ne!(cs2["containerID"], cs["containerID"]);
    }

    #[test]
    fn init_containers_and_sidecars() {
        let mut s = state("Never", forever());
        s.pod.spec.as_mut().unwrap().init_containers = Some(vec![
            Container {
                name: "setup".into(),
                image: Some("busybox".into()),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                image: Some("envoy".into()),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ]);
        let v = running_status(&s);
        let ics = v["status"]["initContainerStatuses"].as_array().unwrap();
        assert_eq!(ics[0]["name"], "setup");
        assert_eq!(ics[0]["state"]["terminated"]["exitCode"], 0);
        assert!(ics[1]["state"]["running"].is_object());
        assert_eq!(ics[1]["ready"], true);
        let v = terminal_status(&s, 0);
        let ics = v["status"]["initContainerStatuses"].as_array().unwrap();
        assert_eq!(ics[1]["state"]["terminated"]["exitCode"], 0);
        assert_eq!(ics[1]["ready"], false);
    }
}
