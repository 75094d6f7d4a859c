//! Caches of the objects translation reads by name (a pod's owners, the groups it names): one
//! reflector per kind, cluster-wide, started the first time the kind is read. What a kind
//! keeps is what translation reads of it ([`crate::workload::read_fields`]): kinds read for
//! their metadata alone are watched with kube-runtime's `metadata_watcher` (the API server sends
//! only metadata); the few whose spec is read (Job, LeaderWorkerSet, both PodGroups) with a full
//! watch whose objects are trimmed before the store keeps them.
//!
//! A kind's cache answers only once its first list is in; a miss is no answer (the object may
//! be newer than the cache): the reader then reads live. A kind the bridge may not list or watch
//! (RBAC) stays uncached and is read live, as before.

use crate::sync::MutexExt;
use crate::workload::ObjectRef;
use crate::workload::kube_reader::KubeReader;
use crate::workload::read_fields::{keep_read_fields, reads_data, trim_metadata};
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, DynamicObject, TypeMeta};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio::task::JoinSet;

/// The cache of one kind.
struct KindCache {
    ar: ApiResource,
    store: Store<DynamicObject>,
    state: AtomicU8,
}

const STARTING: u8 = 0;
const READY: u8 = 1;
/// Not listable or watchable by the bridge: reads stay live.
const UNAVAILABLE: u8 = 2;

/// See the module doc. Dropping it stops its tasks.
pub struct ObjectCaches {
    client: Option<Client>,
    kinds: Mutex<HashMap<(String, String), Arc<KindCache>>>,
    tasks: Mutex<JoinSet<()>>,
    stopped: AtomicBool,
}

impl ObjectCaches {
    /// Caches on `client`, none started yet.
    pub fn new(client: Client) -> Self {
        ObjectCaches {
            client: Some(client),
            ..Self::none()
        }
    }

    /// No caches: every read is live (unit tests on a fake API server).
    pub fn none() -> Self {
        ObjectCaches {
            client: None,
            kinds: Default::default(),
            tasks: Mutex::new(JoinSet::new()),
            stopped: AtomicBool::new(false),
        }
    }

    /// The cached object; `None` when the cache cannot tell (kind not cached or not synced yet,
    /// or the object not in it). The first read of a kind starts its cache.
    pub async fn get(&self, live: &KubeReader, object: &ObjectRef) -> Option<Arc<DynamicObject>> {
        let kind = self.kind(live, object).await?;
        if kind.state.load(Ordering::Acquire) != READY {
            return None;
        }
        let key =
            reflector::ObjectRef::new_with(&object.name, kind.ar.clone()).within(&object.namespace);
        kind.store.get(&key)
    }

    /// Kinds whose cache answers reads (for tests and logs).
    pub fn ready_kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .kinds
            .locked()
            .iter()
            .filter(|(_, k)| k.state.load(Ordering::Acquire) == READY)
            .map(|((a, k), _)| format!("{k}.{a}"))
            .collect();
        out.sort();
        out
    }

    /// Stops every cache task; reads are live from then on.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.tasks.locked().abort_all();
        self.kinds.locked().clear();
    }

    async fn kind(&self, live: &KubeReader, object: &ObjectRef) -> Option<Arc<KindCache>> {
        let client = self.client.as_ref()?;
        if self.stopped.load(Ordering::Acquire) {
            return None;
        }
        let id = (object.api_version.clone(), object.kind.clone());
        if let Some(k) = self.kinds.locked().get(&id) {
            return Some(k.clone());
        }
        // An unserved kind is not remembered: it may be installed later (the read says NoKind).
        let ar = live
            .api_resource(&object.api_version, &object.kind)
            .await
            .ok()?;
        let mut kinds = self.kinds.locked();
        if let Some(k) = kinds.get(&id) {
            return Some(k.clone());
        }
        let writer = Writer::<DynamicObject>::new(ar.clone());
        let kind = Arc::new(KindCache {
            ar: ar.clone(),
            store: writer.as_reader(),
            state: AtomicU8::new(STARTING),
        });
        kinds.insert(id, kind.clone());
        tracing::debug!(kind = %object.kind, api_version = %object.api_version, "caching a kind translation reads");
        self.tasks
            .locked()
            .spawn(reflect_kind(client.clone(), kind.clone(), writer));
        Some(kind)
    }
}

/// `event` with each object mapped through `f`.
fn map_event<A, B>(event: watcher::Event<A>, mut f: impl FnMut(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// True for a watch error that retrying does not cure: no permission, or the kind went away.
fn is_final(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => {
            matches!(s.code, 403..=405)
        }
        _ => false,
    }
}

/// Keeps `kind`'s store in step with the API server until aborted, or until a final error.
async fn reflect_kind(client: Client, kind: Arc<KindCache>, mut writer: Writer<DynamicObject>) {
    let api: Api<DynamicObject> = Api::all_with(client, &kind.ar);
    let types = TypeMeta {
        api_version: kind.ar.api_version.clone(),
        kind: kind.ar.kind.clone(),
    };
    let full = reads_data(&kind.ar.api_version, &kind.ar.kind);
    let mut events = if full {
        let types = types.clone();
        watcher(api, watcher::Config::default())
            .default_backoff()
            .map(move |r| {
                r.map(|e| {
                    map_event(e, |mut o: DynamicObject| {
                        o.types = Some(types.clone());
                        keep_read_fields(&mut o);
                        o
                    })
                })
            })
            .boxed()
    } else {
        let meta: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(api.into_client(), &kind.ar);
        watcher(meta, watcher::Config::default())
            .default_backoff()
            .map(move |r| {
                r.map(|e| {
                    map_event(e, |mut m| {
                        trim_metadata(&mut m.metadata);
                        DynamicObject {
                            types: Some(types.clone()),
                            metadata: m.metadata,
                            data: crate::workload::read_fields::no_data(),
                        }
                    })
                })
            })
            .boxed()
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                writer.apply_watcher_event(&event);
                if matches!(event, watcher::Event::InitDone) {
                    kind.state.store(READY, Ordering::Release);
                }
            }
            Err(e) if is_final(&e) => {
                tracing::warn!(kind = %kind.ar.kind, api_version = %kind.ar.api_version, error = %e,
                    "cannot list or watch this kind; translation reads it live");
                kind.state.store(UNAVAILABLE, Ordering::Release);
                return;
            }
            Err(e) => {
                tracing::warn!(kind = %kind.ar.kind, error = %e, "watching a kind translation reads failed; retrying")
            }
        }
    }
}
