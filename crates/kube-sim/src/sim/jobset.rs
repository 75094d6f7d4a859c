//! The simulated JobSet controller (`jobset.x-k8s.io/v1alpha2`): one Job per replica of each
//! replicatedJob, JobSet status from the Jobs' status (see the `sim` module docs).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::crds::jobset_resource;
use super::util::{self, controller_of, merged, now, sha1_hex};

/// Label/annotation: JobSet name.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Label/annotation: replicatedJob name.
pub const REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Label/annotation: replicas of the replicatedJob.
pub const REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
/// Label/annotation: sum of all replicatedJobs' replicas.
pub const GLOBAL_REPLICAS: &str = "jobset.sigs.k8s.io/global-replicas";
/// Label/annotation: index of the Job within its replicatedJob.
pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
/// Label/annotation: index of the Job within the JobSet.
pub const JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
/// Label/annotation: SHA-1 of `<namespace>/<job name>`.
pub const JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
/// Label/annotation: the JobSet restart attempt the Job belongs to.
pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobSetSpec {
    #[serde(default)]
    replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default)]
    network: Option<Network>,
    #[serde(default)]
    success_policy: Option<SuccessPolicy>,
    #[serde(default)]
    failure_policy: Option<FailurePolicy>,
    #[serde(default)]
    suspend: Option<bool>,
    #[serde(default)]
    managed_by: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicatedJob {
    name: String,
    #[serde(default)]
    replicas: Option<i32>,
    template: JobTemplateSpec,
}

impl ReplicatedJob {
    fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1).max(0)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Network {
    #[serde(default)]
    enable_dns_hostnames: Option<bool>,
    #[serde(default)]
    subdomain: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SuccessPolicy {
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    target_replicated_jobs: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailurePolicy {
    #[serde(default)]
    max_restarts: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobSetStatusIn {
    #[serde(default)]
    restarts: i32,
    #[serde(default)]
    conditions: Vec<Condition>,
}

/// What the controller tracks of a child Job.
#[derive(Debug, Clone)]
struct JobInfo {
    uid: String,
    replicated_job: String,
    attempt: i32,
    complete: bool,
    failed: bool,
    active: i32,
    ready: i32,
    succeeded: i32,
    expected: i32,
    suspended: bool,
    deleting: bool,
}

#[derive(Debug)]
struct Entry {
    obj: DynamicObject,
    creating: HashSet<String>,
    deleting: HashSet<String>,
    last_status: Option<serde_json::Value>,
    status_in_flight: bool,
    bad_spec_logged: bool,
}

enum Msg {
    Created {
        owner: String,
        name: String,
        result: Result<Box<Job>, kube::Error>,
    },
    StatusWritten {
        owner: String,
        result: Result<(), kube::Error>,
    },
    Deleted {
        owner: String,
        name: String,
    },
}

struct Controller {
    client: kube::Client,
    sets: HashMap<String, Entry>,
    jobs: HashMap<String, BTreeMap<String, JobInfo>>,
    dirty: HashSet<String>,
    retry_at: Vec<(Instant, String)>,
    sem: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Msg>,
    set_relist: Option<HashSet<String>>,
    job_relist: Option<HashSet<(String, String)>>,
}

/// Run the JobSet controller until the task is aborted.
pub async fn run(client: kube::Client, max_in_flight: usize) {
    let ar = jobset_resource();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        client: client.clone(),
        sets: HashMap::new(),
        jobs: HashMap::new(),
        dirty: HashSet::new(),
        retry_at: Vec::new(),
        sem: Arc::new(Semaphore::new(max_in_flight)),
        tx,
        set_relist: None,
        job_relist: None,
    };
    let sets_api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut sets = std::pin::pin!(watcher(sets_api, watcher::Config::default()).default_backoff());
    let jobs_cfg = watcher::Config::default().labels(JOBSET_NAME);
    let mut jobs = std::pin::pin!(watcher(Api::<Job>::all(client), jobs_cfg).default_backoff());
    loop {
        let next = c.retry_at.iter().map(|r| r.0).min();
        tokio::select! {
            biased;
            ev = sets.next() => match ev {
                Some(Ok(ev)) => c.on_set_event(ev),
                Some(Err(e)) => tracing::debug!(error = %e, "kube-sim jobset controller: jobset watch error"),
                None => return,
            },
            ev = jobs.next() => match ev {
                Some(Ok(ev)) => c.on_job_event(ev),
                Some(Err(e)) => tracing::warn!(error = %e, "kube-sim jobset controller: job watch error"),
                None => return,
            },
            Some(msg) = rx.recv() => c.on_msg(msg),
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now_i = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = c.retry_at.drain(..).partition(|r| r.0 <= now_i);
                c.retry_at = later;
                c.dirty.extend(due.into_iter().map(|r| r.1));
            }
            _ = std::future::ready(()), if !c.dirty.is_empty() => {
                for uid in std::mem::take(&mut c.dirty) {
                    c.reconcile(&uid);
                }
            }
        }
    }
}

fn jobset_owner(job: &Job) -> Option<String> {
    controller_of(job.metadata.owner_references.as_ref())
        .filter(|r| r.kind == "JobSet" && r.api_version.starts_with("jobset.x-k8s.io/"))
        .map(|r| r.uid.clone())
}

fn job_info(job: &Job) -> JobInfo {
    let spec = job.spec.as_ref();
    let st = job.status.clone().unwrap_or_default();
    let conds = st.conditions.unwrap_or_default();
    let is_true = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
    let completions = spec.and_then(|s| s.completions).unwrap_or(parallelism);
    JobInfo {
        uid: job.uid().unwrap_or_default(),
        replicated_job: job
            .labels()
            .get(REPLICATED_JOB_NAME)
            .cloned()
            .unwrap_or_default(),
        attempt: job
            .labels()
            .get(RESTART_ATTEMPT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        complete: is_true("Complete"),
        failed: is_true("Failed"),
        active: st.active.unwrap_or(0),
        ready: st.ready.unwrap_or(0),
        succeeded: st.succeeded.unwrap_or(0),
        expected: parallelism.min(completions),
        suspended: spec.and_then(|s| s.suspend).unwrap_or(false),
        deleting: job.metadata.deletion_timestamp.is_some(),
    }
}

impl Controller {
    fn on_set_event(&mut self, ev: watcher::Event<DynamicObject>) {
        match ev {
            watcher::Event::Init => self.set_relist = Some(HashSet::new()),
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let uid = obj.uid().unwrap_or_default();
                if let Some(seen) = &mut self.set_relist {
                    seen.insert(uid.clone());
                }
                self.dirty.insert(uid.clone());
                match self.sets.get_mut(&uid) {
                    Some(e) => e.obj = obj,
                    None => {
                        self.sets.insert(
                            uid,
                            Entry {
                                obj,
                                creating: HashSet::new(),
                                deleting: HashSet::new(),
                                last_status: None,
                                status_in_flight: false,
                                bad_spec_logged: false,
                            },
                        );
                    }
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.set_relist.take() {
                    let gone: Vec<String> = self
                        .sets
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.set_gone(&uid);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                let uid = obj.uid().unwrap_or_default();
                self.set_gone(&uid);
            }
        }
    }

    /// The JobSet was deleted: delete its Jobs (background propagation), as the GC would.
    fn set_gone(&mut self, uid: &str) {
        let Some(e) = self.sets.remove(uid) else {
            return;
        };
        let ns = e.obj.namespace().unwrap_or_default();
        let names: Vec<String> = self
            .jobs
            .get(uid)
            .map(|m| {
                m.iter()
                    .filter(|(_, j)| !j.deleting)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default();
        for name in names {
            self.delete_job(uid, &ns, &name, None);
        }
    }

    fn on_job_event(&mut self, ev: watcher::Event<Job>) {
        match ev {
            watcher::Event::Init => self.job_relist = Some(HashSet::new()),
            watcher::Event::InitApply(job) | watcher::Event::Apply(job) => {
                let Some(owner) = jobset_owner(&job) else {
                    return;
                };
                let name = job.name_any();
                if let Some(seen) = &mut self.job_relist {
                    seen.insert((owner.clone(), name.clone()));
                }
                self.jobs
                    .entry(owner.clone())
                    .or_default()
                    .insert(name, job_info(&job));
                self.dirty.insert(owner);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.job_relist.take() {
                    for (owner, m) in &mut self.jobs {
                        let before = m.len();
                        m.retain(|n, _| seen.contains(&(owner.clone(), n.clone())));
                        if m.len() != before {
                            self.dirty.insert(owner.clone());
                        }
                    }
                }
            }
            watcher::Event::Delete(job) => {
                let Some(owner) = jobset_owner(&job) else {
                    return;
                };
                let name = job.name_any();
                if let Some(m) = self.jobs.get_mut(&owner)
                    && m.get(&name)
                        .is_some_and(|j| Some(&j.uid) == job.metadata.uid.as_ref())
                {
                    m.remove(&name);
                }
                if let Some(e) = self.sets.get_mut(&owner) {
                    e.deleting.remove(&name);
                }
                self.dirty.insert(owner);
            }
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Created {
                owner,
                name,
                result,
            } => {
                if let Some(e) = self.sets.get_mut(&owner) {
                    e.creating.remove(&name);
                }
                match result {
                    Ok(job) => {
                        if !self.sets.contains_key(&owner) {
                            let ns = job.namespace().unwrap_or_default();
                            self.delete_job(&owner, &ns, &name, None);
                            return;
                        }
                        self.jobs
                            .entry(owner.clone())
                            .or_default()
                            .entry(name)
                            .or_insert_with(|| job_info(&job));
                    }
                    Err(e) if util::is_already_exists(&e) => {}
                    Err(e) => {
                        tracing::warn!(job = %name, error = %e, "kube-sim jobset controller: creating a Job failed");
                        self.retry_at
                            .push((Instant::now() + Duration::from_secs(1), owner.clone()));
                    }
                }
                self.dirty.insert(owner);
            }
            Msg::StatusWritten { owner, result } => {
                if let Some(e) = self.sets.get_mut(&owner) {
                    e.status_in_flight = false;
                    if let Err(err) = result {
                        if !util::is_not_found(&err) {
                            tracing::warn!(error = %err, "kube-sim jobset controller: status write failed");
                        }
                        e.last_status = None;
                        self.retry_at
                            .push((Instant::now() + Duration::from_millis(500), owner));
                        return;
                    }
                    self.dirty.insert(owner);
                }
            }
            Msg::Deleted { owner, name } => {
                if let Some(e) = self.sets.get_mut(&owner) {
                    e.deleting.remove(&name);
                }
                self.dirty.insert(owner);
            }
        }
    }

    fn delete_job(&mut self, owner: &str, ns: &str, name: &str, uid: Option<String>) {
        if let Some(e) = self.sets.get_mut(owner)
            && !e.deleting.insert(name.to_string())
        {
            return;
        }
        if let Some(j) = self.jobs.get_mut(owner).and_then(|m| m.get_mut(name)) {
            j.deleting = true;
        }
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let (name, owner) = (name.to_string(), owner.to_string());
        let sem = self.sem.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: uid.map(|u| kube::api::Preconditions {
                    uid: Some(u),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = util::retry!(api.delete(&name, &dp))
                && !util::is_not_found(&e)
            {
                tracing::warn!(job = %name, error = %e, "kube-sim jobset controller: deleting a Job failed");
            }
            let _ = tx.send(Msg::Deleted { owner, name });
        });
    }

    fn reconcile(&mut self, uid: &str) {
        let Some(e) = self.sets.get_mut(uid) else {
            return;
        };
        if e.obj.metadata.deletion_timestamp.is_some() {
            return self.set_gone(uid);
        }
        let spec: JobSetSpec = match serde_json::from_value(e.obj.data["spec"].clone()) {
            Ok(s) => s,
            Err(err) => {
                if !e.bad_spec_logged {
                    e.bad_spec_logged = true;
                    tracing::warn!(jobset = %e.obj.name_any(), error = %err, "kube-sim jobset controller: cannot read spec");
                }
                return;
            }
        };
        if spec
            .managed_by
            .as_deref()
            .is_some_and(|m| m != "jobset.sigs.k8s.io/jobset-controller")
        {
            return;
        }
        let status_in: JobSetStatusIn =
            serde_json::from_value(e.obj.data["status"].clone()).unwrap_or_default();
        let obj = e.obj.clone();
        let creating = e.creating.clone();
        let ns = obj.namespace().unwrap_or_default();
        let js_name = obj.name_any();
        let children = self.jobs.get(uid).cloned().unwrap_or_default();

        let mut restarts = status_in.restarts;
        let mut conds = status_in.conditions.clone();
        let finished_state = terminal_state(&conds);
        let suspend = spec.suspend.unwrap_or(false);

        // Jobs of earlier restart attempts go away first.
        let mut to_delete: Vec<(String, String)> = children
            .iter()
            .filter(|(_, j)| j.attempt < restarts && !j.deleting)
            .map(|(n, j)| (n.clone(), j.uid.clone()))
            .collect();
        let current: BTreeMap<&String, &JobInfo> = children
            .iter()
            .filter(|(_, j)| j.attempt >= restarts)
            .collect();
        let mut to_create: Vec<(usize, i32)> = Vec::new();
        let mut to_suspend: Vec<(String, bool)> = Vec::new();
        let mut terminal: Option<&str> = finished_state;

        if let Some(state) = finished_state {
            if state == "Failed" {
                to_delete.extend(
                    current
                        .iter()
                        .filter(|(_, j)| !j.complete && !j.failed && !j.deleting)
                        .map(|(n, j)| ((*n).clone(), j.uid.clone())),
                );
            }
        } else if current.values().any(|j| j.failed) {
            let max_restarts = spec
                .failure_policy
                .as_ref()
                .and_then(|f| f.max_restarts)
                .unwrap_or(0);
            if restarts < max_restarts {
                restarts += 1;
                to_delete.extend(
                    current
                        .iter()
                        .filter(|(_, j)| !j.deleting)
                        .map(|(n, j)| ((*n).clone(), j.uid.clone())),
                );
            } else {
                set_condition(
                    &mut conds,
                    "Failed",
                    "FailedJobs",
                    "jobset failed due to one or more job failures",
                );
                terminal = Some("Failed");
                to_delete.extend(
                    current
                        .iter()
                        .filter(|(_, j)| !j.complete && !j.failed && !j.deleting)
                        .map(|(n, j)| ((*n).clone(), j.uid.clone())),
                );
            }
        } else if succeeded(&spec, &current) {
            set_condition(
                &mut conds,
                "Completed",
                "AllJobsCompleted",
                "jobset completed successfully",
            );
            terminal = Some("Completed");
        } else {
            for (ri, rj) in spec.replicated_jobs.iter().enumerate() {
                for idx in 0..rj.replicas() {
                    let name = job_name(&js_name, &rj.name, idx);
                    if !children.contains_key(&name) && !creating.contains(&name) {
                        to_create.push((ri, idx));
                    }
                }
            }
            for (n, j) in &current {
                if j.suspended != suspend && !j.complete && !j.failed && !j.deleting {
                    to_suspend.push(((*n).clone(), suspend));
                }
            }
        }
        if terminal.is_none() {
            if suspend {
                set_condition(
                    &mut conds,
                    "Suspended",
                    "SuspendedJobs",
                    "jobset is suspended",
                );
            } else if let Some(c) = conds
                .iter_mut()
                .find(|c| c.type_ == "Suspended" && c.status == "True")
            {
                c.status = "False".into();
                c.reason = "ResumeJobs".into();
                c.message = "jobset is resumed".into();
                c.last_transition_time = now();
            }
        }

        let rj_status: Vec<serde_json::Value> = spec
            .replicated_jobs
            .iter()
            .map(|rj| {
                let mine: Vec<&&JobInfo> =
                    current.values().filter(|j| j.replicated_job == rj.name).collect();
                serde_json::json!({
                    "name": rj.name,
                    "ready": mine.iter().filter(|j| !j.complete && !j.failed && j.ready + j.succeeded >= j.expected).count(),
                    "succeeded": mine.iter().filter(|j| j.complete).count(),
                    "failed": mine.iter().filter(|j| j.failed).count(),
                    "active": mine.iter().filter(|j| !j.complete && !j.failed && j.active > 0).count(),
                    "suspended": mine.iter().filter(|j| j.suspended).count(),
                })
            })
            .collect();
        let mut status = serde_json::json!({
            "restarts": restarts,
            "replicatedJobsStatus": rj_status,
        });
        if !conds.is_empty() {
            status["conditions"] = serde_json::to_value(&conds).unwrap_or_default();
        }
        if let Some(t) = terminal {
            status["terminalState"] = t.into();
        }

        for (name, juid) in to_delete {
            self.delete_job(uid, &ns, &name, Some(juid));
        }
        for (ri, idx) in to_create {
            self.create_job(uid, &obj, &spec, ri, idx, restarts);
        }
        for (name, s) in to_suspend {
            let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
            tokio::spawn(async move {
                let patch = serde_json::json!({ "spec": { "suspend": s } });
                if let Err(e) =
                    util::retry!(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
                {
                    tracing::warn!(job = %name, error = %e, "kube-sim jobset controller: suspending a Job failed");
                }
            });
        }
        self.write_status(uid, &js_name, &ns, status);
    }

    fn create_job(
        &mut self,
        uid: &str,
        obj: &DynamicObject,
        spec: &JobSetSpec,
        ri: usize,
        idx: i32,
        attempt: i32,
    ) {
        let Some(job) = build_job(obj, spec, ri, idx, attempt) else {
            return;
        };
        let name = job.name_any();
        if let Some(e) = self.sets.get_mut(uid) {
            e.creating.insert(name.clone());
        }
        let api: Api<Job> =
            Api::namespaced(self.client.clone(), &obj.namespace().unwrap_or_default());
        let sem = self.sem.clone();
        let tx = self.tx.clone();
        let owner = uid.to_string();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = util::retry!(api.create(&PostParams::default(), &job)).map(Box::new);
            let _ = tx.send(Msg::Created {
                owner,
                name,
                result,
            });
        });
    }

    fn write_status(&mut self, uid: &str, name: &str, ns: &str, status: serde_json::Value) {
        let Some(e) = self.sets.get_mut(uid) else {
            return;
        };
        let current = strip_times(&e.obj.data["status"]);
        let wanted = strip_times(&status);
        if e.status_in_flight
            || subset_of(&wanted, &current)
            || e.last_status
                .as_ref()
                .is_some_and(|l| strip_times(l) == wanted)
        {
            return;
        }
        e.status_in_flight = true;
        e.last_status = Some(status.clone());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &jobset_resource());
        let name = name.to_string();
        let tx = self.tx.clone();
        let owner = uid.to_string();
        tokio::spawn(async move {
            let patch = serde_json::json!({ "status": status });
            let result = util::retry!(api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&patch)
            ))
            .map(|_| ());
            let _ = tx.send(Msg::StatusWritten { owner, result });
        });
    }
}

/// True when applying `a` as a merge patch would not change `b` (objects compared key by
/// key, `null` matching an absent field).
pub(super) fn subset_of(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => a.iter().all(|(k, v)| {
            match b.get(k) {
                // A null in a merge patch removes the field: absent counts as equal.
                None => v.is_null(),
                Some(bv) => subset_of(v, bv),
            }
        }),
        _ => a == b,
    }
}

/// A copy without condition timestamps, for change detection.
pub(super) fn strip_times(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    if let Some(conds) = v.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in conds {
            if let Some(m) = c.as_object_mut() {
                m.remove("lastTransitionTime");
                m.remove("lastProbeTime");
            }
        }
    }
    v
}

fn terminal_state(conds: &[Condition]) -> Option<&'static str> {
    if conds
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True")
    {
        Some("Failed")
    } else if conds
        .iter()
        .any(|c| c.type_ == "Completed" && c.status == "True")
    {
        Some("Completed")
    } else {
        None
    }
}

fn succeeded(spec: &JobSetSpec, current: &BTreeMap<&String, &JobInfo>) -> bool {
    let policy = spec.success_policy.clone().unwrap_or_default();
    let targets: Vec<&ReplicatedJob> = spec
        .replicated_jobs
        .iter()
        .filter(|rj| {
            policy
                .target_replicated_jobs
                .as_ref()
                .is_none_or(|t| t.is_empty() || t.contains(&rj.name))
        })
        .collect();
    if targets.is_empty() {
        return false;
    }
    let complete_of = |rj: &ReplicatedJob| {
        current
            .values()
            .filter(|j| j.replicated_job == rj.name && j.complete)
            .count() as i32
    };
    match policy.operator.as_deref() {
        Some("Any") => targets.iter().any(|rj| complete_of(rj) > 0),
        _ => targets.iter().all(|rj| complete_of(rj) >= rj.replicas()),
    }
}

fn set_condition(conds: &mut Vec<Condition>, type_: &str, reason: &str, message: &str) {
    // Completed and Failed exclude each other; a true one turns the other false.
    for c in conds.iter_mut() {
        if c.type_ != type_
            && matches!(c.type_.as_str(), "Completed" | "Failed" | "Suspended")
            && c.status == "True"
        {
            c.status = "False".into();
            c.last_transition_time = now();
        }
    }
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            c.status = "True".into();
            c.reason = reason.into();
            c.message = message.into();
            c.last_transition_time = now();
        }
        None => conds.push(Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now(),
            observed_generation: None,
        }),
    }
}

/// Job name of replica `idx` of replicatedJob `rj`.
pub fn job_name(jobset: &str, rj: &str, idx: i32) -> String {
    format!("{jobset}-{rj}-{idx}")
}

/// The labels (also used as annotations) JobSet puts on a Job and its pod template.
fn jobset_labels(
    ns: &str,
    js_name: &str,
    spec: &JobSetSpec,
    ri: usize,
    idx: i32,
    attempt: i32,
) -> Vec<(String, String)> {
    let rj = &spec.replicated_jobs[ri];
    let global_replicas: i32 = spec
        .replicated_jobs
        .iter()
        .map(ReplicatedJob::replicas)
        .sum();
    let global_index: i32 = spec.replicated_jobs[..ri]
        .iter()
        .map(ReplicatedJob::replicas)
        .sum::<i32>()
        + idx;
    let name = job_name(js_name, &rj.name, idx);
    vec![
        (JOBSET_NAME.into(), js_name.into()),
        (REPLICATED_JOB_NAME.into(), rj.name.clone()),
        (RESTART_ATTEMPT.into(), attempt.to_string()),
        (REPLICATED_JOB_REPLICAS.into(), rj.replicas().to_string()),
        (GLOBAL_REPLICAS.into(), global_replicas.to_string()),
        (JOB_INDEX.into(), idx.to_string()),
        (JOB_KEY.into(), sha1_hex(&format!("{ns}/{name}"))),
        (JOB_GLOBAL_INDEX.into(), global_index.to_string()),
    ]
}

/// The Job for replica `idx` of replicatedJob number `ri`.
fn build_job(
    obj: &DynamicObject,
    spec: &JobSetSpec,
    ri: usize,
    idx: i32,
    attempt: i32,
) -> Option<Job> {
    let rj = spec.replicated_jobs.get(ri)?;
    let ns = obj.namespace().unwrap_or_default();
    let js_name = obj.name_any();
    let extra = jobset_labels(&ns, &js_name, spec, ri, idx, attempt);
    let tmeta = rj.template.metadata.clone().unwrap_or_default();
    let mut job_spec = rj.template.spec.clone()?;
    if job_spec.completion_mode.is_none() {
        job_spec.completion_mode = Some("Indexed".into());
    }
    job_spec.suspend = Some(spec.suspend.unwrap_or(false));
    let pmeta = job_spec
        .template
        .metadata
        .get_or_insert_with(Default::default);
    pmeta.labels = Some(merged(pmeta.labels.as_ref(), extra.clone()));
    pmeta.annotations = Some(merged(pmeta.annotations.as_ref(), extra.clone()));
    let network = spec.network.clone().unwrap_or_default();
    if network.enable_dns_hostnames.unwrap_or(true)
        && let Some(ps) = job_spec.template.spec.as_mut()
        && ps.subdomain.is_none()
    {
        ps.subdomain = Some(network.subdomain.clone().unwrap_or_else(|| js_name.clone()));
    }
    let mut job = Job {
        spec: Some(job_spec),
        ..Default::default()
    };
    job.metadata.name = Some(job_name(&js_name, &rj.name, idx));
    job.metadata.namespace = Some(ns);
    job.metadata.labels = Some(merged(tmeta.labels.as_ref(), extra.clone()));
    job.metadata.annotations = Some(merged(tmeta.annotations.as_ref(), extra));
    job.metadata.owner_references = Some(vec![OwnerReference {
        api_version: jobset_resource().api_version,
        kind: "JobSet".into(),
        name: js_name,
        uid: obj.uid()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Some(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset() -> (DynamicObject, JobSetSpec) {
        let mut obj = DynamicObject::new("train", &jobset_resource()).within("ns1");
        obj.metadata.uid = Some("js-uid".into());
        let spec_json = serde_json::json!({
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}},
                {"name": "workers", "replicas": 2, "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {"parallelism": 2, "completions": 2, "template": {
                        "metadata": {"labels": {"app": "w"}},
                        "spec": {"containers": [{"name": "c"}]}}}}}
            ]
        });
        obj.data = serde_json::json!({ "spec": spec_json.clone() });
        (obj, serde_json::from_value(spec_json).unwrap())
    }

    #[test]
    fn job_names_labels_and_owner() {
        let (obj, spec) = jobset();
        let job = build_job(&obj, &spec, 1, 1, 0).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("train-workers-1"));
        let l = job.metadata.labels.as_ref().unwrap();
        assert_eq!(l[JOBSET_NAME], "train");
        assert_eq!(l[REPLICATED_JOB_NAME], "workers");
        assert_eq!(l[JOB_INDEX], "1");
        assert_eq!(l[JOB_GLOBAL_INDEX], "2");
        assert_eq!(l[GLOBAL_REPLICAS], "3");
        assert_eq!(l[REPLICATED_JOB_REPLICAS], "2");
        assert_eq!(l[RESTART_ATTEMPT], "0");
        assert_eq!(l[JOB_KEY], sha1_hex("ns1/train-workers-1"));
        assert_eq!(l["team"], "a");
        let spec_out = job.spec.as_ref().unwrap();
        assert_eq!(spec_out.completion_mode.as_deref(), Some("Indexed"));
        let pl = spec_out
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(pl["app"], "w");
        assert_eq!(pl[JOBSET_NAME], "train");
        assert_eq!(
            spec_out
                .template
                .spec
                .as_ref()
                .unwrap()
                .subdomain
                .as_deref(),
            Some("train")
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.api_version, "jobset.x-k8s.io/v1alpha2");
        assert_eq!(owner.uid, "js-uid");
    }

    #[test]
    fn success_policies() {
        let (_, mut spec) = jobset();
        let info = |rj: &str, complete: bool| JobInfo {
            uid: String::new(),
            replicated_job: rj.into(),
            attempt: 0,
            complete,
            failed: false,
            active: 0,
            ready: 0,
            succeeded: 0,
            expected: 1,
            suspended: false,
            deleting: false,
        };
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let jobs = [
            info("driver", true),
            info("workers", true),
            info("workers", false),
        ];
        let current: BTreeMap<&String, &JobInfo> = names.iter().zip(jobs.iter()).collect();
        assert!(!succeeded(&spec, &current));
        spec.success_policy = Some(SuccessPolicy {
            operator: Some("Any".into()),
            target_replicated_jobs: Some(vec!["workers".into()]),
        });
        assert!(succeeded(&spec, &current));
        spec.success_policy = Some(SuccessPolicy {
            operator: Some("All".into()),
            target_replicated_jobs: Some(vec!["driver".into()]),
        });
        assert!(succeeded(&spec, &current));
    }

    #[test]
    fn subset_and_strip() {
        let a = serde_json::json!({"restarts": 0, "conditions": [{"type": "X", "lastTransitionTime": "t1"}]});
        let b = serde_json::json!({"restarts": 0, "conditions": [{"type": "X", "lastTransitionTime": "t2"}], "extra": 1});
        assert!(subset_of(&strip_times(&a), &strip_times(&b)));
        assert!(!subset_of(&strip_times(&b), &strip_times(&a)));
    }
}
