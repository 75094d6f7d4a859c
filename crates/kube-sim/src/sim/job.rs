//! The simulated batch/v1 Job controller (see the module docs of `sim` for what it honours).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::jobset::{strip_times, subset_of};
use super::util::{self, controller_of, controller_ref, generate_name, merged, now};

/// Label with the Job's UID (also the pod selector).
pub const LABEL_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// Legacy form of [`LABEL_CONTROLLER_UID`].
pub const LABEL_CONTROLLER_UID_LEGACY: &str = "controller-uid";
/// Label with the Job's name.
pub const LABEL_JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// Legacy form of [`LABEL_JOB_NAME`].
pub const LABEL_JOB_NAME_LEGACY: &str = "job-name";
/// Label and annotation with an Indexed Job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// `spec.managedBy` value of the built-in Job controller.
const MANAGED_BY_BUILTIN: &str = "kubernetes.io/job-controller";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodPhase {
    Active,
    Succeeded,
    Failed,
}

#[derive(Debug, Clone)]
struct PodInfo {
    name: String,
    phase: PodPhase,
    ready: bool,
    terminating: bool,
    index: Option<i32>,
}

/// What the controller knows of one Job's pods, kept even while the Job is unknown.
#[derive(Debug, Default)]
struct Owned {
    pods: HashMap<String, PodInfo>,
    succeeded: HashSet<String>,
    failed: HashSet<String>,
    succeeded_indexes: BTreeSet<i32>,
    /// Pods this controller deleted (not counted as failures).
    self_deleted: HashSet<String>,
}

#[derive(Debug)]
struct Entry {
    job: Job,
    creating: usize,
    creating_indexes: HashSet<i32>,
    last_status: Option<serde_json::Value>,
    status_in_flight: bool,
    /// The deadline a timer is already set for.
    deadline_armed: Option<k8s_openapi::jiff::Timestamp>,
}

enum Msg {
    Created {
        job_uid: String,
        index: Option<i32>,
        result: Result<Box<Pod>, kube::Error>,
    },
    StatusWritten {
        job_uid: String,
        result: Result<(), kube::Error>,
    },
}

struct Controller {
    client: kube::Client,
    jobs: HashMap<String, Entry>,
    owned: HashMap<String, Owned>,
    dirty: HashSet<String>,
    timers: BinaryHeap<Reverse<(Instant, String)>>,
    sem: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Msg>,
    pod_relist: Option<HashSet<String>>,
    job_relist: Option<HashSet<String>>,
}

/// Run the Job controller until the task is aborted.
pub async fn run(client: kube::Client, max_in_flight: usize) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        client: client.clone(),
        jobs: HashMap::new(),
        owned: HashMap::new(),
        dirty: HashSet::new(),
        timers: BinaryHeap::new(),
        sem: Arc::new(Semaphore::new(max_in_flight)),
        tx,
        pod_relist: None,
        job_relist: None,
    };
    let mut jobs = std::pin::pin!(
        watcher(Api::<Job>::all(client.clone()), watcher::Config::default()).default_backoff()
    );
    let pod_cfg = watcher::Config::default().labels(LABEL_CONTROLLER_UID);
    let mut pods = std::pin::pin!(watcher(Api::<Pod>::all(client), pod_cfg).default_backoff());
    loop {
        let next = c.timers.peek().map(|t| t.0.0);
        tokio::select! {
            biased;
            ev = jobs.next() => match ev {
                Some(Ok(ev)) => c.on_job_event(ev),
                Some(Err(e)) => tracing::warn!(error = %e, "kube-sim job controller: job watch error"),
                None => return,
            },
            ev = pods.next() => match ev {
                Some(Ok(ev)) => c.on_pod_event(ev),
                Some(Err(e)) => tracing::warn!(error = %e, "kube-sim job controller: pod watch error"),
                None => return,
            },
            Some(msg) = rx.recv() => c.on_msg(msg),
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now_i = Instant::now();
                while c.timers.peek().is_some_and(|t| t.0.0 <= now_i) {
                    if let Some(Reverse((_, uid))) = c.timers.pop() {
                        c.dirty.insert(uid);
                    }
                }
            }
            _ = std::future::ready(()), if !c.dirty.is_empty() => {
                for uid in std::mem::take(&mut c.dirty) {
                    c.reconcile(&uid);
                }
            }
        }
    }
}

fn pod_info(pod: &Pod) -> PodInfo {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        _ => PodPhase::Active,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let index = pod
        .annotations()
        .get(COMPLETION_INDEX)
        .or_else(|| pod.labels().get(COMPLETION_INDEX))
        .and_then(|v| v.parse().ok());
    PodInfo {
        name: pod.name_any(),
        phase,
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        index,
    }
}

fn job_owner_uid(pod: &Pod) -> Option<String> {
    controller_of(pod.metadata.owner_references.as_ref())
        .filter(|r| r.kind == "Job" && r.api_version == "batch/v1")
        .map(|r| r.uid.clone())
}

impl Controller {
    fn on_job_event(&mut self, ev: watcher::Event<Job>) {
        match ev {
            watcher::Event::Init => self.job_relist = Some(HashSet::new()),
            watcher::Event::InitApply(job) | watcher::Event::Apply(job) => {
                let uid = job.uid().unwrap_or_default();
                if let Some(seen) = &mut self.job_relist {
                    seen.insert(uid.clone());
                }
                self.dirty.insert(uid.clone());
                match self.jobs.get_mut(&uid) {
                    Some(e) => e.job = job,
                    None => {
                        self.jobs.insert(
                            uid,
                            Entry {
                                job,
                                creating: 0,
                                creating_indexes: HashSet::new(),
                                last_status: None,
                                status_in_flight: false,
                                deadline_armed: None,
                            },
                        );
                    }
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.job_relist.take() {
                    let gone: Vec<String> = self
                        .jobs
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.job_gone(&uid);
                    }
                }
            }
            watcher::Event::Delete(job) => {
                let uid = job.uid().unwrap_or_default();
                self.job_gone(&uid);
            }
        }
    }

    /// The Job was deleted: delete its pods, as the garbage collector would.
    fn job_gone(&mut self, uid: &str) {
        let Some(e) = self.jobs.remove(uid) else {
            return;
        };
        let ns = e.job.namespace().unwrap_or_default();
        let victims: Vec<(String, String)> = self
            .owned
            .get(uid)
            .map(|o| {
                o.pods
                    .iter()
                    .filter(|(_, p)| !p.terminating)
                    .map(|(pu, p)| (p.name.clone(), pu.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (name, pod_uid) in victims {
            self.delete_pod(uid, &ns, &name, &pod_uid);
        }
    }

    fn on_pod_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Init => self.pod_relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                let (Some(owner), Some(pod_uid)) = (job_owner_uid(&pod), pod.uid()) else {
                    return;
                };
                if let Some(seen) = &mut self.pod_relist {
                    seen.insert(pod_uid.clone());
                }
                self.observe_pod(&owner, pod_uid, pod_info(&pod));
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    let mut gone = Vec::new();
                    for (owner, o) in &self.owned {
                        for pu in o.pods.keys() {
                            if !seen.contains(pu) {
                                gone.push((owner.clone(), pu.clone()));
                            }
                        }
                    }
                    for (owner, pu) in gone {
                        self.pod_gone(&owner, &pu);
                    }
                }
            }
            watcher::Event::Delete(pod) => {
                if let (Some(owner), Some(pu)) = (job_owner_uid(&pod), pod.uid()) {
                    self.pod_gone(&owner, &pu);
                }
            }
        }
    }

    fn observe_pod(&mut self, owner: &str, pod_uid: String, info: PodInfo) {
        let o = self.owned.entry(owner.to_string()).or_default();
        match info.phase {
            PodPhase::Succeeded => {
                o.succeeded.insert(pod_uid.clone());
                if let Some(i) = info.index {
                    o.succeeded_indexes.insert(i);
                }
            }
            PodPhase::Failed if !o.self_deleted.contains(&pod_uid) => {
                o.failed.insert(pod_uid.clone());
            }
            _ => {}
        }
        o.pods.insert(pod_uid, info);
        self.dirty.insert(owner.to_string());
    }

    fn pod_gone(&mut self, owner: &str, pod_uid: &str) {
        let Some(o) = self.owned.get_mut(owner) else {
            return;
        };
        if let Some(p) = o.pods.remove(pod_uid)
            && p.phase == PodPhase::Active
            && !o.self_deleted.contains(pod_uid)
        {
            // Removed before it ended: the real controller counts it as failed.
            o.failed.insert(pod_uid.to_string());
        }
        o.self_deleted.remove(pod_uid);
        if o.pods.is_empty() && !self.jobs.contains_key(owner) {
            self.owned.remove(owner);
        }
        self.dirty.insert(owner.to_string());
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Created {
                job_uid,
                index,
                result,
            } => {
                let job_alive = self.jobs.contains_key(&job_uid);
                if let Some(e) = self.jobs.get_mut(&job_uid) {
                    e.creating = e.creating.saturating_sub(1);
                    if let Some(i) = index {
                        e.creating_indexes.remove(&i);
                    }
                }
                match result {
                    Ok(pod) => {
                        let (Some(pu), ns) = (pod.uid(), pod.namespace().unwrap_or_default())
                        else {
                            return;
                        };
                        if !job_alive {
                            // The Job went away while the pod was being created.
                            let name = pod.name_any();
                            self.delete_pod(&job_uid, &ns, &name, &pu);
                            return;
                        }
                        let o = self.owned.entry(job_uid.clone()).or_default();
                        o.pods.entry(pu).or_insert_with(|| pod_info(&pod));
                        self.dirty.insert(job_uid);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "kube-sim job controller: creating a pod failed");
                        self.timers
                            .push(Reverse((Instant::now() + Duration::from_secs(1), job_uid)));
                    }
                }
            }
            Msg::StatusWritten { job_uid, result } => {
                if let Some(e) = self.jobs.get_mut(&job_uid) {
                    e.status_in_flight = false;
                    if let Err(err) = result {
                        if !util::is_not_found(&err) {
                            tracing::warn!(error = %err, "kube-sim job controller: status write failed");
                        }
                        e.last_status = None;
                        self.timers.push(Reverse((
                            Instant::now() + Duration::from_millis(500),
                            job_uid,
                        )));
                        return;
                    }
                    self.dirty.insert(job_uid);
                }
            }
        }
    }

    fn delete_pod(&mut self, owner: &str, ns: &str, name: &str, pod_uid: &str) {
        let o = self.owned.entry(owner.to_string()).or_default();
        if !o.self_deleted.insert(pod_uid.to_string()) {
            return; // already asked
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let (name, uid) = (name.to_string(), pod_uid.to_string());
        let sem = self.sem.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = util::retry!(api.delete(&name, &dp))
                && !util::is_not_found(&e)
            {
                tracing::warn!(pod = %name, error = %e, "kube-sim job controller: deleting a pod failed");
            }
        });
    }

    fn reconcile(&mut self, uid: &str) {
        let Some(e) = self.jobs.get(uid) else { return };
        let job = &e.job;
        if job.metadata.deletion_timestamp.is_some() {
            return self.job_gone(uid);
        }
        let Some(spec) = job.spec.clone() else { return };
        if spec
            .managed_by
            .as_deref()
            .is_some_and(|m| m != MANAGED_BY_BUILTIN)
        {
            return;
        }
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let old_status = job.status.clone().unwrap_or_default();
        let creating = e.creating;
        let creating_indexes = e.creating_indexes.clone();
        let o = self.owned.entry(uid.to_string()).or_default();

        let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
        let completions = spec.completions.map(|c| c.max(0) as usize);
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let backoff_limit = spec.backoff_limit.unwrap_or(6).max(0) as usize;
        let suspend = spec.suspend.unwrap_or(false);

        let active: Vec<(String, PodInfo)> = o
            .pods
            .iter()
            .filter(|(_, p)| p.phase == PodPhase::Active && !p.terminating)
            .map(|(u, p)| (u.clone(), p.clone()))
            .collect();
        let terminating = o
            .pods
            .values()
            .filter(|p| p.phase == PodPhase::Active && p.terminating)
            .count();
        let ready = active.iter().filter(|(_, p)| p.ready).count();
        let succeeded = o
            .succeeded
            .len()
            .max(old_status.succeeded.unwrap_or(0).max(0) as usize);
        let failed = o
            .failed
            .len()
            .max(old_status.failed.unwrap_or(0).max(0) as usize);
        let mut succeeded_indexes = o.succeeded_indexes.clone();
        if let Some(ci) = &old_status.completed_indexes {
            succeeded_indexes.extend(parse_indexes(ci));
        }

        let mut conds = old_status.conditions.clone().unwrap_or_default();
        let finished = has_true(&conds, "Complete") || has_true(&conds, "Failed");
        let mut start_time = old_status.start_time.clone();
        let mut completion_time = old_status.completion_time.clone();
        let mut to_delete: Vec<(String, String)> = Vec::new();
        let mut to_create: Vec<Option<i32>> = Vec::new();

        let deadline_at = spec
            .active_deadline_seconds
            .filter(|s| *s > 0)
            .zip(start_time.as_ref())
            .map(|(s, t)| t.0 + k8s_openapi::jiff::SignedDuration::from_secs(s));
        let past_deadline = deadline_at.is_some_and(|d| k8s_openapi::jiff::Timestamp::now() >= d);

        if finished {
            to_delete.extend(active.iter().map(|(u, p)| (p.name.clone(), u.clone())));
        } else if failed > backoff_limit || past_deadline {
            let (reason, message) = if past_deadline {
                (
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )
            } else {
                (
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            };
            set_condition(&mut conds, "FailureTarget", true, reason, message);
            set_condition(&mut conds, "Failed", true, reason, message);
            to_delete.extend(active.iter().map(|(u, p)| (p.name.clone(), u.clone())));
        } else if suspend {
            set_condition(
                &mut conds,
                "Suspended",
                true,
                "JobSuspended",
                "Job suspended",
            );
            to_delete.extend(active.iter().map(|(u, p)| (p.name.clone(), u.clone())));
            start_time = None;
        } else {
            if has_true(&conds, "Suspended") {
                set_condition(&mut conds, "Suspended", false, "JobResumed", "Job resumed");
            }
            if start_time.is_none() {
                start_time = Some(now());
            }
            let success = match (indexed, completions) {
                (true, Some(c)) => (0..c as i32).all(|i| succeeded_indexes.contains(&i)),
                (_, Some(c)) => succeeded >= c,
                (_, None) => succeeded >= 1,
            };
            let in_flight = active.len() + creating;
            if success {
                set_condition(
                    &mut conds,
                    "SuccessCriteriaMet",
                    true,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                if completions.is_some() {
                    to_delete.extend(active.iter().map(|(u, p)| (p.name.clone(), u.clone())));
                }
                let remaining = if completions.is_some() {
                    0
                } else {
                    active.len()
                };
                if remaining + terminating + creating == 0 {
                    set_condition(
                        &mut conds,
                        "Complete",
                        true,
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    );
                    completion_time = Some(now());
                }
            } else if indexed {
                let Some(c) = completions else { return };
                let busy: HashSet<i32> = active
                    .iter()
                    .filter_map(|(_, p)| p.index)
                    .chain(creating_indexes.iter().copied())
                    .collect();
                let room = parallelism.saturating_sub(in_flight);
                to_create.extend(
                    (0..c as i32)
                        .filter(|i| !succeeded_indexes.contains(i) && !busy.contains(i))
                        .take(room)
                        .map(Some),
                );
            } else {
                let want = match completions {
                    Some(c) => parallelism.min(c - succeeded.min(c)),
                    None => parallelism,
                };
                if in_flight < want {
                    to_create.extend(std::iter::repeat_n(None, want - in_flight));
                } else if active.len() > want {
                    // Parallelism lowered: remove the excess, not-ready pods first.
                    let mut extra = active.clone();
                    extra.sort_by_key(|(_, p)| p.ready);
                    to_delete.extend(
                        extra
                            .into_iter()
                            .take(active.len() - want)
                            .map(|(u, p)| (p.name, u)),
                    );
                }
            }
        }

        if let Some(d) = deadline_at
            && !past_deadline
            && !finished
            && let Some(e) = self.jobs.get_mut(uid)
            && e.deadline_armed != Some(d)
        {
            e.deadline_armed = Some(d);
            let wait = Duration::from_millis(
                d.duration_since(k8s_openapi::jiff::Timestamp::now())
                    .as_millis()
                    .clamp(0, 86_400_000 * 365) as u64,
            );
            self.timers
                .push(Reverse((Instant::now() + wait, uid.to_string())));
        }

        let deleting_now: HashSet<&String> = to_delete.iter().map(|(_, u)| u).collect();
        let active_after = active
            .iter()
            .filter(|(u, _)| !deleting_now.contains(u))
            .count();
        let status = JobStatus {
            active: Some((active_after + creating) as i32),
            ready: Some(ready as i32),
            succeeded: Some(succeeded as i32),
            failed: Some(failed as i32),
            terminating: Some((terminating + to_delete.len()) as i32),
            start_time,
            completion_time,
            completed_indexes: (indexed && !succeeded_indexes.is_empty())
                .then(|| format_indexes(&succeeded_indexes)),
            conditions: (!conds.is_empty()).then_some(conds),
            ..Default::default()
        };

        for (pod_name, pod_uid) in to_delete {
            self.delete_pod(uid, &ns, &pod_name, &pod_uid);
        }
        for index in to_create {
            self.create_pod(uid, index);
        }
        self.write_status(uid, &name, &ns, status);
    }

    fn create_pod(&mut self, uid: &str, index: Option<i32>) {
        let Some(e) = self.jobs.get_mut(uid) else {
            return;
        };
        let Some(pod) = pod_for_job(&e.job, index) else {
            return;
        };
        e.creating += 1;
        if let Some(i) = index {
            e.creating_indexes.insert(i);
        }
        let ns = e.job.namespace().unwrap_or_default();
        let prefix = match index {
            Some(i) => format!("{}-{i}-", e.job.name_any()),
            None => format!("{}-", e.job.name_any()),
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let sem = self.sem.clone();
        let tx = self.tx.clone();
        let job_uid = uid.to_string();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = create_with_random_name(&api, pod, &prefix)
                .await
                .map(Box::new);
            let _ = tx.send(Msg::Created {
                job_uid,
                index,
                result,
            });
        });
    }

    fn write_status(&mut self, uid: &str, name: &str, ns: &str, status: JobStatus) {
        let Some(e) = self.jobs.get_mut(uid) else {
            return;
        };
        let mut patch = serde_json::json!({ "status": status });
        if patch["status"].get("startTime").is_none() {
            // Merge patch: null removes the field (a suspended Job has no start time).
            patch["status"]["startTime"] = serde_json::Value::Null;
        }
        if e.status_in_flight || !status_differs(e.job.status.as_ref(), &patch, &e.last_status) {
            return;
        }
        e.status_in_flight = true;
        e.last_status = Some(patch.clone());
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let name = name.to_string();
        let tx = self.tx.clone();
        let job_uid = uid.to_string();
        tokio::spawn(async move {
            let result = util::retry!(api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&patch)
            ))
            .map(|_| ());
            let _ = tx.send(Msg::StatusWritten { job_uid, result });
        });
    }
}

/// Whether `patch` would change the stored status (ignoring condition timestamps) and was
/// not just written.
fn status_differs(
    current: Option<&JobStatus>,
    patch: &serde_json::Value,
    last: &Option<serde_json::Value>,
) -> bool {
    let current = serde_json::to_value(current.cloned().unwrap_or_default()).unwrap_or_default();
    let wanted = strip_times(&patch["status"]);
    !subset_of(&wanted, &strip_times(&current))
        && last
            .as_ref()
            .is_none_or(|l| strip_times(&l["status"]) != wanted)
}

/// Create `pod` named `<prefix><5 random chars>`, retrying on a name collision.
pub async fn create_with_random_name(
    api: &Api<Pod>,
    mut pod: Pod,
    prefix: &str,
) -> Result<Pod, kube::Error> {
    let mut attempt = 0;
    loop {
        pod.metadata.name = Some(generate_name(prefix));
        match util::retry!(api.create(&PostParams::default(), &pod)) {
            Err(e) if util::is_already_exists(&e) && attempt < 5 => attempt += 1,
            r => return r,
        }
    }
}

/// The pod a Job creates from its template (name left to the caller).
pub fn pod_for_job(job: &Job, index: Option<i32>) -> Option<Pod> {
    let spec = job.spec.as_ref()?;
    let job_name = job.name_any();
    let job_uid = job.uid()?;
    let template = &spec.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = merged(
        meta.labels.as_ref(),
        [
            (LABEL_CONTROLLER_UID.to_string(), job_uid.clone()),
            (LABEL_CONTROLLER_UID_LEGACY.to_string(), job_uid),
            (LABEL_JOB_NAME.to_string(), job_name.clone()),
            (LABEL_JOB_NAME_LEGACY.to_string(), job_name.clone()),
        ],
    );
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    let mut pod_spec = template.spec.clone().unwrap_or_default();
    if let Some(i) = index {
        labels.insert(COMPLETION_INDEX.into(), i.to_string());
        annotations.insert(COMPLETION_INDEX.into(), i.to_string());
        if pod_spec.hostname.is_none() {
            pod_spec.hostname = Some(format!("{job_name}-{i}"));
        }
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                    api_version: None,
                }),
                ..Default::default()
            }),
            value: None,
        };
        for c in pod_spec
            .containers
            .iter_mut()
            .chain(pod_spec.init_containers.iter_mut().flatten())
        {
            let envs = c.env.get_or_insert_with(Vec::new);
            if !envs.iter().any(|e| e.name == env.name) {
                envs.push(env.clone());
            }
        }
    }
    let mut pod = Pod {
        spec: Some(pod_spec),
        ..Default::default()
    };
    pod.metadata.namespace = job.namespace();
    pod.metadata.labels = Some(labels);
    pod.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    pod.metadata.finalizers = meta.finalizers.clone();
    pod.metadata.owner_references = Some(vec![controller_ref(job, &())?]);
    Some(pod)
}

fn has_true(conds: &[JobCondition], type_: &str) -> bool {
    conds.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// Set a condition, keeping `lastTransitionTime` when its status does not change.
fn set_condition(
    conds: &mut Vec<JobCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) {
    let status_s = if status { "True" } else { "False" };
    let t: Time = now();
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status_s {
                c.status = status_s.into();
                c.last_transition_time = Some(t.clone());
            }
            c.reason = Some(reason.into());
            c.message = Some(message.into());
            c.last_probe_time = Some(t);
        }
        None => conds.push(JobCondition {
            type_: type_.into(),
            status: status_s.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(t.clone()),
            last_transition_time: Some(t),
        }),
    }
}

/// `completedIndexes` form: sorted, ranges joined (`"0-2,4"`).
pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// Parse the `completedIndexes` form; malformed parts are skipped.
pub fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>())
                    && a <= b
                    && b - a < 1_000_000
                {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(v) = part.parse() {
                    out.insert(v);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::JobSpec;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    #[test]
    fn index_ranges_round_trip() {
        let set: BTreeSet<i32> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(parse_indexes("0-2,4,6-7"), set);
        assert_eq!(parse_indexes("x,3-1,5"), [5].into_iter().collect());
    }

    fn job(indexed: bool) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("train".into()),
                namespace: Some("ns1".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                completion_mode: indexed.then(|| "Indexed".into()),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([("app".to_string(), "x".to_string())])),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            ..Default::default()
                        }],
                        restart_policy: Some("Never".into()),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn job_pod_labels_and_owner() {
        let p = pod_for_job(&job(false), None).unwrap();
        let l = p.metadata.labels.as_ref().unwrap();
        assert_eq!(l["app"], "x");
        assert_eq!(l[LABEL_CONTROLLER_UID], "uid-1");
        assert_eq!(l[LABEL_CONTROLLER_UID_LEGACY], "uid-1");
        assert_eq!(l[LABEL_JOB_NAME], "train");
        assert_eq!(l[LABEL_JOB_NAME_LEGACY], "train");
        assert!(!l.contains_key(COMPLETION_INDEX));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.api_version.as_str()),
            ("Job", "batch/v1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns1"));
    }

    #[test]
    fn indexed_job_pod() {
        let p = pod_for_job(&job(true), Some(2)).unwrap();
        assert_eq!(p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "2");
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX],
            "2"
        );
        let spec = p.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("train-2"));
        let env = spec.containers[0].env.as_ref().unwrap();
        assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"));
    }

    #[test]
    fn status_comparison_ignores_timestamps() {
        let mut a = vec![];
        set_condition(&mut a, "Complete", true, "r", "m");
        let st = JobStatus {
            conditions: Some(a.clone()),
            succeeded: Some(1),
            ..Default::default()
        };
        let mut b = a.clone();
        b[0].last_transition_time = None;
        let patch = serde_json::json!({"status": JobStatus { conditions: Some(b), succeeded: Some(1), ..Default::default() }});
        assert!(!status_differs(Some(&st), &patch, &None));
        let patch2 =
            serde_json::json!({"status": JobStatus { succeeded: Some(2), ..Default::default() }});
        assert!(status_differs(Some(&st), &patch2, &None));
    }
}
