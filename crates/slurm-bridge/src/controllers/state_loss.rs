//! Slurm losing its state: a census of the bound pods whose Slurm job is unknown, and the
//! *state-loss hold* it decides (docs/controllers.md, "Slurm losing its state").
//!
//! A bound pod whose job Slurm does not know is normally removed (`SlurmJobMissing`). When
//! slurmctld restarts with its StateSaveLocation lost or rolled back, that is every pod of the
//! bridge at once, training runs included. So, over the controllers' caches (no memory of its
//! own, so a restarted controller decides the same):
//! - the *census* looks at the bound, live (not finished, not being deleted) bridge pods bound
//!   before the job watcher's last clean listing started ([`BIND_SLACK`]), and counts those
//!   whose labelled job the job
//!   watcher's index does not hold, or holds without naming the pod with its uid (after a loss
//!   Slurm hands out job ids from FirstJobId again: a new job may carry an old pod's id);
//! - when that count is at least [`StateLossOptions::min_pods`] and at least
//!   [`StateLossOptions::min_share`] of the counted pods, the bridge is in state-loss hold: pods
//!   with unknown jobs are kept running, marked with the condition [`CONDITION`];
//! - a pod once marked stays held while its job is unknown (the mark is on the pod, so this
//!   survives restarts too): the admins deleting some held pods, or some finishing, does not
//!   drop the others below the threshold and remove them;
//! - the node controller drains the Slurm nodes of the Kubernetes nodes hosting held pods.
//!
//! The decision is [`census`], a pure function; [`StateLoss`] gathers its facts from the caches,
//! keeps the metrics, logs each transition once and tells the node controller which nodes to
//! pass again.

use crate::k8s::slim_pod::Pod;
use crate::slurm::SlurmJobs;
use crate::slurm::job_watcher::JobWatcher;
use crate::sync::MutexExt;
use crate::workload::ir::pod_key;
use crate::workload::kinds::{is_terminal, jobid_label, parse_job_id};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The pod condition type of a held pod.
pub const CONDITION: &str = "SlurmJobLost";
/// The condition's reason (and the Warning Event's) while the pod is held.
pub const REASON_HELD: &str = "SlurmJobLost";
/// The condition's reason once the pod's job is known again.
pub const REASON_FOUND: &str = "SlurmJobFound";

/// When the bridge holds pods whose Slurm job is unknown instead of removing them.
#[derive(Clone, Debug, PartialEq)]
pub struct StateLossOptions {
    /// Unknown jobs needed for a hold (`--state-loss-min-pods`); 0 turns the guard off.
    pub min_pods: usize,
    /// Share of the counted pods whose jobs must be unknown for a hold
    /// (`--state-loss-min-share`, 0.0 to 1.0).
    pub min_share: f64,
}

impl Default for StateLossOptions {
    fn default() -> Self {
        StateLossOptions {
            min_pods: 3,
            min_share: 0.5,
        }
    }
}

/// One bound, live, labelled bridge pod as the census sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodFact {
    /// `ns/name`.
    pub key: String,
    /// The Kubernetes node it is bound to.
    pub node: String,
    pub job_id: u32,
    /// Slurm (the watcher's index) holds the job and the job names this pod with its uid.
    pub job_known: bool,
    /// Bound before the job watcher's last clean listing started (with [`BIND_SLACK`]): the
    /// index would hold its job if Slurm did.
    pub settled: bool,
    /// Carries `SlurmJobLost=True` already.
    pub marked: bool,
}

/// A pod the bridge keeps though Slurm does not know its job.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldPod {
    pub key: String,
    pub node: String,
    pub job_id: u32,
}

/// What the census found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Census {
    /// Settled bound live pods counted.
    pub counted: usize,
    /// Of those, the ones whose job is unknown.
    pub unknown: usize,
    /// The thresholds are met: every pod whose job is unknown is held.
    pub threshold_met: bool,
    /// The pods held: unknown job, and the thresholds met or the pod marked already.
    pub held: Vec<HeldPod>,
}

impl Census {
    /// Whether the bridge holds any pod.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Whether a pod whose job is unknown is kept rather than removed: the thresholds are met,
    /// or it was held already.
    pub fn holds(&self, marked: bool) -> bool {
        self.threshold_met || marked
    }

    /// The held pods by Kubernetes node.
    pub fn by_node(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for h in &self.held {
            out.entry(h.node.as_str()).or_default().push(h.key.as_str());
        }
        out
    }

    /// The held pods on `node` (`ns/name`, sorted).
    pub fn held_on(&self, node: &str) -> Vec<String> {
        self.held
            .iter()
            .filter(|h| h.node == node)
            .map(|h| h.key.clone())
            .collect()
    }

    /// What a held pod is told: its job and the census.
    pub fn message(&self, job_id: u32) -> String {
        format!(
            "Slurm does not know job {job_id}, which holds this pod's node: {} of {} bound pods' \
             jobs are unknown to Slurm: its state may have been lost; these pods are kept running \
             and their Slurm nodes drained. Once Slurm's state is restored they resume; to accept \
             the loss, delete them (docs/controllers.md, \"Slurm losing its state\")",
            self.unknown, self.counted
        )
    }
}

/// The decision (pure): the thresholds over the settled pods, and the pods held.
pub fn census(facts: &[PodFact], opts: &StateLossOptions) -> Census {
    let settled = facts.iter().filter(|f| f.settled);
    let (counted, unknown) =
        settled.fold((0, 0), |(c, u), f| (c + 1, u + usize::from(!f.job_known)));
    let threshold_met = opts.min_pods > 0
        && unknown >= opts.min_pods
        && (unknown as f64) >= opts.min_share * counted as f64;
    let mut held: Vec<HeldPod> = facts
        .iter()
        .filter(|f| !f.job_known && opts.min_pods > 0)
        // A pod bound just now counts only once held: its job may not be indexed yet.
        .filter(|f| f.marked || (threshold_met && f.settled))
        .map(|f| HeldPod {
            key: f.key.clone(),
            node: f.node.clone(),
            job_id: f.job_id,
        })
        .collect();
    held.sort();
    Census {
        counted,
        unknown,
        threshold_met,
        held,
    }
}

/// True when the pod carries `SlurmJobLost=True`.
pub fn is_marked(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == CONDITION && c.status == "True"))
}

/// When the pod was bound: its `PodScheduled=True` transition, else its creation.
fn bound_at(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

/// What the census needs of the job watcher's index.
pub trait KnownJobs: Send + Sync {
    /// The first full listing is indexed.
    fn synced(&self) -> bool;
    /// The index holds bridge job `job_id` and it names pod `key` with `uid`.
    fn names(&self, job_id: u32, key: &str, uid: Option<&str>) -> bool;
    /// A listing that started at `t` or later (any listing: `None`) read every job without an
    /// error.
    fn listed_since(&self, t: Option<tokio::time::Instant>) -> bool;
}

impl<S: SlurmJobs> KnownJobs for JobWatcher<S> {
    fn synced(&self) -> bool {
        self.is_synced()
    }

    fn names(&self, job_id: u32, key: &str, uid: Option<&str>) -> bool {
        self.index()
            .get(job_id)
            .is_some_and(|j| j.comment.names_pod(key, uid))
    }

    fn listed_since(&self, t: Option<tokio::time::Instant>) -> bool {
        match t {
            Some(t) => self.has_listed_since(t),
            // The first listing is a clean one.
            None => self.is_synced(),
        }
    }
}

/// Added to a pod's bind time before asking whether the watcher has listed Slurm's jobs since:
/// the API server's times have a resolution of a second, and its clock and this one may differ
/// a little.
pub const BIND_SLACK: Duration = Duration::from_secs(2);

/// Whether the job watcher has listed Slurm's jobs cleanly since a pod bound `age` ago was bound
/// (the scheduler submits a job before it binds its pods, so the listing would hold it). In
/// split mode the controllers' index learns a job the scheduler just submitted only at its next
/// poll: until then the pod is not counted.
fn listed_since_bound(jobs: &dyn KnownJobs, age: Option<Duration>) -> bool {
    let now = tokio::time::Instant::now();
    let since = match age {
        // Bound less than the slack ago: only a listing started later counts.
        Some(age) if age < BIND_SLACK => Some(now + (BIND_SLACK - age)),
        // Bound before this host's monotonic clock began (None): any listing counts.
        Some(age) => now.checked_sub(age - BIND_SLACK),
        // No bind time: a pod bound long ago.
        None => None,
    };
    jobs.listed_since(since)
}

/// The facts of the cached pods (bound, live, labelled) at `now`.
pub fn facts(
    pods: &[Arc<Pod>],
    jobs: &dyn KnownJobs,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<PodFact> {
    pods.iter()
        .filter(|p| !is_terminal(p) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let node = crate::k8s::bound_node(p)?;
            let job_id = jobid_label(p).and_then(parse_job_id)?;
            let key = pod_key(p);
            let age =
                bound_at(p).map(|t| Duration::try_from(now.duration_since(t)).unwrap_or_default());
            let settled = listed_since_bound(jobs, age);
            Some(PodFact {
                job_known: jobs.names(job_id, &key, p.metadata.uid.as_deref()),
                key,
                node: node.to_string(),
                job_id,
                settled,
                marked: is_marked(p),
            })
        })
        .collect()
}

/// The gauges of the hold.
#[derive(Clone, Default)]
struct Gauges {
    holding: Gauge,
    held: Gauge,
}

/// The census over the shared caches, its metrics and its transitions.
pub struct StateLoss {
    pods: Store<Pod>,
    jobs: Arc<dyn KnownJobs>,
    opts: StateLossOptions,
    gauges: Gauges,
    /// The held pods last computed, to log transitions once and to pass the nodes whose held
    /// pods changed.
    last: Mutex<Option<BTreeSet<HeldPod>>>,
    /// Where the node controller (while it runs) takes the nodes to pass again.
    nodes_tx: Mutex<Option<mpsc::UnboundedSender<ObjectRef<Node>>>>,
    /// The last census and when it was taken ([`StateLoss::census_within`]).
    recent: Mutex<Option<(Instant, Arc<Census>)>>,
}

impl StateLoss {
    /// The census over `pods` and `jobs`; registers its gauges in `registry` (prefixed already
    /// with `slurm_bridge_controllers`).
    pub fn new(
        pods: Store<Pod>,
        jobs: Arc<dyn KnownJobs>,
        opts: StateLossOptions,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let gauges = Gauges::default();
        registry.register(
            "slurm_state_loss",
            "1 while the bridge holds pods whose Slurm jobs Slurm does not know (its state may \
             have been lost): they are not removed and their Slurm nodes are drained",
            gauges.holding.clone(),
        );
        registry.register(
            "slurm_state_loss_held_pods",
            "Pods kept running though Slurm does not know their job (condition SlurmJobLost)",
            gauges.held.clone(),
        );
        Arc::new(StateLoss {
            pods,
            jobs,
            opts,
            gauges,
            last: Mutex::new(None),
            nodes_tx: Mutex::new(None),
            recent: Mutex::new(None),
        })
    }

    /// The gauges as last set: (`slurm_state_loss`, `slurm_state_loss_held_pods`).
    pub fn gauges(&self) -> (i64, i64) {
        (self.gauges.holding.get(), self.gauges.held.get())
    }

    /// The options in force.
    pub fn options(&self) -> &StateLossOptions {
        &self.opts
    }

    /// The nodes whose held pods change from now on (for the node controller; a new call
    /// replaces the previous receiver, as each term of leadership runs a new node controller).
    pub fn subscribe_nodes(&self) -> mpsc::UnboundedReceiver<ObjectRef<Node>> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.nodes_tx.locked() = Some(tx);
        // The next census passes every node holding pods.
        *self.last.locked() = None;
        rx
    }

    /// The census now, from the caches; the metrics follow, a transition is logged once and the
    /// node controller is told of the nodes whose held pods changed.
    pub fn census(&self) -> Arc<Census> {
        let census = if self.jobs.synced() {
            let pods = self.pods.state();
            let facts = facts(&pods, &*self.jobs, k8s_openapi::jiff::Timestamp::now());
            census(&facts, &self.opts)
        } else {
            Census::default()
        };
        self.gauges.holding.set(i64::from(census.holding()));
        self.gauges.held.set(census.held.len() as i64);
        self.transition(&census);
        let census = Arc::new(census);
        *self.recent.locked() = Some((Instant::now(), census.clone()));
        census
    }

    /// The last census if taken within `age`, else a new one.
    pub fn census_within(&self, age: Duration) -> Arc<Census> {
        if let Some((at, c)) = self.recent.locked().as_ref()
            && at.elapsed() <= age
        {
            return c.clone();
        }
        self.census()
    }

    fn transition(&self, census: &Census) {
        let now: BTreeSet<HeldPod> = census.held.iter().cloned().collect();
        let changed_nodes: BTreeSet<String> = {
            let mut last = self.last.locked();
            let before = last.take();
            let was = before.as_ref().is_some_and(|b| !b.is_empty());
            if census.holding() && !was {
                tracing::warn!(
                    held = census.held.len(),
                    unknown = census.unknown,
                    counted = census.counted,
                    nodes = ?census.by_node().keys().collect::<Vec<_>>(),
                    "state-loss hold: {} of {} bound pods' jobs are unknown to Slurm (its state \
                     may have been lost); pods with unknown jobs are kept running and their \
                     Slurm nodes drained",
                    census.unknown,
                    census.counted
                );
            } else if !census.holding() && was {
                tracing::warn!("state-loss hold over: no pod is held for an unknown Slurm job");
            }
            let before = before.unwrap_or_default();
            let changed = before
                .symmetric_difference(&now)
                .map(|h| h.node.clone())
                .collect();
            *last = Some(now);
            changed
        };
        if changed_nodes.is_empty() {
            return;
        }
        if let Some(tx) = self.nodes_tx.locked().as_ref() {
            for n in changed_nodes {
                let _ = tx.send(ObjectRef::new(&n));
            }
        }
    }

    /// Takes a census every `every` until `stop` completes (the end of a term of leadership):
    /// the metrics follow and the node controller is told when the held pods change (a pod
    /// deleted, a job known again) even when no pod pass runs. The gauges go back to 0 when it
    /// stops, so a replica that no longer leads does not keep an alert firing.
    pub async fn run(
        self: Arc<Self>,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let tick = async {
            loop {
                self.census();
                tokio::time::sleep(every).await;
            }
        };
        tokio::select! {
            _ = tick => {}
            _ = stop => {}
        }
        // Only the leader's census counts: a replica that stops leading shows no hold.
        self.gauges.holding.set(0);
        self.gauges.held.set(0);
        *self.last.locked() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(key: &str, node: &str, known: bool, settled: bool, marked: bool) -> PodFact {
        PodFact {
            key: key.into(),
            node: node.into(),
            job_id: 7,
            job_known: known,
            settled,
            marked,
        }
    }

    fn keys(c: &Census) -> Vec<&str> {
        c.held.iter().map(|h| h.key.as_str()).collect()
    }

    #[test]
    fn census_table() {
        let opts = StateLossOptions::default();
        let known = |k: &str| fact(k, "n1", true, true, false);
        let lost = |k: &str| fact(k, "n1", false, true, false);
        // (facts, threshold met, held)
        let cases: Vec<(Vec<PodFact>, bool, Vec<&str>)> = vec![
            // Nothing lost.
            (vec![known("a"), known("b")], false, vec![]),
            // One job purged among many: removed as ever.
            (vec![lost("a"), known("b"), known("c")], false, vec![]),
            // Below the count, though all are lost.
            (vec![lost("a"), lost("b")], false, vec![]),
            // At the count and the share.
            (
                vec![lost("a"), lost("b"), lost("c"), known("d")],
                true,
                vec!["a", "b", "c"],
            ),
            // The count but not the share (3 of 7 < 0.5).
            (
                vec![
                    lost("a"),
                    lost("b"),
                    lost("c"),
                    known("d"),
                    known("e"),
                    known("f"),
                    known("g"),
                ],
                false,
                vec![],
            ),
            // Pods bound just now are not counted, nor held on the census alone.
            (
                vec![
                    lost("a"),
                    lost("b"),
                    fact("c", "n1", false, false, false),
                    fact("d", "n1", false, false, false),
                ],
                false,
                vec![],
            ),
            (
                vec![
                    lost("a"),
                    lost("b"),
                    lost("c"),
                    fact("d", "n1", false, false, false),
                ],
                true,
                vec!["a", "b", "c"],
            ),
            // A marked pod stays held below the thresholds while its job is unknown...
            (
                vec![fact("a", "n1", false, true, true), known("b"), known("c")],
                false,
                vec!["a"],
            ),
            // ... and is no longer held once it is known.
            (
                vec![fact("a", "n1", true, true, true), known("b")],
                false,
                vec![],
            ),
        ];
        for (facts, met, held) in cases {
            let c = census(&facts, &opts);
            assert_eq!((c.threshold_met, keys(&c)), (met, held), "{facts:?}");
        }
    }

    /// A job index listed cleanly at `at`.
    struct Listed(Option<tokio::time::Instant>);

    impl KnownJobs for Listed {
        fn synced(&self) -> bool {
            self.0.is_some()
        }
        fn names(&self, _: u32, _: &str, _: Option<&str>) -> bool {
            false
        }
        fn listed_since(&self, t: Option<tokio::time::Instant>) -> bool {
            match t {
                Some(t) => self.0.is_some_and(|at| at >= t),
                None => self.synced(),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_counts_once_the_watcher_has_listed_since_it_was_bound() {
        tokio::time::advance(Duration::from_secs(100)).await;
        let now = tokio::time::Instant::now();
        let listed = Listed(Some(now - Duration::from_secs(1)));
        // Bound 10 s ago: the listing 1 s ago started after it (and the slack).
        assert!(listed_since_bound(&listed, Some(Duration::from_secs(10))));
        // Bound 2.5 s ago: within the slack of the listing, not counted yet.
        assert!(!listed_since_bound(
            &listed,
            Some(Duration::from_millis(2500))
        ));
        // Bound just now: not counted.
        assert!(!listed_since_bound(&listed, Some(Duration::ZERO)));
        // No bind time, or bound before the monotonic clock began: any listing counts.
        assert!(listed_since_bound(&listed, None));
        assert!(listed_since_bound(
            &listed,
            Some(Duration::from_secs(1 << 40))
        ));
        // Never listed: nothing counts.
        assert!(!listed_since_bound(
            &Listed(None),
            Some(Duration::from_secs(10))
        ));
    }

    #[test]
    fn a_zero_count_turns_the_guard_off() {
        let opts = StateLossOptions {
            min_pods: 0,
            ..Default::default()
        };
        let facts: Vec<PodFact> = (0..5)
            .map(|i| fact(&format!("p{i}"), "n1", false, true, i == 0))
            .collect();
        let c = census(&facts, &opts);
        assert!(!c.threshold_met && c.held.is_empty(), "{c:?}");
        assert!(!c.holding());
    }

    #[test]
    fn held_pods_by_node_and_the_message() {
        let facts = vec![
            fact("ns/a", "n1", false, true, false),
            fact("ns/b", "n2", false, true, false),
            fact("ns/c", "n1", false, true, false),
            fact("ns/d", "n3", true, true, false),
        ];
        let c = census(&facts, &StateLossOptions::default());
        assert_eq!(c.held_on("n1"), vec!["ns/a", "ns/c"]);
        assert_eq!(c.held_on("n3"), Vec::<String>::new());
        assert_eq!(c.by_node().len(), 2);
        let m = c.message(7);
        assert!(
            m.contains("job 7") && m.contains("3 of 4 bound pods' jobs are unknown to Slurm"),
            "{m}"
        );
    }
}
