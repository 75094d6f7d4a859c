//! In-memory index of the bridge's Slurm jobs: by job id, by group key and by pod.
//!
//! Jobs whose admin_comment is not a bridge admin_comment are remembered only as "foreign" ids so
//! they are fetched once, not on every poll.

use crate::small_set::SmallSet;
use crate::workload::admin_comment::AdminComment;
use slurm_rest::models::{JobInfo, JobState};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What the bridge knows of one of its jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchedJob {
    pub job_id: u32,
    pub state: Vec<JobState>,
    /// Why the job is pending (Slurm's `state_reason`, e.g. `Resources`, `Priority`).
    pub state_reason: Option<String>,
    /// Allocated Slurm nodes as a host list; `None` or empty while pending.
    pub nodes: Option<String>,
    pub comment: AdminComment,
}

impl WatchedJob {
    /// Builds the record from a job Slurm returned; `None` when it is not a bridge job (for a
    /// bridge without `clusterName`: see [`WatchedJob::from_info_of`]).
    pub fn from_info(job: &JobInfo) -> Option<WatchedJob> {
        Self::from_info_of(job, None)
    }

    /// Builds the record from a job Slurm returned; `None` when it is not a job of the bridge
    /// of cluster `cluster` ([`AdminComment::belongs_to`]).
    pub fn from_info_of(job: &JobInfo, cluster: Option<&str>) -> Option<WatchedJob> {
        let comment = AdminComment::decode(job.admin_comment.as_deref()?).ok()?;
        if !comment.belongs_to(cluster) {
            return None;
        }
        Some(WatchedJob {
            job_id: job.job_id,
            state: job.job_state.clone(),
            state_reason: job.state_reason.clone(),
            nodes: job.nodes.clone().filter(|n| !n.is_empty()),
            comment,
        })
    }

    pub fn is_pending(&self) -> bool {
        self.state.contains(&JobState::Pending)
    }

    pub fn is_running(&self) -> bool {
        self.state.contains(&JobState::Running)
    }

    /// Suspended by an admin or preemption: it keeps its allocation and resumes later.
    pub fn is_suspended(&self) -> bool {
        self.state.contains(&JobState::Suspended)
    }

    /// Pending, running or suspended: the job still stands for its pods, so its group gets no
    /// second job. Every other state (completed, cancelled, failed, timeout, node_fail,
    /// preempted, ...) is over (fixes quirk 3, where only CANCELLED and COMPLETED counted as gone).
    /// A job without a base state this client knows (a newer Slurm's) also counts as active:
    /// a second job for its pods would be worse than waiting for a state we understand.
    pub fn is_active(&self) -> bool {
        self.is_pending() || self.is_running() || self.is_suspended() || self.state_unknown()
    }

    /// No base state this client knows (only flags, or values of a newer Slurm).
    pub fn state_unknown(&self) -> bool {
        !self.state.iter().any(JobState::is_base)
    }

    /// Allocated and running: pods can be bound.
    pub fn allocated_nodes(&self) -> Option<&str> {
        if self.is_running() {
            self.nodes.as_deref().filter(|n| !n.is_empty())
        } else {
            None
        }
    }
}

/// The index; the watcher writes it, reconcilers read it.
#[derive(Default, Debug)]
pub struct JobIndex {
    jobs: HashMap<u32, Arc<WatchedJob>>,
    by_group: HashMap<String, SmallSet<u32>>,
    by_pod: HashMap<String, SmallSet<u32>>,
    foreign: HashSet<u32>,
}

impl JobIndex {
    /// Inserts or replaces a bridge job; returns the previous record.
    pub fn upsert(&mut self, job: WatchedJob) -> Option<Arc<WatchedJob>> {
        let id = job.job_id;
        let old = self.remove(id);
        if let Some(group) = &job.comment.group {
            self.by_group.entry(group.clone()).or_default().insert(id);
        }
        for pod in &job.comment.pods {
            self.by_pod.entry(pod.clone()).or_default().insert(id);
        }
        self.jobs.insert(id, Arc::new(job));
        old
    }

    /// Removes a job (bridge or foreign); returns the bridge record if there was one.
    pub fn remove(&mut self, job_id: u32) -> Option<Arc<WatchedJob>> {
        self.foreign.remove(&job_id);
        let old = self.jobs.remove(&job_id)?;
        if let Some(group) = &old.comment.group {
            remove_from(&mut self.by_group, group, job_id);
        }
        for pod in &old.comment.pods {
            remove_from(&mut self.by_pod, pod, job_id);
        }
        Some(old)
    }

    /// Remembers a job that is not the bridge's.
    pub fn mark_foreign(&mut self, job_id: u32) {
        self.foreign.insert(job_id);
    }

    pub fn is_foreign(&self, job_id: u32) -> bool {
        self.foreign.contains(&job_id)
    }

    pub fn get(&self, job_id: u32) -> Option<Arc<WatchedJob>> {
        self.jobs.get(&job_id).cloned()
    }

    /// The active job of a group (the newest if several: a restarted original may have left
    /// duplicates, which the caller cancels).
    pub fn active_for_group(&self, group: &str) -> Vec<Arc<WatchedJob>> {
        self.active_in(self.by_group.get(group))
    }

    /// Active jobs whose admin_comment lists this pod (`ns/name`).
    pub fn active_for_pod(&self, pod: &str) -> Vec<Arc<WatchedJob>> {
        self.active_in(self.by_pod.get(pod))
    }

    fn active_in(&self, ids: Option<&SmallSet<u32>>) -> Vec<Arc<WatchedJob>> {
        let mut out: Vec<Arc<WatchedJob>> = ids
            .into_iter()
            .flat_map(SmallSet::iter)
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.is_active())
            .cloned()
            .collect();
        out.sort_by_key(|j| std::cmp::Reverse(j.job_id));
        out
    }

    /// All known ids (bridge and foreign) with the state the index holds for bridge jobs.
    pub fn known_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.jobs.keys().chain(self.foreign.iter()).copied()
    }

    /// Every bridge job.
    pub fn jobs(&self) -> impl Iterator<Item = &Arc<WatchedJob>> {
        self.jobs.values()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

fn remove_from(map: &mut HashMap<String, SmallSet<u32>>, key: &str, id: u32) {
    if let Some(set) = map.get_mut(key) {
        set.remove(&id);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, state: JobState, group: &str, pods: &[&str]) -> WatchedJob {
        WatchedJob {
            job_id: id,
            state: vec![state],
            state_reason: None,
            nodes: None,
            comment: AdminComment {
                pods: pods.iter().map(|p| p.to_string()).collect(),
                group: Some(group.into()),
                uids: vec![],
                desc: None,
                cluster: None,
            },
        }
    }

    #[test]
    fn lookup_by_group_and_pod_only_returns_active_jobs() {
        let mut idx = JobIndex::default();
        idx.upsert(job(1, JobState::Completed, "g", &["ns/a"]));
        idx.upsert(job(2, JobState::Pending, "g", &["ns/a"]));
        idx.upsert(job(3, JobState::Failed, "h", &["ns/b"]));
        assert_eq!(idx.active_for_group("g").len(), 1);
        assert_eq!(idx.active_for_group("g")[0].job_id, 2);
        assert!(idx.active_for_group("h").is_empty(), "FAILED is not active");
        // A base state of a newer Slurm: active, so the group gets no second job.
        idx.upsert(job(4, JobState::Other("WARPING".into()), "k", &["ns/c"]));
        assert_eq!(
            idx.active_for_group("k").len(),
            1,
            "unknown state is active"
        );
        assert!(idx.active_for_group("k")[0].state_unknown());
        assert_eq!(idx.active_for_pod("ns/a")[0].job_id, 2);
        assert!(idx.active_for_pod("ns/b").is_empty());
    }

    #[test]
    fn a_suspended_job_still_stands_for_its_group_and_pods() {
        let mut idx = JobIndex::default();
        let mut suspended = job(3, JobState::Suspended, "g", &["ns/a", "ns/b"]);
        suspended.nodes = Some("node-[1-2]".into());
        assert!(suspended.is_active());
        assert_eq!(
            suspended.allocated_nodes(),
            None,
            "nothing binds to a suspended job"
        );
        idx.upsert(suspended);
        let ids = |jobs: Vec<Arc<WatchedJob>>| jobs.iter().map(|j| j.job_id).collect::<Vec<_>>();
        assert_eq!(ids(idx.active_for_group("g")), [3], "no second job for g");
        assert_eq!(ids(idx.active_for_pod("ns/b")), [3]);
    }

    #[test]
    fn upsert_replaces_and_remove_cleans_secondary_indexes() {
        let mut idx = JobIndex::default();
        idx.upsert(job(5, JobState::Pending, "g", &["ns/a", "ns/b"]));
        idx.upsert(job(5, JobState::Pending, "g", &["ns/a"]));
        assert!(idx.active_for_pod("ns/b").is_empty());
        assert_eq!(idx.remove(5).unwrap().job_id, 5);
        assert!(idx.active_for_group("g").is_empty());
        assert!(idx.is_empty());
    }

    #[test]
    fn newest_active_job_first() {
        let mut idx = JobIndex::default();
        idx.upsert(job(7, JobState::Pending, "g", &["ns/a"]));
        idx.upsert(job(9, JobState::Running, "g", &["ns/a"]));
        let ids: Vec<u32> = idx.active_for_group("g").iter().map(|j| j.job_id).collect();
        assert_eq!(ids, [9, 7]);
    }

    #[test]
    fn foreign_jobs_are_not_bridge_jobs() {
        let info = JobInfo {
            job_id: 4,
            admin_comment: Some("{}".into()),
            ..Default::default()
        };
        assert!(WatchedJob::from_info(&info).is_none());
        let mut idx = JobIndex::default();
        idx.mark_foreign(4);
        assert!(idx.is_foreign(4));
        assert_eq!(idx.known_ids().collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn allocated_nodes_only_when_running() {
        let mut j = job(1, JobState::Pending, "g", &["ns/a"]);
        j.nodes = Some("node-1".into());
        assert_eq!(j.allocated_nodes(), None);
        j.state = vec![JobState::Running];
        assert_eq!(j.allocated_nodes(), Some("node-1"));
    }
}
