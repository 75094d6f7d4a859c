//! The caches every component of one process shares: the Slurm job watcher, the Slurm node
//! listing, and reflectors of Kubernetes nodes, of the pods naming the bridge, of ResourceSlices
//! and (for the scheduler) of PersistentVolumeClaims, PersistentVolumes and StorageClasses.
//!
//! `slurm-bridge run` starts them once for the scheduler and the controllers; each component
//! subscribes to the changes it reacts to ([`Caches::pod_changes`], [`Caches::node_changes`],
//! [`JobWatcher::subscribe`]) instead of running its own watches and polls.

pub mod objects;
pub mod pod_groups;
pub mod reader;

use crate::k8s::node::placement_fingerprint;
use crate::k8s::slim_pod::Pod;
use crate::slurm::{JobWatcher, JobWatcherConfig, SlurmJobs, SlurmNodeCache, SlurmNodes};
use crate::sync::Subscribers;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use objects::ObjectCaches;
use pod_groups::PodGroupIndex;
use reader::{CachedReader, PodReads};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// A change of a cached object, as subscribers see it (after the cache holds it).
#[derive(Debug)]
pub enum Change<K> {
    /// Created or changed (also every object of a relist, sent once the relist is complete).
    Applied(Arc<K>),
    /// Deleted.
    Deleted(Arc<K>),
    /// A relist finished: objects the cache no longer holds were deleted meanwhile.
    Relisted,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied(o) => Change::Applied(o.clone()),
            Change::Deleted(o) => Change::Deleted(o.clone()),
            Change::Relisted => Change::Relisted,
        }
    }
}

/// Subscribers of one kind of change.
type Fanout<K> = Subscribers<Change<K>>;

/// Tells subscribers of a reflector's events, as [`Change`]s, once the store holds what they
/// tell. kube-runtime's store takes the objects of a relist in only when the relist completes
/// (`InitDone`), so the relist's objects are held back until then: a pass started by one of
/// them earlier would not find its pod in the store (issue 21). What is told is the store's own
/// `Arc` (no copy per event; a relist holds only the keys until it completes); a deleted object
/// is the event's.
struct Forwarder<K: kube::Resource> {
    relisted: Vec<ObjectRef<K>>,
}

impl<K: kube::Resource> Default for Forwarder<K> {
    fn default() -> Self {
        Forwarder {
            relisted: Vec::new(),
        }
    }
}

impl<K: kube::Resource<DynamicType = ()> + Clone> Forwarder<K> {
    /// Forwards `event` (seen after `store` applied it) to `to`'s subscribers.
    fn forward(&mut self, to: &Fanout<K>, store: &Store<K>, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => to.send(Change::Applied(
                store
                    .get(&ObjectRef::from_obj(o))
                    .unwrap_or_else(|| Arc::new(o.clone())),
            )),
            watcher::Event::Delete(o) => to.send(Change::Deleted(Arc::new(o.clone()))),
            watcher::Event::Init => self.relisted.clear(),
            watcher::Event::InitApply(o) => self.relisted.push(ObjectRef::from_obj(o)),
            watcher::Event::InitDone => {
                for key in self.relisted.drain(..) {
                    if let Some(o) = store.get(&key) {
                        to.send(Change::Applied(o));
                    }
                }
                self.relisted = Vec::new();
                to.send(Change::Relisted);
            }
        }
    }
}

/// How often the shared caches poll Slurm.
#[derive(Clone, Debug)]
pub struct CacheOptions {
    /// The bridge's scheduler name: the pod cache holds the pods naming it.
    pub scheduler_name: String,
    /// Interval of the job watcher's poll of GET /jobs/state/.
    pub job_poll_interval: Duration,
    /// Interval of the Slurm node listing.
    pub node_poll_interval: Duration,
    /// The job watcher's reads (GET /job/{id}) in flight at once.
    pub job_reads_in_flight: usize,
    /// Also cache PVCs, PVs and StorageClasses (what the scheduler's volume rules read).
    pub volumes: bool,
    /// The bridge's cluster name: the job watcher keeps only this cluster's jobs.
    pub cluster: Option<String>,
}

impl CacheOptions {
    /// The caches of the pods naming the bridge's scheduler in `config`.
    pub fn new(
        config: &crate::config::Config,
        job_poll_interval: Duration,
        node_poll_interval: Duration,
    ) -> Self {
        CacheOptions {
            scheduler_name: config.scheduler_name.clone(),
            job_poll_interval,
            node_poll_interval,
            job_reads_in_flight: JobWatcherConfig::default().fetch_concurrency,
            volumes: false,
            cluster: Some(config.cluster_name.clone()).filter(|c| !c.is_empty()),
        }
    }
}

/// The shared caches; see the module doc.
pub struct Caches<S> {
    /// What the components read: the Slurm client, the job watcher, the node listing, the
    /// reflector stores.
    pub handles: CacheHandles<S>,
    pod_changes: Fanout<Pod>,
    node_changes: Fanout<Node>,
    slice_changes: Fanout<ResourceSlice>,
    volume_changes: Subscribers<VolumeChange>,
    /// True once every cache has its first full picture.
    synced: tokio::sync::watch::Sender<bool>,
}

/// Handles on the shared caches, as a component keeps them: Arcs and reflector stores, cheap to
/// clone. Production takes them from [`Caches::handles`]; unit tests make them from stores they
/// fill themselves.
pub struct CacheHandles<S> {
    /// The Slurm client the caches read through (shared by the components for their writes).
    pub slurm: Arc<S>,
    /// The one Slurm job watcher.
    pub jobs: Arc<JobWatcher<S>>,
    /// The Slurm node listing.
    pub slurm_nodes: Arc<SlurmNodeCache<S>>,
    /// Every Kubernetes node.
    pub nodes: Store<Node>,
    /// The pods naming the bridge's scheduler.
    pub pods: Store<Pod>,
    /// The cached pods by the group they name (`None`: no index is kept, group pods are listed
    /// live; unit tests).
    pub pod_groups: Option<PodGroupIndex>,
    /// Owners and group objects translation reads, cached per kind on first read.
    pub objects: Arc<ObjectCaches>,
    /// Every ResourceSlice: the DRA devices of the nodes (node registration, claims).
    pub slices: Store<ResourceSlice>,
    /// PVCs, PVs and StorageClasses (empty unless [`CacheOptions::volumes`]).
    pub volumes: VolumeStores,
    /// Bumped when what placement reads of a node changes (not on heartbeats).
    pub node_generation: Arc<AtomicU64>,
}

impl<S> Clone for CacheHandles<S> {
    fn clone(&self) -> Self {
        CacheHandles {
            slurm: self.slurm.clone(),
            jobs: self.jobs.clone(),
            slurm_nodes: self.slurm_nodes.clone(),
            nodes: self.nodes.clone(),
            pods: self.pods.clone(),
            pod_groups: self.pod_groups.clone(),
            objects: self.objects.clone(),
            slices: self.slices.clone(),
            volumes: self.volumes.clone(),
            node_generation: self.node_generation.clone(),
        }
    }
}

#[cfg(test)]
impl<S: SlurmJobs + SlurmNodes> CacheHandles<S> {
    /// Handles on caches no task fills: unit tests fill `nodes` and `pods` through their
    /// writers and refresh the Slurm node listing by hand; no ResourceSlices.
    pub fn detached(slurm: Arc<S>, nodes: Store<Node>, pods: Store<Pod>) -> Self {
        CacheHandles {
            jobs: JobWatcher::new(slurm.clone(), Default::default()),
            slurm_nodes: SlurmNodeCache::new(slurm.clone(), Duration::from_secs(10)),
            slurm,
            nodes,
            pods,
            pod_groups: None,
            objects: Arc::new(ObjectCaches::none()),
            slices: reflector::store().0,
            volumes: VolumeStores::empty(),
            node_generation: Default::default(),
        }
    }
}

impl<S> CacheHandles<S> {
    /// The reader translation uses on these caches ([`reader`]).
    pub fn reader(&self, client: kube::Client) -> CachedReader {
        let pods = self.pod_groups.as_ref().map(|groups| PodReads {
            store: self.pods.clone(),
            groups: groups.clone(),
        });
        CachedReader::new(client, pods, self.objects.clone())
    }
}

/// The caches' background tasks; dropping this stops them.
pub struct CacheTasks(JoinSet<()>, Arc<ObjectCaches>);

impl CacheTasks {
    /// Stops every cache task and waits for them to end.
    pub async fn stop(mut self) {
        self.1.stop();
        self.0.abort_all();
        while self.0.join_next().await.is_some() {}
    }

    /// For a component that runs on caches of its own: stops them once the component has
    /// stopped, and makes `stopped` (the component's) say true only after both.
    pub fn stop_after(self, stopped: &mut tokio::sync::watch::Receiver<bool>) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let mut component = std::mem::replace(stopped, rx);
        tokio::spawn(async move {
            let _ = component.wait_for(|s| *s).await;
            self.stop().await;
            tx.send_replace(true);
        });
    }
}

impl<S: SlurmJobs + SlurmNodes> Caches<S> {
    /// Starts the watches and polls; they run until the returned [`CacheTasks`] is stopped or
    /// dropped. The object caches start later, per kind, on first read.
    pub fn start(client: Client, slurm: Arc<S>, opts: &CacheOptions) -> (Arc<Self>, CacheTasks) {
        let jobs = JobWatcher::new(
            slurm.clone(),
            JobWatcherConfig {
                interval: opts.job_poll_interval,
                fetch_concurrency: opts.job_reads_in_flight,
                cluster: opts.cluster.clone(),
                ..Default::default()
            },
        );
        let slurm_nodes = SlurmNodeCache::new(slurm.clone(), opts.node_poll_interval);
        let (nodes, node_writer) = reflector::store::<Node>();
        let (pods, pod_writer) = reflector::store::<Pod>();
        let (slices, slice_writer) = reflector::store::<ResourceSlice>();
        let (pvcs, pvc_writer) = reflector::store::<PersistentVolumeClaim>();
        let (pvs, pv_writer) = reflector::store::<PersistentVolume>();
        let (classes, class_writer) = reflector::store::<StorageClass>();
        let caches = Arc::new(Caches {
            handles: CacheHandles {
                slurm,
                jobs,
                slurm_nodes,
                nodes,
                pods,
                pod_groups: Some(PodGroupIndex::default()),
                objects: Arc::new(ObjectCaches::new(client.clone())),
                slices,
                volumes: VolumeStores { pvcs, pvs, classes },
                node_generation: Default::default(),
            },
            pod_changes: Fanout::default(),
            node_changes: Fanout::default(),
            slice_changes: Fanout::default(),
            volume_changes: Subscribers::default(),
            synced: tokio::sync::watch::channel(false).0,
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(caches.handles.jobs.clone().run());
        tasks.spawn(caches.handles.slurm_nodes.clone().run());
        tasks.spawn(reflect_nodes(client.clone(), node_writer, caches.clone()));
        tasks.spawn(reflect_slices(client.clone(), slice_writer, caches.clone()));
        if opts.volumes {
            let c = &caches;
            tasks.spawn(reflect_volumes(
                client.clone(),
                pvc_writer,
                c.clone(),
                claim_change,
            ));
            tasks.spawn(reflect_volumes(
                client.clone(),
                pv_writer,
                c.clone(),
                |_| VolumeChange::Pool,
            ));
            tasks.spawn(reflect_volumes(
                client.clone(),
                class_writer,
                c.clone(),
                |_| VolumeChange::Pool,
            ));
        }
        let volumes = opts.volumes;
        tasks.spawn(reflect_pods(
            client,
            opts.scheduler_name.clone(),
            pod_writer,
            caches.clone(),
        ));
        // One waiter only: a store's readiness wakes a single waiting task.
        let waiter = caches.clone();
        tasks.spawn(async move {
            waiter.handles.jobs.wait_synced().await;
            waiter.handles.slurm_nodes.wait_synced().await;
            let _ = waiter.handles.nodes.wait_until_ready().await;
            let _ = waiter.handles.pods.wait_until_ready().await;
            let _ = waiter.handles.slices.wait_until_ready().await;
            if volumes {
                let v = &waiter.handles.volumes;
                let _ = v.pvcs.wait_until_ready().await;
                let _ = v.pvs.wait_until_ready().await;
                let _ = v.classes.wait_until_ready().await;
            }
            waiter.synced.send_replace(true);
        });
        let objects = caches.handles.objects.clone();
        (caches, CacheTasks(tasks, objects))
    }

    /// Handles on the caches, for a component's context.
    pub fn handles(&self) -> CacheHandles<S> {
        self.handles.clone()
    }

    /// Waits until every cache has its first full picture: decisions need it (a restarted
    /// process must see its jobs before it submits or cancels any). Any number of tasks may wait.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Pod changes from now on.
    pub fn pod_changes(&self) -> mpsc::UnboundedReceiver<Change<Pod>> {
        self.pod_changes.subscribe()
    }

    /// Node changes from now on.
    pub fn node_changes(&self) -> mpsc::UnboundedReceiver<Change<Node>> {
        self.node_changes.subscribe()
    }

    /// ResourceSlice changes from now on.
    pub fn slice_changes(&self) -> mpsc::UnboundedReceiver<Change<ResourceSlice>> {
        self.slice_changes.subscribe()
    }

    /// PVC, PV and StorageClass changes from now on (with [`CacheOptions::volumes`]).
    pub fn volume_changes(&self) -> mpsc::UnboundedReceiver<VolumeChange> {
        self.volume_changes.subscribe()
    }
}

/// The stores of what a pod's volumes are made of.
#[derive(Clone)]
pub struct VolumeStores {
    pub pvcs: Store<PersistentVolumeClaim>,
    pub pvs: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
}

impl VolumeStores {
    /// Stores no task fills (unit tests, components that read no volumes).
    pub fn empty() -> Self {
        VolumeStores {
            pvcs: reflector::store().0,
            pvs: reflector::store().0,
            classes: reflector::store().0,
        }
    }

    /// What the volume rules read, as of now.
    pub fn snapshot(&self) -> crate::volumes::VolumeSnapshot {
        crate::volumes::VolumeSnapshot::new(
            self.pvcs.state(),
            self.pvs.state(),
            self.classes.state(),
        )
    }
}

/// What changed among the objects a pod's volumes are made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeChange {
    /// A PVC (created, bound, deleted...).
    Claim { namespace: String, name: String },
    /// A PV or a StorageClass: any waiting pod with claims may be affected.
    Pool,
}

fn claim_change(pvc: &PersistentVolumeClaim) -> VolumeChange {
    VolumeChange::Claim {
        namespace: pvc.metadata.namespace.clone().unwrap_or_default(),
        name: pvc.metadata.name.clone().unwrap_or_default(),
    }
}

/// A reflector of one volume kind; each event is told as `change(object)`. Managed fields are
/// dropped as for pods.
async fn reflect_volumes<K, S>(
    client: Client,
    writer: reflector::store::Writer<K>,
    caches: Arc<Caches<S>>,
    change: fn(&K) -> VolumeChange,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            match &event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                    caches.volume_changes.send(change(o))
                }
                Ok(watcher::Event::InitDone) => caches.volume_changes.send(VolumeChange::Pool),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, kind = K::kind(&()).as_ref(), "watching volumes failed; retrying"),
            }
            futures::future::ready(())
        })
        .await
}

/// The node reflector; only what placement reads (not heartbeats) bumps the node generation,
/// which invalidates cached placements.
async fn reflect_nodes<S>(
    client: Client,
    writer: reflector::store::Writer<Node>,
    caches: Arc<Caches<S>>,
) {
    let nodes_api: Api<Node> = Api::all(client);
    let mut fingerprints: HashMap<String, u64> = Default::default();
    let mut forwarder = Forwarder::default();
    watcher(nodes_api, watcher::Config::default())
        .default_backoff()
        .modify(crate::k8s::trim::node)
        .reflect(writer)
        .for_each(move |event| {
            let changed = match &event {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let fp = placement_fingerprint(n);
                    fingerprints.insert(name, fp) != Some(fp)
                }
                Ok(watcher::Event::Delete(n)) => {
                    fingerprints.remove(n.metadata.name.as_deref().unwrap_or_default());
                    true
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "watching nodes failed; retrying");
                    false
                }
            };
            if changed {
                caches
                    .handles
                    .node_generation
                    .fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(event) = &event {
                forwarder.forward(&caches.node_changes, &caches.handles.nodes, event);
            }
            futures::future::ready(())
        })
        .await
}

/// The reflector of the pods naming the bridge's scheduler.
async fn reflect_pods<S>(
    client: Client,
    scheduler_name: String,
    writer: reflector::store::Writer<Pod>,
    caches: Arc<Caches<S>>,
) {
    let pods_api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("spec.schedulerName={scheduler_name}"));
    let mut forwarder = Forwarder::default();
    // No trimming pass: the cached pod decodes without managed fields and last-applied
    // annotation (`k8s::slim_meta`).
    watcher(pods_api, cfg)
        .default_backoff()
        .reflect(writer)
        .for_each(move |event| {
            match &event {
                Ok(event) => {
                    if let watcher::Event::Apply(p) = event {
                        // When the watch delivered the change to this process (bench phases).
                        tracing::trace!(pod = %crate::k8s::pod_key(p), rv = p.metadata.resource_version.as_deref().unwrap_or_default(), "pod watch event");
                    }
                    // The group index first: a pass a change starts reads its group through it.
                    if let Some(index) = &caches.handles.pod_groups {
                        index.follow(&caches.handles.pods, event);
                    }
                    forwarder.forward(&caches.pod_changes, &caches.handles.pods, event)
                }
                Err(e) => tracing::warn!(error = %e, "watching pods failed; retrying"),
            }
            futures::future::ready(())
        })
        .await
}

/// The ResourceSlice reflector (resource.k8s.io/v1). Managed fields are dropped as for pods.
async fn reflect_slices<S>(
    client: Client,
    writer: reflector::store::Writer<ResourceSlice>,
    caches: Arc<Caches<S>>,
) {
    let api: Api<ResourceSlice> = Api::all(client);
    let mut forwarder = Forwarder::default();
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|s: &mut ResourceSlice| s.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            match &event {
                Ok(event) => {
                    forwarder.forward(&caches.slice_changes, &caches.handles.slices, event)
                }
                Err(e) => tracing::warn!(error = %e, "watching ResourceSlices failed; retrying"),
            }
            futures::future::ready(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::slim_pod::Pod;

    fn pod(name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
        }))
        .unwrap()
    }

    /// Issue 21: a relist's objects reached subscribers before the store held them, so the pass
    /// they started found no pod. Every change a subscriber sees must be in the store already.
    #[test]
    fn relisted_objects_are_told_only_once_the_store_holds_them() {
        let (store, mut writer) = reflector::store::<Pod>();
        let fanout: Fanout<Pod> = Fanout::default();
        let mut rx = fanout.subscribe();
        let mut forwarder = Forwarder::default();
        let events = [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a")),
            watcher::Event::InitApply(pod("b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(pod("c")),
        ];
        let mut told = Vec::new();
        for event in &events {
            // As `reflect` does: the store first, then the event downstream.
            writer.apply_watcher_event(event);
            forwarder.forward(&fanout, &store, event);
            while let Ok(change) = rx.try_recv() {
                if let Change::Applied(p) = &change {
                    let name = p.metadata.name.clone().unwrap();
                    let held = store.get(&ObjectRef::new(&name).within("ns"));
                    assert!(held.is_some(), "{name} was told before the store held it");
                    // The store's own object, not a copy (memory at relists).
                    assert!(Arc::ptr_eq(p, &held.unwrap()), "{name} was copied");
                    told.push(name);
                } else {
                    told.push("<relisted>".into());
                }
            }
        }
        assert_eq!(told, ["a", "b", "<relisted>", "c"]);
    }
}
