//! An index of the cached pods by the group they name: the coscheduling PodGroup, LeaderWorkerSet
//! and Kueue group labels and the built-in PodGroup of `spec.schedulingGroup`; and by the Slurm
//! job id label, cluster-wide. A pass reads its group's pods through it (`caches::reader`), and
//! the pod controller a job's pods, in O(group), not O(pods) as a scan of the store, or a LIST of
//! the namespace, would cost.
//!
//! It holds names only (the pods are in the store) and follows the pod reflector's events: kept
//! in step with the store before the change reaches any subscriber, and rebuilt from the store
//! after a relist.

use crate::k8s::slim_pod::Pod;
use crate::small_set::SmallSet;
use crate::sync::RwLockExt;
use crate::wellknown::{
    LABEL_COSCHEDULING_POD_GROUP, LABEL_KUEUE_POD_GROUP_NAME, LABEL_LWS_GROUP_KEY,
    LABEL_SLURM_JOBID,
};
use crate::workload::kinds::podgroup::pod_group_name;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The labels that name a pod's group; a LIST by one of them is served from the index.
pub const GROUP_LABELS: [&str; 3] = [
    LABEL_COSCHEDULING_POD_GROUP,
    LABEL_LWS_GROUP_KEY,
    LABEL_KUEUE_POD_GROUP_NAME,
];

/// What a pod is a member of, within its namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Membership {
    /// `label=value`, for one of [`GROUP_LABELS`].
    Label(&'static str, String),
    /// `spec.schedulingGroup.podGroupName`.
    SchedulingGroup(String),
}

/// The groups a pod names.
fn memberships(pod: &Pod) -> Vec<Membership> {
    let labels = pod.metadata.labels.as_ref();
    let mut out: Vec<Membership> = GROUP_LABELS
        .iter()
        .filter_map(|k| {
            let v = labels?.get(*k)?;
            Some(Membership::Label(k, v.clone()))
        })
        .collect();
    if let Some(g) = pod_group_name(pod) {
        out.push(Membership::SchedulingGroup(g.to_string()));
    }
    out
}

#[derive(Default)]
struct Inner {
    /// (namespace, membership) -> pod names.
    members: HashMap<(String, Membership), SmallSet<String>>,
    /// (namespace, name) -> what it was indexed under, to undo on a change.
    of_pod: HashMap<(String, String), Vec<Membership>>,
    /// Slurm job id label -> (namespace, name) of the pods carrying it.
    by_job: HashMap<String, SmallSet<(String, String)>>,
    /// (namespace, name) -> its job id label, to undo on a change.
    job_of_pod: HashMap<(String, String), String>,
}

impl Inner {
    fn remove(&mut self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        if let Some(job) = self.job_of_pod.remove(&key)
            && let Some(set) = self.by_job.get_mut(&job)
        {
            set.remove(&key);
            if set.is_empty() {
                self.by_job.remove(&job);
            }
        }
        for m in self.of_pod.remove(&key).unwrap_or_default() {
            let k = (key.0.clone(), m);
            if let Some(set) = self.members.get_mut(&k) {
                set.remove(name);
                if set.is_empty() {
                    self.members.remove(&k);
                }
            }
        }
    }

    fn apply(&mut self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.remove(ns, name);
        if let Some(job) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SLURM_JOBID))
        {
            let key = (ns.to_string(), name.to_string());
            self.by_job
                .entry(job.clone())
                .or_default()
                .insert(key.clone());
            self.job_of_pod.insert(key, job.clone());
        }
        let ms = memberships(pod);
        if ms.is_empty() {
            return;
        }
        for m in &ms {
            self.members
                .entry((ns.to_string(), m.clone()))
                .or_default()
                .insert(name.to_string());
        }
        self.of_pod.insert((ns.to_string(), name.to_string()), ms);
    }
}

/// See the module doc. Cheap to share (`Arc`); every method takes `&self`.
#[derive(Default, Clone)]
pub struct PodGroupIndex(Arc<RwLock<Inner>>);

impl PodGroupIndex {
    /// A pod was created or changed (its groups may have changed too).
    pub fn applied(&self, pod: &Pod) {
        self.0.write_locked().apply(pod);
    }

    /// A pod was deleted.
    pub fn deleted(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.0.write_locked().remove(ns, name);
    }

    /// After a relist: the index of exactly these pods.
    pub fn rebuild(&self, pods: &[Arc<Pod>]) {
        let mut fresh = Inner::default();
        for p in pods {
            fresh.apply(p);
        }
        *self.0.write_locked() = fresh;
    }

    /// Follows one event of the pod reflector whose store is `store` (which has applied the
    /// event already): a relist rebuilds the index from the store once it is complete.
    pub fn follow(&self, store: &Store<Pod>, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(p) => self.applied(p),
            watcher::Event::Delete(p) => self.deleted(p),
            watcher::Event::InitDone => self.rebuild(&store.state()),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// The names of the pods of `namespace` that are members of `group`, sorted.
    pub fn members(&self, namespace: &str, group: &Membership) -> Vec<String> {
        let mut out: Vec<String> = self
            .0
            .read_locked()
            .members
            .get(&(namespace.to_string(), group.clone()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    /// `(namespace, name)` of the pods, in any namespace, whose job id label is `value`, sorted.
    pub fn of_job(&self, value: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .0
            .read_locked()
            .by_job
            .get(value)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    /// Pods indexed by group (for tests and the memory figures).
    pub fn len(&self) -> usize {
        self.0.read_locked().of_pod.len()
    }

    /// True when no pod is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, labels: serde_json::Value, group: Option<&str>) -> Pod {
        let mut spec = json!({"containers": []});
        if let Some(g) = group {
            spec["schedulingGroup"] = json!({"podGroupName": g});
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec,
        }))
        .unwrap()
    }

    fn lws(v: &str) -> Membership {
        Membership::Label(LABEL_LWS_GROUP_KEY, v.into())
    }

    #[test]
    fn members_follow_label_changes_deletions_and_relists() {
        let idx = PodGroupIndex::default();
        idx.applied(&pod("a", json!({LABEL_LWS_GROUP_KEY: "g1"}), None));
        idx.applied(&pod("b", json!({LABEL_LWS_GROUP_KEY: "g1"}), None));
        idx.applied(&pod("c", json!({}), Some("pg")));
        idx.applied(&pod("bare", json!({"app": "x"}), None));
        assert_eq!(idx.members("ns", &lws("g1")), ["a", "b"]);
        assert_eq!(
            idx.members("ns", &Membership::SchedulingGroup("pg".into())),
            ["c"]
        );
        assert!(idx.members("other", &lws("g1")).is_empty());
        assert_eq!(idx.len(), 3, "a pod naming no group is not kept");

        // b moves to another group; a goes.
        idx.applied(&pod("b", json!({LABEL_LWS_GROUP_KEY: "g2"}), None));
        idx.deleted(&pod("a", json!({}), None));
        assert!(idx.members("ns", &lws("g1")).is_empty());
        assert_eq!(idx.members("ns", &lws("g2")), ["b"]);

        // The job id label, cluster-wide, whether or not the pod names a group.
        let job = |v: &str| json!({LABEL_SLURM_JOBID: v});
        idx.applied(&pod("bare", job("7"), None));
        idx.applied(&pod(
            "c",
            json!({LABEL_SLURM_JOBID: "7", "x": "y"}),
            Some("pg"),
        ));
        assert_eq!(
            idx.of_job("7"),
            [
                ("ns".to_string(), "bare".to_string()),
                ("ns".into(), "c".into())
            ]
        );
        idx.applied(&pod("c", job("8"), Some("pg")));
        idx.deleted(&pod("bare", json!({}), None));
        assert!(
            idx.of_job("7").is_empty(),
            "a relabelled or deleted pod stays indexed"
        );
        assert_eq!(idx.of_job("8"), [("ns".to_string(), "c".to_string())]);

        // A relist keeps exactly the pods the store holds.
        idx.rebuild(&[Arc::new(pod("d", json!({LABEL_LWS_GROUP_KEY: "g2"}), None))]);
        assert_eq!(idx.members("ns", &lws("g2")), ["d"]);
        assert_eq!(idx.len(), 1);
        assert!(idx.of_job("8").is_empty());
    }
}
