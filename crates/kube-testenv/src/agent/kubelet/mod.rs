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
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::nodes::{node_ip, pod_cidr_prefix};
use super::runtime::plan_for_pod;
use super::util::{self, now};

mod lifecycle;
mod state;
mod status;

use state::{LastExit, Op, Phase, PodState, Timer};

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

pub(super) type Key = (String, String);

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
