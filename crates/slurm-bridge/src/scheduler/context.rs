//! What every reconcile shares: config, clients, caches, the job watcher, locks.

use super::locks::GroupLocks;
use super::metrics::Metrics;
use crate::caches::CacheHandles;
use crate::caches::reader::CachedReader;
use crate::config::Config;
use crate::k8s::PodWriter;
use crate::k8s::slim_pod::Pod;
use crate::slurm::{JobEvent, JobWatcher, SlurmNodeCache};
use crate::sync::MutexExt;
use crate::workload::ir::pod_key;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use crate::slurm::Slurm;

/// Shared state of the scheduler.
pub struct Ctx<S> {
    pub config: Config,
    /// Who each namespace's jobs run as and what their authors may ask ([`crate::tenancy`]).
    pub tenancy: crate::tenancy::Tenancy,
    pub client: kube::Client,
    pub slurm: Arc<S>,
    pub watcher: Arc<JobWatcher<S>>,
    pub slurm_nodes: Arc<SlurmNodeCache<S>>,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    /// ResourceSlices: the nodes' DRA devices, for the claims made at bind time.
    pub slices: Store<k8s_openapi::api::resource::v1::ResourceSlice>,
    /// PVCs, PVs and StorageClasses, for the volume rules ([`crate::volumes`]).
    pub volumes: crate::caches::VolumeStores,
    /// How long an allocated pod may wait for its claims to be bound (kube-scheduler's
    /// `bindTimeoutSeconds`); then its writes are undone and its Slurm job cancelled.
    pub volume_bind_timeout: Duration,
    /// Since when each pod (`ns/name`, Slurm job) has waited for its claims' binding; `None`
    /// once the wait timed out and the job was cancelled, so a pass on that job (run before the
    /// watcher sees it gone) neither reserves the claims again nor reports the pod waiting.
    /// Entries go with the pod.
    pub volume_waits: Mutex<HashMap<(String, u32), Option<std::time::Instant>>>,
    /// Translation's reads, served from the caches ([`crate::caches::reader`]).
    pub reader: CachedReader,
    pub writer: PodWriter,
    pub locks: GroupLocks,
    pub metrics: Arc<Metrics>,
    /// Hash of the job description last sent for each job, to update a pending job only when
    /// something changed; pruned when the job ends ([`Ctx::job_event`]).
    pub sent: Mutex<HashMap<u32, u64>>,
    /// Consecutive failures per pod, for backoff; pruned when the pod is deleted
    /// ([`Ctx::pod_event`]).
    pub failures: crate::backoff::Backoffs,
    /// True while this replica holds the leader lease (always, without leader election).
    pub leader: AtomicBool,
    /// True from the start of a shutdown: the passes in flight may finish, a pass that starts
    /// then does nothing (it could not finish, or undo its work, within the grace).
    pub stopping: AtomicBool,
    /// Bumped when what placement reads of a node changes, to invalidate cached placements.
    pub node_generation: Arc<std::sync::atomic::AtomicU64>,
    /// Placements by pod constraints, valid for one node generation and one generation of the
    /// Slurm node names.
    pub placements: Mutex<PlacementCache>,
    /// Groups whose job description Slurm rejected for good, not sent again until it or the
    /// nodes change ([`super::rejection`]).
    pub rejections: Mutex<super::rejection::Rejections>,
    /// Slurm node name -> Kubernetes node name ([`Ctx::slurm_to_kube`]), with the node generation
    /// and node count it was built for.
    pub node_names: Mutex<Option<NodeNames>>,
    /// Where passes are requested, and the binding stage of a pass
    /// ([`super::triggers::Triggers::binding_stage`]).
    pub(super) triggers: Arc<super::triggers::Triggers>,
    /// Job submits in flight at once ([`SUBMITS_IN_FLIGHT`] unless set).
    pub submit_slots: tokio::sync::Semaphore,
    /// Groups whose last submit failed without an answer Slurm surely did not act on (a lost
    /// answer, a timeout, a reset), with when: the group is not submitted again before the job
    /// watcher has listed Slurm's jobs since, so a job made by that submit is found instead
    /// of doubled ([`super::reconcile`]'s submit).
    pub submits_in_doubt: Mutex<HashMap<String, tokio::time::Instant>>,
}

/// Job submits sent to Slurm at once by default (`--slurm-requests-in-flight`, which sets the
/// job watcher's reads, `GET /job/{id}`, to as many:
/// [`crate::slurm::JobWatcherConfig::fetch_concurrency`]). slurmrestd shares itself between the
/// requests in flight, so with a submit per worker (64) the reads that tell the bridge which
/// jobs Slurm allocated got a fifth of it, and in a 5,000-pod burst the binds waited for the
/// submits to end (allocation seen -> bound 8 s on average, submit -> bound 22 s; with 16: 0.9
/// and 4.4 s, docs/performance.md). A pass waits for a slot holding its worker; binds are ranked
/// first in the queue, so they take the workers the submits free.
pub const SUBMITS_IN_FLIGHT: usize = 16;

/// The node name map [`Ctx::slurm_to_kube`] keeps.
pub struct NodeNames {
    valid_for: (u64, usize),
    map: Arc<std::collections::BTreeMap<String, String>>,
}

/// The per-pod backoff of scheduling passes ([`Ctx::backoff`]): 0.5 s, 1 s, 2 s ... capped at
/// 15 s.
pub fn pod_backoffs() -> crate::backoff::Backoffs {
    crate::backoff::Backoffs::new(Duration::from_millis(500), Duration::from_secs(15))
}

/// Cached node filtering: the filter runs once per distinct set of pod constraints, not per pod.
#[derive(Default)]
pub struct PlacementCache {
    valid_for: Generations,
    entries: HashMap<u64, Arc<CachedPlacement>>,
}

/// What a cached placement was computed from: the Kubernetes node generation (bumped when a
/// node's labels, taints, cordon or readiness change) and the Slurm node names' generation.
pub type Generations = (u64, u64);

impl PlacementCache {
    /// Entries kept at most; beyond, the cache starts over.
    const MAX_ENTRIES: usize = 4096;

    /// The placement cached for `key`; a change of either generation empties the cache first.
    pub fn get(&mut self, valid_for: Generations, key: u64) -> Option<Arc<CachedPlacement>> {
        if self.valid_for != valid_for {
            self.valid_for = valid_for;
            self.entries.clear();
        }
        self.entries.get(&key).cloned()
    }

    /// Keeps a placement computed under `valid_for`, unless the nodes changed meanwhile.
    pub fn insert(&mut self, valid_for: Generations, key: u64, placement: Arc<CachedPlacement>) {
        if self.valid_for != valid_for {
            return;
        }
        if self.entries.len() > Self::MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, placement);
    }
}

/// kube-scheduler's default `bindTimeoutSeconds`.
pub const DEFAULT_VOLUME_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// A placement as the job description and the user message need it.
#[derive(Debug)]
pub struct CachedPlacement {
    pub feasible: usize,
    /// Slurm names of the feasible nodes.
    pub feasible_nodes: std::collections::BTreeSet<String>,
    pub nodes: usize,
    /// `excluded_nodes` as one compressed host list (empty: nothing excluded).
    pub excluded: Vec<String>,
    /// Why nodes were rejected, for the pod's condition.
    pub rejections: String,
}

impl<S: Slurm> Ctx<S> {
    /// A context on the shared caches, as every scheduler (and every unit test of one) makes
    /// it: what is kept per pod, job and group starts empty, and the replica does not lead yet
    /// ([`Ctx::leader`]).
    pub fn new(
        config: Config,
        client: kube::Client,
        caches: CacheHandles<S>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Ctx {
            reader: caches
                .reader(client.clone())
                .with_gres_drivers(config.gres_drivers()),
            writer: PodWriter::new(client.clone(), &config.scheduler_name)
                .repairing_labels(&metrics.kube_writes),
            tenancy: crate::tenancy::Tenancy::new(&config, Some(client.clone())),
            config,
            client,
            slurm: caches.slurm,
            watcher: caches.jobs,
            slurm_nodes: caches.slurm_nodes,
            nodes: caches.nodes,
            pods: caches.pods,
            slices: caches.slices,
            volumes: caches.volumes,
            volume_bind_timeout: DEFAULT_VOLUME_BIND_TIMEOUT,
            volume_waits: Default::default(),
            node_generation: caches.node_generation,
            node_names: Mutex::new(None),
            locks: Default::default(),
            metrics,
            sent: Default::default(),
            failures: pod_backoffs(),
            leader: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            placements: Default::default(),
            rejections: Default::default(),
            triggers: Default::default(),
            submits_in_doubt: Mutex::new(HashMap::new()),
            submit_slots: tokio::sync::Semaphore::new(SUBMITS_IN_FLIGHT),
        }
    }

    /// The placement for pods with these constraints, computed at most once per node
    /// generation and Slurm node names generation.
    pub fn placement(&self, pods: &[crate::k8s::slim_pod::Pod]) -> Arc<CachedPlacement> {
        use super::feasibility::{constraints_key, place};
        let slurm = self.slurm_nodes.snapshot();
        let valid_for = (
            self.node_generation.load(Ordering::Relaxed),
            slurm.generation,
        );
        let key = constraints_key(pods);
        if let Some(p) = self.placement_cache().get(valid_for, key) {
            return p;
        }
        let nodes = self.nodes.state();
        let p = place(pods, &nodes, &slurm.names, &[self.writer.toleration()]);
        let cached = Arc::new(CachedPlacement {
            feasible: p.feasible.len(),
            feasible_nodes: p.feasible.clone(),
            nodes: nodes.len(),
            excluded: if p.excluded.is_empty() {
                Vec::new()
            } else {
                vec![slurm_rest::hostlist::compress(&p.excluded)]
            },
            rejections: p
                .rejections
                .iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect::<Vec<_>>()
                .join(", "),
        });
        self.placement_cache()
            .insert(valid_for, key, cached.clone());
        cached
    }

    /// The generations placements are computed from: the Kubernetes nodes' and Slurm's node
    /// names'.
    pub fn generations(&self) -> Generations {
        (
            self.node_generation.load(Ordering::Relaxed),
            self.slurm_nodes.snapshot().generation,
        )
    }

    /// What a job description is made of, for [`super::rejection::Rejections`]: its hash, the
    /// node generations and the Slurm nodes' configuration generation (a node change, such as a
    /// node registered anew with GPUs, may make a rejected description acceptable even if the
    /// description itself is the same).
    pub fn fingerprint(&self, desc_hash: u64) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            desc_hash,
            self.generations(),
            self.slurm_nodes.config_generation(),
        )
            .hash(&mut h);
        h.finish()
    }

    /// What the DRA claims made at bind time need ([`crate::dra::claims`]).
    pub fn claims(&self) -> crate::dra::claims::ClaimWriter {
        crate::dra::claims::ClaimWriter {
            client: self.client.clone(),
            slices: self.slices.clone(),
            drivers: self.config.gres_drivers(),
            field_manager: self.config.scheduler_name.clone(),
        }
    }

    /// The permanent rejections, even if a panicking holder poisoned their lock.
    pub fn rejections(&self) -> std::sync::MutexGuard<'_, super::rejection::Rejections> {
        self.rejections.locked()
    }

    /// Slurm node name -> Kubernetes node name of every cached node. Built once per node
    /// generation (and node count), not per pass: a bind pass built it from every node, the top
    /// item of a 1,000-pod burst's profile (O(pods x nodes)). A pass that finds it built takes no
    /// snapshot of the node store either (cloning and dropping 5,000 `Arc`s per bind pass was a
    /// tenth of the scheduler's CPU in a 5,000-node burst).
    pub fn slurm_to_kube(&self) -> Arc<std::collections::BTreeMap<String, String>> {
        use kube::ResourceExt;
        let generation = self.node_generation.load(Ordering::Relaxed);
        let mut kept = self.node_names.locked();
        if let Some(n) = kept
            .as_ref()
            .filter(|n| n.valid_for == (generation, self.nodes.len()))
        {
            return n.map.clone();
        }
        let nodes = self.nodes.state();
        let valid_for = (generation, nodes.len());
        let map: Arc<std::collections::BTreeMap<String, String>> = Arc::new(
            nodes
                .iter()
                .map(|n| (crate::k8s::slurm_node_name(n), n.name_any()))
                .collect(),
        );
        *kept = Some(NodeNames {
            valid_for,
            map: map.clone(),
        });
        map
    }

    /// The placement cache, even if a panicking holder poisoned its lock.
    fn placement_cache(&self) -> std::sync::MutexGuard<'_, PlacementCache> {
        self.placements.locked()
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Whether a pass may start work: this replica leads and is not shutting down.
    pub fn may_start_pass(&self) -> bool {
        self.is_leader() && !self.stopping.load(Ordering::SeqCst)
    }

    /// The wait after one more failure of a pod's pass.
    pub fn backoff(&self, pod: &str) -> Duration {
        self.failures.next(pod)
    }

    pub fn succeeded(&self, pod: &str) {
        self.forget_pod(pod);
    }

    /// Forgets a pod's failure count (the pod was deleted, or its pass succeeded).
    pub fn forget_pod(&self, pod: &str) {
        self.failures.forget(pod);
    }

    /// Forgets what is kept per job (the last description sent, the latency timers) once the job
    /// is over, so these maps hold live jobs only.
    pub fn forget_job(&self, job_id: u32) {
        self.sent.locked().remove(&job_id);
        self.metrics.forget_job(job_id);
    }

    /// Keeps the per-job state in step with the job watcher: times allocations, forgets jobs
    /// that ended or that Slurm no longer lists.
    pub fn job_event(&self, event: &JobEvent) {
        match event {
            JobEvent::Changed(job) if job.allocated_nodes().is_some() => {
                self.metrics.allocated(job.job_id)
            }
            JobEvent::Changed(job) if job.is_active() => {}
            JobEvent::Changed(job) | JobEvent::Gone(job) => self.forget_job(job.job_id),
        }
    }

    /// Keeps the per-pod state in step with the pod watcher: forgets a deleted pod, and after a
    /// relist (which reports no deletions) every pod the cache no longer holds.
    pub fn pod_event(&self, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => self.writer.seen(pod),
            watcher::Event::Delete(pod) => {
                let key = pod_key(pod);
                self.forget_pod(&key);
                self.writer.forget_pod(&key);
                self.volume_waits.locked().retain(|(p, _), _| *p != key);
            }
            watcher::Event::InitDone => {
                self.failures.retain(|key| self.is_cached(key));
                self.writer.retain_pods(|key| self.is_cached(key));
                self.volume_waits
                    .locked()
                    .retain(|(p, _), _| self.is_cached(p));
            }
            _ => {}
        }
    }

    /// As [`Ctx::pod_event`], for a change seen through the shared caches.
    pub fn pod_change(&self, change: &crate::caches::Change<Pod>) {
        use crate::caches::Change;
        match change {
            Change::Applied(pod) => self.writer.seen(pod),
            Change::Deleted(pod) => self.pod_event(&watcher::Event::Delete((**pod).clone())),
            Change::Relisted => self.pod_event(&watcher::Event::InitDone),
        }
    }

    /// True while the pod cache holds the pod `ns/name`.
    pub fn is_cached(&self, pod: &str) -> bool {
        pod.split_once('/').is_some_and(|(ns, name)| {
            self.pods
                .get(&ObjectRef::<Pod>::new(name).within(ns))
                .is_some()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::reconcile::{ReconcileError, error_policy};
    use crate::slurm::WatchedJob;
    use crate::slurm::{JobControl, SlurmJobs, SlurmNodes};
    use crate::workload::admin_comment::AdminComment;
    use kube::runtime::reflector::{self, store::Writer};
    use slurm_rest::models::{JobDescMsg, JobInfo, JobState, JobStateEntry};
    use std::collections::BTreeSet;

    /// Slurm for these tests: a node table; nothing else is ever called.
    #[derive(Default)]
    struct Nodes(Mutex<BTreeSet<&'static str>>);

    impl JobControl for Nodes {
        async fn submit(&self, _: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
            unreachable!("no submit in these tests")
        }
        async fn update(&self, _: u32, _: &JobDescMsg) -> Result<(), slurm_rest::Error> {
            unreachable!("no update in these tests")
        }
        async fn cancel(&self, _: u32) -> Result<(), slurm_rest::Error> {
            unreachable!("no cancel in these tests")
        }
    }

    impl SlurmJobs for Nodes {
        async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
            unreachable!("no job listing in these tests")
        }
        async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
            unreachable!("no job listing in these tests")
        }
        async fn job(&self, _: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
            unreachable!("no job listing in these tests")
        }
    }

    impl SlurmNodes for Nodes {
        async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
            let names = self.0.lock().unwrap();
            Ok(names
                .iter()
                .map(|n| slurm_rest::models::Node {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect())
        }
    }

    struct Fixture {
        ctx: Ctx<Nodes>,
        slurm: Arc<Nodes>,
        pods: Writer<Pod>,
        nodes: Writer<Node>,
    }

    /// A context whose Kubernetes client points nowhere (these tests make no requests).
    fn fixture() -> Fixture {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("URL"),
        ))
        .expect("client");
        let slurm = Arc::new(Nodes::default());
        let (pod_store, pods) = reflector::store();
        let (node_store, nodes) = reflector::store();
        let ctx = Ctx::new(
            Config::default(),
            client,
            CacheHandles::detached(slurm.clone(), node_store, pod_store),
            Metrics::new(&mut Default::default()),
        );
        ctx.leader.store(true, Ordering::Relaxed);
        Fixture {
            ctx,
            slurm,
            pods,
            nodes,
        }
    }

    fn pod(ns: &str, name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("pod")
    }

    fn ready_node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node")
    }

    fn job(id: u32, state: JobState, nodes: Option<&str>) -> Arc<WatchedJob> {
        Arc::new(WatchedJob {
            job_id: id,
            state: vec![state],
            state_reason: None,
            nodes: nodes.map(str::to_string),
            comment: AdminComment {
                pods: vec!["ns/a".into()],
                group: Some("ns/g".into()),
                uids: vec![],
                desc: None,
                cluster: None,
            },
        })
    }

    #[tokio::test]
    async fn placements_survive_an_unchanged_slurm_node_listing_and_not_a_changed_one() {
        let f = fixture();
        let mut nodes = f.nodes;
        nodes.apply_watcher_event(&watcher::Event::Apply(ready_node("n1")));
        *f.slurm.0.lock().unwrap() = BTreeSet::from(["n1"]);
        f.ctx.slurm_nodes.refresh().await.unwrap();
        let pods = [pod("ns", "a")];
        let first = f.ctx.placement(&pods);
        assert_eq!(first.feasible, 1);

        // The same listing again (a new allocation each time before): still a cache hit.
        f.ctx.slurm_nodes.refresh().await.unwrap();
        assert!(Arc::ptr_eq(&f.ctx.placement(&pods), &first));

        // Slurm's nodes changed: computed again, from the new names.
        *f.slurm.0.lock().unwrap() = BTreeSet::from(["n2"]);
        f.ctx.slurm_nodes.refresh().await.unwrap();
        let changed = f.ctx.placement(&pods);
        assert_eq!(changed.feasible, 0);
        assert_eq!(changed.excluded, ["n2"]);
    }

    #[tokio::test]
    async fn the_node_name_map_is_kept_until_the_nodes_change() {
        let f = fixture();
        let mut nodes = f.nodes;
        nodes.apply_watcher_event(&watcher::Event::Apply(ready_node("n1")));
        let first = f.ctx.slurm_to_kube();
        assert_eq!(first.get("n1").map(String::as_str), Some("n1"));
        assert!(Arc::ptr_eq(&f.ctx.slurm_to_kube(), &first));

        // A node more (the generation unchanged, as before the watcher counts it): built again.
        nodes.apply_watcher_event(&watcher::Event::Apply(ready_node("n2")));
        let grown = f.ctx.slurm_to_kube();
        assert_eq!(grown.len(), 2);
        assert!(Arc::ptr_eq(&f.ctx.slurm_to_kube(), &grown));

        // A new node generation: built again.
        f.ctx.node_generation.fetch_add(1, Ordering::Relaxed);
        assert!(!Arc::ptr_eq(&f.ctx.slurm_to_kube(), &grown));
    }

    #[test]
    fn a_placement_computed_under_old_generations_is_not_kept() {
        let mut cache = PlacementCache::default();
        let p = Arc::new(CachedPlacement {
            feasible: 1,
            feasible_nodes: Default::default(),
            nodes: 1,
            excluded: vec![],
            rejections: String::new(),
        });
        assert!(cache.get((1, 1), 7).is_none());
        cache.insert((1, 1), 7, p.clone());
        assert!(cache.get((1, 1), 7).is_some());
        // The Slurm names changed while another placement was being computed.
        assert!(cache.get((1, 2), 7).is_none());
        cache.insert((1, 1), 8, p);
        assert!(cache.get((1, 2), 8).is_none());
    }

    #[tokio::test]
    async fn per_job_state_is_dropped_when_the_job_ends_or_is_gone() {
        let f = fixture();
        let ctx = &f.ctx;
        // Job 1 submitted and cancelled while pending, job 2 allocated and never bound.
        for id in [1, 2] {
            ctx.metrics.submitted(id);
            ctx.sent.lock().unwrap().insert(id, 42);
        }
        ctx.job_event(&JobEvent::Changed(job(2, JobState::Running, Some("n1"))));
        assert_eq!(ctx.metrics.timed_jobs(), 2);

        ctx.job_event(&JobEvent::Changed(job(1, JobState::Pending, None)));
        assert_eq!(ctx.sent.lock().unwrap().len(), 2, "a pending job is kept");
        ctx.job_event(&JobEvent::Changed(job(1, JobState::Cancelled, None)));
        ctx.job_event(&JobEvent::Gone(job(2, JobState::Running, Some("n1"))));
        assert!(ctx.sent.lock().unwrap().is_empty());
        assert_eq!(ctx.metrics.timed_jobs(), 0);
    }

    #[tokio::test]
    async fn per_pod_failures_are_dropped_when_the_pod_is_deleted() {
        let f = fixture();
        let (ctx, mut pods) = (&f.ctx, f.pods);
        let (a, b) = (pod("ns", "a"), pod("ns", "b"));
        pods.apply_watcher_event(&watcher::Event::Apply(a.clone()));
        pods.apply_watcher_event(&watcher::Event::Apply(b));
        ctx.backoff("ns/a");
        ctx.backoff("ns/b");

        pods.apply_watcher_event(&watcher::Event::Delete(a.clone()));
        ctx.pod_event(&watcher::Event::Delete(a));
        assert_eq!(ctx.failures.len(), 1);

        // Pod b was deleted while the watch was down: the relist reports no deletion.
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            pods.apply_watcher_event(&event);
            ctx.pod_event(&event);
        }
        assert!(ctx.failures.is_empty());
    }

    #[tokio::test]
    async fn a_failed_pass_of_a_deleted_pod_leaves_no_failure_count() {
        let f = fixture();
        let ctx = Arc::new(f.ctx);
        let mut pods = f.pods;
        let err = || ReconcileError::NodeList {
            job_id: 1,
            nodes: "n[".into(),
            message: "bad".into(),
        };
        let a = pod("ns", "a");
        pods.apply_watcher_event(&watcher::Event::Apply(a.clone()));
        error_policy(Arc::new(a.clone()), &err(), ctx.clone());
        assert_eq!(ctx.failures.len(), 1, "a live pod backs off");

        // The pass ended after the pod's deletion was seen.
        pods.apply_watcher_event(&watcher::Event::Delete(a.clone()));
        ctx.pod_event(&watcher::Event::Delete(a.clone()));
        error_policy(Arc::new(a), &err(), ctx.clone());
        assert!(ctx.failures.is_empty());
    }
}
