//! The simulated LeaderWorkerSet controller (`leaderworkerset.x-k8s.io/v1`): leader and
//! worker pods per group, created directly (see the `sim` module docs).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{EnvVar, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::crds::lws_resource;
use super::jobset::{strip_times, subset_of};
use super::util::{self, controller_of, merged, now, sha1_hex};

/// Label: LeaderWorkerSet name.
pub const SET_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// Label: group index.
pub const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// Label: worker index (the leader is 0).
pub const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Label: SHA-1 of `<namespace>/<leader pod name>`, shared by the group.
pub const GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
/// Label: hash of the leader/worker template.
pub const TEMPLATE_REVISION_HASH: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";
/// Annotation: group size.
pub const SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
/// Annotation on workers: the leader pod's name.
pub const LEADER_NAME: &str = "leaderworkerset.sigs.k8s.io/leader-name";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LwsSpec {
    #[serde(default)]
    replicas: Option<i32>,
    leader_worker_template: LeaderWorkerTemplate,
    #[serde(default)]
    startup_policy: Option<String>,
    #[serde(default)]
    network_config: Option<NetworkConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaderWorkerTemplate {
    #[serde(default)]
    leader_template: Option<PodTemplateSpec>,
    worker_template: PodTemplateSpec,
    #[serde(default)]
    size: Option<i32>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkConfig {
    #[serde(default)]
    subdomain_policy: Option<String>,
}

impl LwsSpec {
    fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1).max(0)
    }
    fn size(&self) -> i32 {
        self.leader_worker_template.size.unwrap_or(1).max(1)
    }
    fn recreate_group(&self) -> bool {
        !matches!(
            self.leader_worker_template.restart_policy.as_deref(),
            Some("None") | Some("Default")
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodPhase {
    Active,
    Ended,
}

#[derive(Debug, Clone)]
struct PodInfo {
    uid: String,
    group: i32,
    worker: i32,
    phase: PodPhase,
    ready: bool,
    terminating: bool,
}

type Key = (String, String);

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
        key: Key,
        name: String,
        result: Result<Box<Pod>, kube::Error>,
    },
    StatusWritten {
        key: Key,
        result: Result<(), kube::Error>,
    },
}

struct Controller {
    client: kube::Client,
    sets: HashMap<Key, Entry>,
    pods: HashMap<Key, BTreeMap<String, PodInfo>>,
    dirty: HashSet<Key>,
    retry_at: Vec<(Instant, Key)>,
    sem: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Msg>,
    set_relist: Option<HashSet<Key>>,
    pod_relist: Option<HashSet<(Key, String)>>,
}

/// Run the LeaderWorkerSet controller until the task is aborted.
pub async fn run(client: kube::Client, max_in_flight: usize) {
    let ar = lws_resource();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        client: client.clone(),
        sets: HashMap::new(),
        pods: HashMap::new(),
        dirty: HashSet::new(),
        retry_at: Vec::new(),
        sem: Arc::new(Semaphore::new(max_in_flight)),
        tx,
        set_relist: None,
        pod_relist: None,
    };
    let sets_api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut sets = std::pin::pin!(watcher(sets_api, watcher::Config::default()).default_backoff());
    let pods_cfg = watcher::Config::default().labels(SET_NAME);
    let mut pods = std::pin::pin!(watcher(Api::<Pod>::all(client), pods_cfg).default_backoff());
    loop {
        let next = c.retry_at.iter().map(|r| r.0).min();
        tokio::select! {
            biased;
            ev = sets.next() => match ev {
                Some(Ok(ev)) => c.on_set_event(ev),
                Some(Err(e)) => tracing::debug!(error = %e, "kube-sim lws controller: lws watch error"),
                None => return,
            },
            ev = pods.next() => match ev {
                Some(Ok(ev)) => c.on_pod_event(ev),
                Some(Err(e)) => tracing::warn!(error = %e, "kube-sim lws controller: pod watch error"),
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
                for key in std::mem::take(&mut c.dirty) {
                    c.reconcile(&key);
                }
            }
        }
    }
}

fn key_of<K: ResourceExt>(o: &K) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// The LWS key and info of a pod the LWS controller made, judged by labels and owner kind.
fn pod_info(pod: &Pod) -> Option<(Key, String, PodInfo)> {
    let labels = pod.labels();
    let set = labels.get(SET_NAME)?;
    let owner = controller_of(pod.metadata.owner_references.as_ref())?;
    if !(owner.kind == "LeaderWorkerSet" || (owner.kind == "Pod" && owner.api_version == "v1")) {
        return None;
    }
    let group = labels.get(GROUP_INDEX)?.parse().ok()?;
    let worker = labels.get(WORKER_INDEX)?.parse().ok()?;
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") | Some("Failed") => PodPhase::Ended,
        _ => PodPhase::Active,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some((
        (pod.namespace().unwrap_or_default(), set.clone()),
        pod.name_any(),
        PodInfo {
            uid: pod.uid().unwrap_or_default(),
            group,
            worker,
            phase,
            ready,
            terminating: pod.metadata.deletion_timestamp.is_some(),
        },
    ))
}

impl Controller {
    fn on_set_event(&mut self, ev: watcher::Event<DynamicObject>) {
        match ev {
            watcher::Event::Init => self.set_relist = Some(HashSet::new()),
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let key = key_of(&obj);
                if let Some(seen) = &mut self.set_relist {
                    seen.insert(key.clone());
                }
                self.dirty.insert(key.clone());
                match self.sets.get_mut(&key) {
                    Some(e) if e.obj.uid() == obj.uid() => e.obj = obj,
                    _ => {
                        self.sets.insert(
                            key,
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
                    let gone: Vec<Key> = self
                        .sets
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        self.set_gone(&key);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                let key = key_of(&obj);
                if self
                    .sets
                    .get(&key)
                    .is_some_and(|e| e.obj.uid() == obj.uid())
                {
                    self.set_gone(&key);
                }
            }
        }
    }

    /// The LWS was deleted: delete its pods, as the garbage collector would.
    fn set_gone(&mut self, key: &Key) {
        if self.sets.remove(key).is_none() {
            return;
        }
        let victims: Vec<(String, String)> = self
            .pods
            .get(key)
            .map(|m| {
                m.iter()
                    .filter(|(_, p)| !p.terminating)
                    .map(|(n, p)| (n.clone(), p.uid.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (name, uid) in victims {
            self.delete_pod(key, &name, &uid);
        }
    }

    fn on_pod_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Init => self.pod_relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                let Some((key, name, info)) = pod_info(&pod) else {
                    return;
                };
                if let Some(seen) = &mut self.pod_relist {
                    seen.insert((key.clone(), name.clone()));
                }
                self.pods.entry(key.clone()).or_default().insert(name, info);
                self.dirty.insert(key);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    for (key, m) in &mut self.pods {
                        let before = m.len();
                        m.retain(|n, _| seen.contains(&(key.clone(), n.clone())));
                        if m.len() != before {
                            self.dirty.insert(key.clone());
                        }
                    }
                }
            }
            watcher::Event::Delete(pod) => {
                let Some((key, name, info)) = pod_info(&pod) else {
                    return;
                };
                if let Some(m) = self.pods.get_mut(&key)
                    && m.get(&name).is_some_and(|p| p.uid == info.uid)
                {
                    m.remove(&name);
                }
                if let Some(e) = self.sets.get_mut(&key) {
                    e.deleting.remove(&info.uid);
                }
                if !self.sets.contains_key(&key)
                    && self.pods.get(&key).is_some_and(BTreeMap::is_empty)
                {
                    self.pods.remove(&key);
                }
                self.dirty.insert(key);
            }
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Created { key, name, result } => {
                if let Some(e) = self.sets.get_mut(&key) {
                    e.creating.remove(&name);
                }
                match result {
                    Ok(pod) => {
                        if !self.sets.contains_key(&key) {
                            let uid = pod.uid().unwrap_or_default();
                            self.delete_pod(&key, &name, &uid);
                            return;
                        }
                        if let Some((k, n, info)) = pod_info(&pod) {
                            self.pods.entry(k).or_default().entry(n).or_insert(info);
                        }
                    }
                    Err(e) if util::is_already_exists(&e) => {}
                    Err(e) => {
                        tracing::warn!(pod = %name, error = %e, "kube-sim lws controller: creating a pod failed");
                        self.retry_at
                            .push((Instant::now() + Duration::from_secs(1), key.clone()));
                    }
                }
                self.dirty.insert(key);
            }
            Msg::StatusWritten { key, result } => {
                if let Some(e) = self.sets.get_mut(&key) {
                    e.status_in_flight = false;
                    if let Err(err) = result {
                        if !util::is_not_found(&err) {
                            tracing::warn!(error = %err, "kube-sim lws controller: status write failed");
                        }
                        e.last_status = None;
                        self.retry_at
                            .push((Instant::now() + Duration::from_millis(500), key));
                        return;
                    }
                    self.dirty.insert(key);
                }
            }
        }
    }

    fn delete_pod(&mut self, key: &Key, name: &str, uid: &str) {
        if let Some(e) = self.sets.get_mut(key)
            && !e.deleting.insert(uid.to_string())
        {
            return;
        }
        if let Some(p) = self.pods.get_mut(key).and_then(|m| m.get_mut(name)) {
            p.terminating = true;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.0);
        let (name, uid) = (name.to_string(), uid.to_string());
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
                && !matches!(&e, kube::Error::Api(s) if s.code == 409)
            {
                tracing::warn!(pod = %name, error = %e, "kube-sim lws controller: deleting a pod failed");
            }
        });
    }

    fn reconcile(&mut self, key: &Key) {
        let Some(e) = self.sets.get_mut(key) else {
            return;
        };
        if e.obj.metadata.deletion_timestamp.is_some() {
            return self.set_gone(key);
        }
        let spec: LwsSpec = match serde_json::from_value(e.obj.data["spec"].clone()) {
            Ok(s) => s,
            Err(err) => {
                if !e.bad_spec_logged {
                    e.bad_spec_logged = true;
                    tracing::warn!(lws = %key.1, error = %err, "kube-sim lws controller: cannot read spec");
                }
                return;
            }
        };
        let obj = e.obj.clone();
        let creating = e.creating.clone();
        let self_deleting = e.deleting.clone();
        let pods = self.pods.get(key).cloned().unwrap_or_default();
        let replicas = spec.replicas();
        let size = spec.size();
        let leader_ready_first = spec.startup_policy.as_deref() == Some("LeaderReady");

        let mut groups: BTreeMap<i32, Vec<(&String, &PodInfo)>> = BTreeMap::new();
        for (n, p) in &pods {
            groups.entry(p.group).or_default().push((n, p));
        }
        let mut to_delete: Vec<(String, String)> = Vec::new();
        let mut to_create: Vec<(i32, i32, Option<String>)> = Vec::new();
        let mut ready_groups = 0;
        let mut existing_groups = 0;

        // Groups past `replicas` go away.
        for (g, members) in &groups {
            if *g >= replicas {
                to_delete.extend(
                    members
                        .iter()
                        .filter(|(_, p)| !p.terminating)
                        .map(|(n, p)| ((*n).clone(), p.uid.clone())),
                );
            }
        }
        for g in 0..replicas {
            let members = groups.get(&g).cloned().unwrap_or_default();
            let leader_name = format!("{}-{g}", key.1);
            let leader = members
                .iter()
                .find(|(n, p)| **n == leader_name && p.worker == 0);
            let alive = |p: &PodInfo| !p.terminating && p.phase == PodPhase::Active;
            let ended: Vec<&(&String, &PodInfo)> = members
                .iter()
                .filter(|(_, p)| p.phase == PodPhase::Ended && !p.terminating)
                .collect();
            let killed_by_others = members
                .iter()
                .any(|(_, p)| p.terminating && !self_deleting.contains(&p.uid));
            let leader_gone = leader.is_none_or(|(_, p)| p.terminating)
                && !creating.contains(&leader_name)
                && members
                    .iter()
                    .any(|(n, p)| **n != leader_name && !p.terminating);
            if !members.is_empty() {
                existing_groups += 1;
            }
            if spec.recreate_group() && (!ended.is_empty() || killed_by_others || leader_gone) {
                to_delete.extend(
                    members
                        .iter()
                        .filter(|(_, p)| !p.terminating)
                        .map(|(n, p)| ((*n).clone(), p.uid.clone())),
                );
                continue;
            }
            if !spec.recreate_group() {
                // Like a StatefulSet: ended pods are replaced; workers follow their leader.
                to_delete.extend(ended.iter().map(|(n, p)| ((*n).clone(), p.uid.clone())));
                if leader_gone {
                    to_delete.extend(
                        members
                            .iter()
                            .filter(|(n, p)| **n != leader_name && !p.terminating)
                            .map(|(n, p)| ((*n).clone(), p.uid.clone())),
                    );
                    continue;
                }
            }
            let all_ready =
                members.len() as i32 == size && members.iter().all(|(_, p)| alive(p) && p.ready);
            if all_ready {
                ready_groups += 1;
            }
            match leader {
                None => {
                    let group_busy = spec.recreate_group() && !members.is_empty();
                    if !creating.contains(&leader_name) && !group_busy {
                        to_create.push((g, 0, None));
                    }
                }
                Some((_, lp)) if alive(lp) => {
                    if leader_ready_first && !lp.ready {
                        continue;
                    }
                    for w in 1..size {
                        let wn = format!("{leader_name}-{w}");
                        if !creating.contains(&wn) && !members.iter().any(|(n, _)| **n == wn) {
                            to_create.push((g, w, Some(lp.uid.clone())));
                        }
                    }
                }
                Some(_) => {}
            }
        }

        let mut conds: Vec<Condition> =
            serde_json::from_value(obj.data["status"]["conditions"].clone()).unwrap_or_default();
        let available = ready_groups == replicas;
        set_condition(
            &mut conds,
            "Available",
            available,
            if available {
                "AllGroupsReady"
            } else {
                "GroupsNotReady"
            },
            if available {
                "All replicas are ready"
            } else {
                "Not all replicas are ready"
            },
        );
        set_condition(
            &mut conds,
            "Progressing",
            !available,
            if available {
                "Ready"
            } else {
                "GroupsProgressing"
            },
            if available {
                "Replicas are ready"
            } else {
                "Replicas are progressing"
            },
        );
        let status = serde_json::json!({
            "replicas": existing_groups.min(replicas),
            "readyReplicas": ready_groups,
            "updatedReplicas": existing_groups.min(replicas),
            "hpaPodSelector": format!("{SET_NAME}={},{WORKER_INDEX}=0", key.1),
            "conditions": conds,
        });

        for (name, uid) in to_delete {
            self.delete_pod(key, &name, &uid);
        }
        for (g, w, leader_uid) in to_create {
            self.create_pod(key, &obj, &spec, g, w, leader_uid);
        }
        self.write_status(key, status);
    }

    fn create_pod(
        &mut self,
        key: &Key,
        obj: &DynamicObject,
        spec: &LwsSpec,
        g: i32,
        w: i32,
        leader_uid: Option<String>,
    ) {
        let Some(pod) = build_pod(obj, spec, g, w, leader_uid) else {
            return;
        };
        let name = pod.name_any();
        if let Some(e) = self.sets.get_mut(key) {
            e.creating.insert(name.clone());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.0);
        let sem = self.sem.clone();
        let tx = self.tx.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = util::retry!(api.create(&PostParams::default(), &pod)).map(Box::new);
            let _ = tx.send(Msg::Created { key, name, result });
        });
    }

    fn write_status(&mut self, key: &Key, status: serde_json::Value) {
        let Some(e) = self.sets.get_mut(key) else {
            return;
        };
        let wanted = strip_times(&status);
        if e.status_in_flight
            || subset_of(&wanted, &strip_times(&e.obj.data["status"]))
            || e.last_status
                .as_ref()
                .is_some_and(|l| strip_times(l) == wanted)
        {
            return;
        }
        e.status_in_flight = true;
        e.last_status = Some(status.clone());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.0, &lws_resource());
        let tx = self.tx.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let patch = serde_json::json!({ "status": status });
            let result = util::retry!(api.patch_status(
                &key.1,
                &PatchParams::default(),
                &Patch::Merge(&patch)
            ))
            .map(|_| ());
            let _ = tx.send(Msg::StatusWritten { key, result });
        });
    }
}

fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) {
    let s = if status { "True" } else { "False" };
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == s => {}
        Some(c) => {
            c.status = s.into();
            c.reason = reason.into();
            c.message = message.into();
            c.last_transition_time = now();
        }
        None => conds.push(Condition {
            type_: type_.into(),
            status: s.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now(),
            observed_generation: None,
        }),
    }
}

/// The leader (`w == 0`) or worker pod `w` of group `g`.
fn build_pod(
    obj: &DynamicObject,
    spec: &LwsSpec,
    g: i32,
    w: i32,
    leader_uid: Option<String>,
) -> Option<Pod> {
    let ns = obj.namespace().unwrap_or_default();
    let lws = obj.name_any();
    let lwt = &spec.leader_worker_template;
    let template = match (&lwt.leader_template, w) {
        (Some(t), 0) => t,
        _ => &lwt.worker_template,
    };
    let leader_name = format!("{lws}-{g}");
    let name = if w == 0 {
        leader_name.clone()
    } else {
        format!("{leader_name}-{w}")
    };
    let revision = sha1_hex(
        &serde_json::to_string(&obj.data["spec"]["leaderWorkerTemplate"]).unwrap_or_default(),
    );
    let meta = template.metadata.clone().unwrap_or_default();
    let labels = merged(
        meta.labels.as_ref(),
        [
            (SET_NAME.to_string(), lws.clone()),
            (GROUP_INDEX.to_string(), g.to_string()),
            (WORKER_INDEX.to_string(), w.to_string()),
            (
                GROUP_KEY.to_string(),
                sha1_hex(&format!("{ns}/{leader_name}")),
            ),
            (
                TEMPLATE_REVISION_HASH.to_string(),
                revision[..16].to_string(),
            ),
        ],
    );
    let mut annotations = merged(
        meta.annotations.as_ref(),
        [(SIZE.to_string(), spec.size().to_string())],
    );
    if w > 0 {
        annotations.insert(LEADER_NAME.into(), leader_name.clone());
    }
    let subdomain = match spec
        .network_config
        .as_ref()
        .and_then(|n| n.subdomain_policy.as_deref())
    {
        Some("UniquePerReplica") => leader_name.clone(),
        _ => lws.clone(),
    };
    let mut pod_spec = template.spec.clone().unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    pod_spec.subdomain = Some(subdomain.clone());
    let envs = [
        (
            "LWS_LEADER_ADDRESS",
            format!("{leader_name}.{subdomain}.{ns}"),
        ),
        ("LWS_GROUP_SIZE", spec.size().to_string()),
        ("LWS_WORKER_INDEX", w.to_string()),
    ];
    for c in pod_spec
        .containers
        .iter_mut()
        .chain(pod_spec.init_containers.iter_mut().flatten())
    {
        let env = c.env.get_or_insert_with(Vec::new);
        for (k, v) in &envs {
            if !env.iter().any(|e| e.name == *k) {
                env.push(EnvVar {
                    name: (*k).into(),
                    value: Some(v.clone()),
                    value_from: None,
                });
            }
        }
    }
    let owner = match leader_uid {
        None => OwnerReference {
            api_version: lws_resource().api_version,
            kind: "LeaderWorkerSet".into(),
            name: lws,
            uid: obj.uid()?,
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        Some(uid) => OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: leader_name,
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    };
    let mut pod = Pod {
        spec: Some(pod_spec),
        ..Default::default()
    };
    pod.metadata.name = Some(name);
    pod.metadata.namespace = Some(ns);
    pod.metadata.labels = Some(labels);
    pod.metadata.annotations = Some(annotations);
    pod.metadata.owner_references = Some(vec![owner]);
    Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lws() -> (DynamicObject, LwsSpec) {
        let mut obj = DynamicObject::new("llm", &lws_resource()).within("ns1");
        obj.metadata.uid = Some("lws-uid".into());
        let spec = serde_json::json!({
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 3,
                "workerTemplate": {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [{"name": "c"}]}},
            }
        });
        obj.data = serde_json::json!({ "spec": spec.clone() });
        (obj, serde_json::from_value(spec).unwrap())
    }

    #[test]
    fn leader_and_worker_pods() {
        let (obj, spec) = lws();
        let leader = build_pod(&obj, &spec, 1, 0, None).unwrap();
        assert_eq!(leader.metadata.name.as_deref(), Some("llm-1"));
        let l = leader.metadata.labels.as_ref().unwrap();
        assert_eq!(l[SET_NAME], "llm");
        assert_eq!(l[GROUP_INDEX], "1");
        assert_eq!(l[WORKER_INDEX], "0");
        assert_eq!(l[GROUP_KEY], sha1_hex("ns1/llm-1"));
        assert_eq!(l["app"], "llm");
        assert_eq!(leader.metadata.annotations.as_ref().unwrap()[SIZE], "3");
        let o = &leader.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str()),
            ("LeaderWorkerSet", "lws-uid")
        );

        let worker = build_pod(&obj, &spec, 1, 2, Some("leader-uid".into())).unwrap();
        assert_eq!(worker.metadata.name.as_deref(), Some("llm-1-2"));
        let wl = worker.metadata.labels.as_ref().unwrap();
        assert_eq!(wl[GROUP_KEY], l[GROUP_KEY]);
        assert_eq!(wl[WORKER_INDEX], "2");
        assert_eq!(
            worker.metadata.annotations.as_ref().unwrap()[LEADER_NAME],
            "llm-1"
        );
        let o = &worker.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Pod", "llm-1", "leader-uid")
        );
        let ps = worker.spec.unwrap();
        assert_eq!(ps.hostname.as_deref(), Some("llm-1-2"));
        assert_eq!(ps.subdomain.as_deref(), Some("llm"));
        let env = ps.containers[0].env.as_ref().unwrap();
        assert!(
            env.iter()
                .any(|e| e.name == "LWS_LEADER_ADDRESS"
                    && e.value.as_deref() == Some("llm-1.llm.ns1"))
        );
    }

    #[test]
    fn defaults() {
        let spec: LwsSpec = serde_json::from_value(serde_json::json!({
            "leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}
        }))
        .unwrap();
        assert_eq!((spec.replicas(), spec.size()), (1, 1));
        assert!(spec.recreate_group());
    }
}
