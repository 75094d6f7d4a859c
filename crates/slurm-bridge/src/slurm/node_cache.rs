//! The Slurm nodes, listed once per interval (GET /nodes/) instead of once per pod.
//!
//! Two views: [`SlurmNodeCache::snapshot`], the names with a generation that moves only when the
//! names change (the scheduler's placement cache depends on that), and
//! [`SlurmNodeCache::nodes`], every node as last listed. Subscribers
//! ([`SlurmNodeCache::subscribe_changes`]) learn after each listing which nodes appeared,
//! disappeared, or changed in what the node controller acts on (state, reason, resources,
//! features, topology), so an admin's drain reaches the controller within one interval.

use super::SlurmNodes;
use crate::sync::{MutexExt, RwLockExt, Subscribers};
use slurm_rest::models::{Node, NodeListing};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The names as of one listing, with a generation that changes only when the names do, so
/// whatever was derived from them (cached placements) stays valid across identical refreshes.
#[derive(Clone, Debug, Default)]
pub struct NodeNames {
    pub generation: u64,
    pub names: Arc<BTreeSet<String>>,
}

/// Slurm node names, refreshed in the background.
pub struct SlurmNodeCache<S> {
    source: Arc<S>,
    interval: Duration,
    current: RwLock<NodeNames>,
    /// Every node of the last listing, by name.
    nodes: RwLock<Arc<BTreeMap<String, Node>>>,
    /// Receivers of the names that changed per listing; closed ones are dropped.
    subscribers: Subscribers<Arc<Vec<String>>>,
    synced: watch::Sender<bool>,
    /// Moves when a node appears, goes, or changes its configuration ([`Self::config_generation`]).
    config_generation: std::sync::atomic::AtomicU64,
    /// The last listing's `last_update`: the next one asks Slurm for the nodes only if one
    /// changed since (a quiet cluster's 5,000 nodes cost slurmrestd 0.6 CPU s a listing).
    since: std::sync::Mutex<Option<u64>>,
}

/// What a node is configured with: what a job description can ask for. A change may make a job
/// Slurm refused ("Requested node configuration is not available") acceptable.
fn configured(n: &Node) -> impl PartialEq + '_ {
    (
        n.cpus,
        n.sockets,
        n.cores,
        n.threads,
        n.real_memory,
        &n.gres,
        &n.features,
        &n.partitions,
    )
}

/// What a change of a node means to its subscribers: its configuration, state, reason, active
/// features and topology. Fields that move all the time (allocated CPUs and memory, load) are
/// left out, so a listing reports only meaningful changes.
fn watched(n: &Node) -> impl PartialEq + '_ {
    (
        configured(n),
        &n.state,
        &n.reason,
        &n.active_features,
        &n.topology,
    )
}

/// True when a node appeared, went, or changed its configuration between two listings.
fn configuration_changed(old: &BTreeMap<String, Node>, new: &BTreeMap<String, Node>) -> bool {
    old.len() != new.len()
        || new
            .iter()
            .any(|(name, n)| old.get(name).is_none_or(|o| configured(o) != configured(n)))
}

/// The names of the nodes that appeared, disappeared or changed between two listings, sorted.
fn changed_names(old: &BTreeMap<String, Node>, new: &BTreeMap<String, Node>) -> Vec<String> {
    let mut changed: BTreeSet<&String> = BTreeSet::new();
    for (name, n) in new {
        if old.get(name).is_none_or(|o| watched(o) != watched(n)) {
            changed.insert(name);
        }
    }
    changed.extend(old.keys().filter(|name| !new.contains_key(*name)));
    changed.into_iter().cloned().collect()
}

impl<S: SlurmNodes> SlurmNodeCache<S> {
    pub fn new(source: Arc<S>, interval: Duration) -> Arc<Self> {
        Arc::new(SlurmNodeCache {
            source,
            interval,
            current: RwLock::new(NodeNames::default()),
            nodes: RwLock::new(Arc::new(BTreeMap::new())),
            subscribers: Subscribers::default(),
            synced: watch::channel(false).0,
            config_generation: Default::default(),
            since: Default::default(),
        })
    }

    /// The names as of the last successful listing with their generation, read together: a
    /// placement cached under a generation must come from that generation's names.
    pub fn snapshot(&self) -> NodeNames {
        self.current.read_locked().clone()
    }

    /// A number that moves when a node appears, goes, or changes what it is configured with
    /// (CPUs, layout, memory, GRES, features, partitions), but not with its state or load: a job
    /// description Slurm refused for the configuration may pass after it moved.
    pub fn config_generation(&self) -> u64 {
        self.config_generation
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every node as of the last successful listing, by name.
    pub fn nodes(&self) -> Arc<BTreeMap<String, Node>> {
        self.nodes.read_locked().clone()
    }

    /// One node as of the last successful listing.
    pub fn node(&self, name: &str) -> Option<Node> {
        self.nodes().get(name).cloned()
    }

    /// After each listing, the names of the nodes that appeared, disappeared or changed (state,
    /// reason, CPUs, memory, GRES, features, partitions, topology); nothing is sent for a listing
    /// without changes. The first listing after subscribing reports only changes since the
    /// listing before it: read [`SlurmNodeCache::nodes`] for the current state.
    pub fn subscribe_changes(&self) -> mpsc::UnboundedReceiver<Arc<Vec<String>>> {
        self.subscribers.subscribe()
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first successful listing.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Lists the nodes now (or learns that none changed since the last listing); the generation
    /// moves on only when the names changed.
    pub async fn refresh(&self) -> Result<Arc<BTreeSet<String>>, slurm_rest::Error> {
        let since = *self.since.locked();
        let (nodes, last_update) = match self.source.list_nodes_since(since).await? {
            NodeListing::Unchanged => {
                self.synced.send_replace(true);
                return Ok(self.snapshot().names);
            }
            NodeListing::Nodes { nodes, last_update } => (nodes, last_update),
        };
        let by_name: BTreeMap<String, Node> = nodes
            .into_iter()
            .filter(|n| !n.name.is_empty())
            .map(|n| (n.name.clone(), n))
            .collect();
        let names: BTreeSet<String> = by_name.keys().cloned().collect();
        self.replace_nodes(by_name);
        let names = self.replace(names);
        *self.since.locked() = last_update;
        self.synced.send_replace(true);
        Ok(names)
    }

    /// Installs the nodes of a listing and tells the subscribers which changed.
    fn replace_nodes(&self, by_name: BTreeMap<String, Node>) {
        let changed = {
            let mut current = self.nodes.write_locked();
            let changed = changed_names(&current, &by_name);
            if configuration_changed(&current, &by_name) {
                self.config_generation
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            *current = Arc::new(by_name);
            changed
        };
        if changed.is_empty() {
            return;
        }
        self.subscribers.send(Arc::new(changed));
    }

    /// Installs a new listing unless it equals the current one; returns the current names.
    fn replace(&self, names: BTreeSet<String>) -> Arc<BTreeSet<String>> {
        let mut current = self.current.write_locked();
        if *current.names != names {
            current.generation += 1;
            current.names = Arc::new(names);
            tracing::debug!(
                generation = current.generation,
                nodes = current.names.len(),
                "Slurm node names changed"
            );
        }
        current.names.clone()
    }

    /// Refreshes forever: every interval, or after a slow listing [`LISTING_SHARE`] times its
    /// duration (at most [`STRETCHED_MAX`]).
    pub async fn run(self: Arc<Self>) {
        loop {
            let started = tokio::time::Instant::now();
            let wait = match self.refresh().await {
                Ok(_) => next_listing_in(self.interval, started.elapsed()),
                Err(e) => {
                    tracing::warn!(error = %e, "listing Slurm nodes failed");
                    Duration::from_secs(2).min(self.interval)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// A listing is followed by a pause of at least this many times its duration, so polling takes
/// at most about 1/20 of slurmrestd's time on any cluster: a whole listing of 5,000 nodes takes
/// 0.8 s on an idle machine and about 1.8 s under a burst (16-36 s between listings then),
/// while a 304 takes milliseconds and leaves the interval as configured.
pub const LISTING_SHARE: u32 = 20;

/// The longest a slow listing stretches the pause to (unless the interval is longer): node
/// changes still arrive within about a minute.
pub const STRETCHED_MAX: Duration = Duration::from_secs(60);

/// The pause after a successful listing that took `took`.
fn next_listing_in(interval: Duration, took: Duration) -> Duration {
    interval.max((took * LISTING_SHARE).min(STRETCHED_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_rest::models::Node;
    use std::sync::Mutex;

    /// A node table standing in for slurmctld.
    #[derive(Default)]
    struct Table(Mutex<Vec<&'static str>>);

    impl SlurmNodes for Table {
        async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
            let names = self.0.lock().unwrap();
            Ok(names
                .iter()
                .map(|n| Node {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn the_generation_moves_only_when_the_names_change() {
        let table = Arc::new(Table::default());
        *table.0.lock().unwrap() = vec!["n1", "n2"];
        let cache = SlurmNodeCache::new(table.clone(), Duration::from_secs(10));
        cache.refresh().await.unwrap();
        let first = cache.snapshot();
        assert_eq!(first.generation, 1);

        // Same names in another order: same generation, same names.
        *table.0.lock().unwrap() = vec!["n2", "n1"];
        cache.refresh().await.unwrap();
        let again = cache.snapshot();
        assert_eq!(again.generation, first.generation);
        assert!(Arc::ptr_eq(&again.names, &first.names));

        *table.0.lock().unwrap() = vec!["n1", "n3"];
        cache.refresh().await.unwrap();
        let changed = cache.snapshot();
        assert_eq!(changed.generation, first.generation + 1);
        assert!(changed.names.contains("n3"));
    }

    /// A table that answers conditional listings as slurmctld does: `Unchanged` when asked
    /// since its current stamp, which every change moves on.
    #[derive(Default)]
    struct Stamped {
        names: Mutex<(Vec<&'static str>, u64)>,
        asked: Mutex<Vec<Option<u64>>>,
    }

    impl SlurmNodes for Stamped {
        async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
            unreachable!("the cache lists conditionally")
        }
        async fn list_nodes_since(
            &self,
            since: Option<u64>,
        ) -> Result<NodeListing, slurm_rest::Error> {
            self.asked.lock().unwrap().push(since);
            let (names, stamp) = self.names.lock().unwrap().clone();
            if since == Some(stamp) {
                return Ok(NodeListing::Unchanged);
            }
            Ok(NodeListing::Nodes {
                nodes: names
                    .iter()
                    .map(|n| Node {
                        name: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                last_update: Some(stamp),
            })
        }
    }

    #[tokio::test]
    async fn an_unchanged_answer_keeps_the_last_listing() {
        let table = Arc::new(Stamped::default());
        *table.names.lock().unwrap() = (vec!["n1", "n2"], 100);
        let cache = SlurmNodeCache::new(table.clone(), Duration::from_secs(10));
        let mut rx = cache.subscribe_changes();
        cache.refresh().await.unwrap();
        assert!(rx.try_recv().is_ok(), "the first listing reports its nodes");
        let first = cache.snapshot();

        let names = cache.refresh().await.unwrap();
        assert_eq!(*names, first.names.as_ref().clone());
        assert_eq!(cache.snapshot().generation, first.generation);
        assert_eq!(cache.nodes().len(), 2, "the nodes stay as last listed");
        assert!(
            rx.try_recv().is_err(),
            "an unchanged answer reports nothing"
        );

        *table.names.lock().unwrap() = (vec!["n1", "n3"], 107);
        cache.refresh().await.unwrap();
        assert!(cache.snapshot().names.contains("n3"));
        assert_eq!(*rx.try_recv().unwrap(), ["n2", "n3"]);
        assert_eq!(
            *table.asked.lock().unwrap(),
            [None, Some(100), Some(100)],
            "each listing asks since the last whole listing's stamp"
        );
        cache.refresh().await.unwrap();
        assert_eq!(table.asked.lock().unwrap().last(), Some(&Some(107)));
    }

    #[test]
    fn a_slow_listing_stretches_the_pause_to_twenty_times_its_duration_up_to_a_minute() {
        let ten = Duration::from_secs(10);
        let ms = Duration::from_millis;
        assert_eq!(next_listing_in(ten, ms(3)), ten, "a 304");
        assert_eq!(
            next_listing_in(ten, ms(500)),
            ten,
            "20 x 0.5 s is the interval"
        );
        assert_eq!(next_listing_in(ten, ms(1_800)), Duration::from_secs(36));
        assert_eq!(next_listing_in(ten, Duration::from_secs(30)), STRETCHED_MAX);
        let long = Duration::from_secs(300);
        assert_eq!(
            next_listing_in(long, ms(1_800)),
            long,
            "a longer interval stays"
        );
    }

    /// Answers each listing after `cost` (tokio's clock), recording when each was asked.
    struct Slow {
        cost: Duration,
        asked: Mutex<Vec<tokio::time::Instant>>,
    }

    impl SlurmNodes for Slow {
        async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
            self.asked.lock().unwrap().push(tokio::time::Instant::now());
            tokio::time::sleep(self.cost).await;
            Ok(vec![Node {
                name: "n1".into(),
                ..Default::default()
            }])
        }
    }

    async fn gaps_between_listings(cost: Duration, interval: Duration) -> Vec<Duration> {
        let table = Arc::new(Slow {
            cost,
            asked: Mutex::default(),
        });
        let cache = SlurmNodeCache::new(table.clone(), interval);
        let task = tokio::spawn(cache.run());
        while table.asked.lock().unwrap().len() < 3 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        task.abort();
        let asked = table.asked.lock().unwrap();
        asked.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_poll_loop_waits_longer_after_a_slow_listing() {
        let ten = Duration::from_secs(10);
        for gap in gaps_between_listings(Duration::from_millis(2), ten).await {
            assert!(
                gap >= ten && gap < ten + Duration::from_millis(200),
                "{gap:?}"
            );
        }
        // A 2 s listing: the next one starts 2 s + 40 s after it started.
        for gap in gaps_between_listings(Duration::from_secs(2), ten).await {
            let want = Duration::from_secs(42);
            assert!(
                gap >= want && gap < want + Duration::from_millis(200),
                "{gap:?}"
            );
        }
    }

    /// Nodes with a state and a reason standing in for slurmctld.
    #[derive(Default)]
    struct States(Mutex<Vec<Node>>);

    impl SlurmNodes for States {
        async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
            Ok(self.0.lock().unwrap().clone())
        }
    }

    fn node(name: &str, drain: Option<&str>, alloc_cpus: i32) -> Node {
        use slurm_rest::models::NodeState;
        let mut state = vec![NodeState::Idle, NodeState::External];
        if drain.is_some() {
            state.push(NodeState::Drain);
        }
        Node {
            name: name.into(),
            state,
            reason: drain.map(str::to_string),
            alloc_cpus: Some(alloc_cpus),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn subscribers_learn_which_nodes_changed() {
        let table = Arc::new(States::default());
        *table.0.lock().unwrap() = vec![node("n1", None, 0), node("n2", None, 0)];
        let cache = SlurmNodeCache::new(table.clone(), Duration::from_secs(10));
        let mut rx = cache.subscribe_changes();
        cache.refresh().await.unwrap();
        assert_eq!(
            *rx.try_recv().unwrap(),
            ["n1", "n2"],
            "first listing: all new"
        );
        assert_eq!(cache.nodes().len(), 2);

        // Allocated CPUs move all the time: not a change.
        *table.0.lock().unwrap() = vec![node("n1", None, 4), node("n2", None, 0)];
        cache.refresh().await.unwrap();
        assert!(rx.try_recv().is_err());

        // A drain is, and so is a node going away; the names generation moves only for the latter.
        let generation = cache.snapshot().generation;
        *table.0.lock().unwrap() = vec![node("n1", Some("maintenance"), 4)];
        cache.refresh().await.unwrap();
        assert_eq!(*rx.try_recv().unwrap(), ["n1", "n2"]);
        assert_eq!(cache.snapshot().generation, generation + 1);
        assert_eq!(
            cache.node("n1").and_then(|n| n.reason).as_deref(),
            Some("maintenance")
        );

        // A reason change alone keeps the names' generation, and the configuration's.
        let config = cache.config_generation();
        *table.0.lock().unwrap() = vec![node("n1", Some("other"), 4)];
        cache.refresh().await.unwrap();
        assert_eq!(*rx.try_recv().unwrap(), ["n1"]);
        assert_eq!(cache.snapshot().generation, generation + 1);
        assert_eq!(cache.config_generation(), config);

        // Registered anew with GPUs: same name, same names' generation, a new configuration.
        let mut gpus = node("n1", Some("other"), 4);
        gpus.gres = Some("gpu:gpu.example.com:4".into());
        *table.0.lock().unwrap() = vec![gpus];
        cache.refresh().await.unwrap();
        assert_eq!(*rx.try_recv().unwrap(), ["n1"]);
        assert_eq!(cache.snapshot().generation, generation + 1);
        assert_eq!(cache.config_generation(), config + 1);

        // A dropped receiver is forgotten.
        drop(rx);
        *table.0.lock().unwrap() = vec![];
        cache.refresh().await.unwrap();
        assert!(cache.subscribers.is_empty());
    }
}
