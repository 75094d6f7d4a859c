//! The unbound pods a pod's arrival or departure may concern, indexed as pod changes come in:
//! by namespace those waiting for their gang (`PodScheduled` reason WaitingForGang), and by
//! namespace and Slurm job id label those sharing a job. Finding a pod's siblings costs what
//! they number, not a scan of every cached pod (which made a burst of N pods O(N²)).

use crate::k8s::is_bound;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::reason::WAITING_FOR_GANG;
use crate::small_set::SmallSet;
use crate::wellknown::LABEL_SLURM_JOBID;
use kube::runtime::reflector::ObjectRef;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What the index holds for one unbound pod: its name and the keys it is filed under (the
/// `ObjectRef` a trigger needs is made when one is sent, not kept for each of 10,000 pods).
struct Entry {
    namespace: Arc<str>,
    name: Box<str>,
    waiting: bool,
    job: Option<Box<str>>,
}

/// (namespace, Slurm job id label).
type JobKey = (Arc<str>, Box<str>);

/// Unbound pods by what wakes them; see the module doc. Keyed by pod uid, one allocation of
/// it shared by the entry and the sets.
#[derive(Default)]
pub(super) struct SiblingIndex {
    entries: HashMap<Arc<str>, Entry>,
    /// namespace -> uids of the unbound pods waiting for their gang.
    waiting: HashMap<Arc<str>, HashSet<Arc<str>>>,
    /// (namespace, job id label) -> uids of the unbound pods with that label.
    by_job: HashMap<JobKey, SmallSet<Arc<str>>>,
    /// The namespaces of the entries, one allocation each, shared by their entries and keys.
    namespaces: HashSet<Arc<str>>,
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn job_label(pod: &Pod) -> Option<&String> {
    pod.metadata.labels.as_ref()?.get(LABEL_SLURM_JOBID)
}

fn waits_for_gang(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some(WAITING_FOR_GANG))
        })
}

impl SiblingIndex {
    /// The pod as the cache now holds it.
    pub(super) fn applied(&mut self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let unchanged = self.entries.get(uid(pod)).is_some_and(|e| {
            !is_bound(pod)
                && *e.namespace == *ns
                && Some(&*e.name) == pod.metadata.name.as_deref()
                && e.waiting == waits_for_gang(pod)
                && e.job.as_deref() == job_label(pod).map(String::as_str)
        });
        if unchanged {
            return;
        }
        self.remove(uid(pod));
        if is_bound(pod) {
            return;
        }
        let key: Arc<str> = uid(pod).into();
        let namespace = self.namespace(ns);
        let e = Entry {
            namespace,
            name: pod.metadata.name.as_deref().unwrap_or_default().into(),
            waiting: waits_for_gang(pod),
            job: job_label(pod).map(|j| j.as_str().into()),
        };
        if e.waiting {
            self.waiting
                .entry(e.namespace.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(job) = &e.job {
            self.by_job
                .entry((e.namespace.clone(), job.clone()))
                .or_default()
                .insert(key.clone());
        }
        self.entries.insert(key, e);
    }

    fn namespace(&mut self, ns: &str) -> Arc<str> {
        if let Some(n) = self.namespaces.get(ns) {
            return n.clone();
        }
        let n: Arc<str> = ns.into();
        self.namespaces.insert(n.clone());
        n
    }

    /// The pod with this uid is gone.
    pub(super) fn remove(&mut self, uid: &str) {
        let Some(Entry {
            namespace,
            waiting,
            job,
            ..
        }) = self.entries.remove(uid)
        else {
            return;
        };
        if waiting && let Some(set) = self.waiting.get_mut(&namespace) {
            set.remove(uid);
            if set.is_empty() {
                self.waiting.remove(&namespace);
            }
        }
        if let Some(job) = job {
            let key = (namespace.clone(), job);
            if let Some(set) = self.by_job.get_mut(&key) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_job.remove(&key);
                }
            }
        }
        // Only the interner and `namespace` hold it now: no entry of that namespace is left.
        if Arc::strong_count(&namespace) == 2 {
            self.namespaces.remove(&namespace);
        }
    }

    /// Keeps only the pods whose uid `live` accepts (after a relist, which reports no deletions).
    pub(super) fn retain(&mut self, live: impl Fn(&str) -> bool) {
        let gone: Vec<Arc<str>> = self.entries.keys().filter(|u| !live(u)).cloned().collect();
        for uid in gone {
            self.remove(&uid);
        }
    }

    /// The unbound pods of `pod`'s namespace, other than `pod`, that wait for their gang or
    /// carry its Slurm job id label.
    pub(super) fn siblings(&self, pod: &Pod) -> Vec<ObjectRef<Pod>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let waiting = self.waiting.get(ns).into_iter().flatten();
        let same_job = job_label(pod)
            .and_then(|job| self.by_job.get(&(ns.into(), job.as_str().into())))
            .into_iter()
            .flat_map(SmallSet::iter);
        let uids: HashSet<&Arc<str>> = waiting.chain(same_job).collect();
        uids.into_iter()
            .filter(|u| &***u != uid(pod))
            .filter_map(|u| self.entries.get(u))
            .map(|e| ObjectRef::new(&e.name).within(&e.namespace))
            .collect()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        ns: &str,
        name: &str,
        job: Option<&str>,
        reason: Option<&str>,
        node: Option<&str>,
    ) -> Pod {
        let mut labels = serde_json::Map::new();
        if let Some(j) = job {
            labels.insert(LABEL_SLURM_JOBID.into(), json!(j));
        }
        let conditions: Vec<_> = reason
            .map(|r| json!({"type": "PodScheduled", "status": "False", "reason": r}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"), "labels": labels},
            "spec": {"containers": [{"name": "c"}], "nodeName": node},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn names(mut refs: Vec<ObjectRef<Pod>>) -> Vec<String> {
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn siblings_are_the_waiting_and_same_job_unbound_pods_of_the_namespace() {
        let mut ix = SiblingIndex::default();
        let waiting = pod("a", "w", None, Some(WAITING_FOR_GANG), None);
        let same_job = pod("a", "j", Some("7"), Some("Pending"), None);
        let other_job = pod("a", "k", Some("8"), None, None);
        let bound = pod("a", "b", Some("7"), None, Some("n1"));
        let elsewhere = pod("b", "x", Some("7"), Some(WAITING_FOR_GANG), None);
        for p in [&waiting, &same_job, &other_job, &bound, &elsewhere] {
            ix.applied(p);
        }
        assert_eq!(ix.len(), 4, "bound pods are not indexed");
        let newcomer = pod("a", "n", Some("7"), None, None);
        ix.applied(&newcomer);
        assert_eq!(names(ix.siblings(&newcomer)), ["j", "w"]);
        let plain = pod("a", "p", None, None, None);
        assert_eq!(names(ix.siblings(&plain)), ["w"]);
        assert_eq!(
            names(ix.siblings(&waiting)),
            Vec::<String>::new(),
            "not itself"
        );

        // Bound now: no longer a sibling. No longer waiting: only by its job.
        ix.applied(&pod("a", "j", Some("7"), None, Some("n2")));
        ix.applied(&pod("a", "w", None, None, None));
        assert_eq!(names(ix.siblings(&newcomer)), Vec::<String>::new());
        ix.applied(&pod("a", "w", Some("7"), Some(WAITING_FOR_GANG), None));
        assert_eq!(names(ix.siblings(&newcomer)), ["w"]);

        ix.remove("a-w");
        assert!(ix.siblings(&newcomer).is_empty());
        ix.retain(|uid| uid == "a-n");
        assert_eq!(ix.len(), 1);
        assert!(ix.waiting.is_empty() && ix.by_job.len() == 1);
        assert_eq!(ix.namespaces.len(), 1, "namespace b has no pod left");
        ix.remove("a-n");
        assert!(ix.namespaces.is_empty() && ix.by_job.is_empty());
    }
}
