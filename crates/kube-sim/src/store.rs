//! The object store: JSON objects keyed by (type, namespace, name), one global resourceVersion
//! counter (as etcd), a bounded event history shared by watchers, and the deletion machinery that
//! must run atomically with writes (finalizers, graceful pod deletion, ownerReference garbage
//! collection, namespace termination).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::meta;
use crate::registry::{Registry, ResourceType};

/// A stored object: the JSON value, its serialised bytes (made once) and its resourceVersion.
#[derive(Debug, Clone)]
pub struct Obj {
    /// The object, with `metadata.resourceVersion` set.
    pub value: Arc<Value>,
    /// `value` serialised as JSON.
    pub bytes: Bytes,
    /// The object's resourceVersion.
    pub rv: u64,
}

impl Obj {
    fn new(mut value: Value, rv: u64) -> Self {
        meta::meta_mut(&mut value).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        Obj {
            value: Arc::new(value),
            bytes,
            rv,
        }
    }
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and sent to watchers.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// Type id (index in the registry).
    pub tid: usize,
    /// Namespace of the object ("" when cluster scoped).
    pub ns: String,
    /// The object after the change (the last state for a deletion).
    pub obj: EvObj,
    /// The object before the change, for MODIFIED (selector transitions).
    pub old: Option<EvObj>,
}

/// An object version as kept in the event history: its bytes, and its parsed value only
/// while that version is the stored one (a superseded version is parsed again when a
/// selector needs it), so the history costs little more than the bytes.
#[derive(Debug, Clone)]
pub struct EvObj {
    /// The version serialised as JSON.
    pub bytes: Bytes,
    /// Its resourceVersion.
    pub rv: u64,
    value: Weak<Value>,
}

impl EvObj {
    /// The parsed object.
    pub fn value(&self) -> Arc<Value> {
        self.value
            .upgrade()
            .unwrap_or_else(|| Arc::new(serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)))
    }
}

impl From<&Obj> for EvObj {
    fn from(o: &Obj) -> Self {
        EvObj {
            bytes: o.bytes.clone(),
            rv: o.rv,
            value: Arc::downgrade(&o.value),
        }
    }
}

type Key = (String, String);
type Ref = (usize, String, String);

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `propagationPolicy` (`Orphan`, `Background`, `Foreground`).
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub pre_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub pre_rv: Option<String>,
}

struct Inner {
    rv: u64,
    tables: Vec<BTreeMap<Key, Obj>>,
    history: VecDeque<Arc<Event>>,
    /// owner uid -> dependents
    dependents: HashMap<String, BTreeSet<Ref>>,
    /// uid -> object
    uids: HashMap<String, Ref>,
}

/// The store; cheap to share behind an `Arc`.
pub struct Store {
    /// The registered types; a type's index is its id. Types are added at run time when a
    /// CustomResourceDefinition is created.
    registry: RwLock<Registry>,
    inner: RwLock<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    history_limit: usize,
}

/// A receiver of every event published after it was made.
pub type Subscription = broadcast::Receiver<Arc<Event>>;

/// A consistent read view.
pub struct ReadView<'a>(RwLockReadGuard<'a, Inner>);

impl ReadView<'_> {
    /// Current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.0.rv
    }

    /// One object.
    pub fn get(&self, tid: usize, ns: &str, name: &str) -> Option<&Obj> {
        self.0
            .tables
            .get(tid)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of a type, in key order, optionally in one namespace, starting after `after`.
    pub fn iter<'b>(
        &'b self,
        tid: usize,
        ns: Option<&'b str>,
        after: Option<&'b (String, String)>,
    ) -> impl Iterator<Item = (&'b Key, &'b Obj)> + 'b {
        use std::ops::Bound;
        let lower = match (after, ns) {
            (Some(a), _) => Bound::Excluded(a.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.0
            .tables
            .get(tid)
            .into_iter()
            .flat_map(move |table| table.range((lower.clone(), Bound::Unbounded)))
            .take_while(move |(k, _)| ns.is_none_or(|ns| k.0 == ns))
    }

    /// Subscribe to events after `rv`, with the backlog from the history; `Err` when `rv` is
    /// older than the history kept.
    pub fn subscribe_from(
        &self,
        store: &Store,
        rv: u64,
    ) -> Result<(Vec<Arc<Event>>, Subscription), ApiError> {
        let inner = &self.0;
        let oldest = inner.history.front().map(|e| e.rv).unwrap_or(inner.rv + 1);
        if rv + 1 < oldest && rv < inner.rv {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                oldest.saturating_sub(1)
            )));
        }
        let skip = inner.history.partition_point(|e| e.rv <= rv);
        let backlog = inner.history.iter().skip(skip).cloned().collect();
        Ok((backlog, store.tx.subscribe()))
    }

    /// Subscribe to events after the current state.
    pub fn subscribe(&self, store: &Store) -> Subscription {
        store.tx.subscribe()
    }
}

impl Store {
    /// An empty store over `registry`, keeping `history_limit` events for watch resumption.
    pub fn new(registry: Registry, history_limit: usize) -> Self {
        let n = registry.types().len();
        let (tx, _) = broadcast::channel(history_limit.max(16));
        Store {
            registry: RwLock::new(registry),
            inner: RwLock::new(Inner {
                rv: 1,
                tables: vec![BTreeMap::new(); n],
                history: VecDeque::new(),
                dependents: HashMap::new(),
                uids: HashMap::new(),
            }),
            tx,
            history_limit: history_limit.max(1),
        }
    }

    /// A read view.
    pub fn read(&self) -> ReadView<'_> {
        ReadView(self.inner.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Run `f` with exclusive access; events are published in order as they are made.
    pub fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        let guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let mut txn = Txn {
            store: self,
            inner: guard,
        };
        f(&mut txn)
    }

    /// The registry.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a type at run time (or replace the one at the same path).
    pub fn register(&self, t: ResourceType) {
        self.registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .add(t);
    }

    /// The registered type with id `tid`.
    pub fn rt(&self, tid: usize) -> Arc<ResourceType> {
        self.registry().types()[tid].clone()
    }

    /// Type id of a (group, plural) pair in its first registered version.
    pub fn tid(&self, group: &str, plural: &str) -> Option<usize> {
        self.registry()
            .types()
            .iter()
            .position(|t| t.group == group && t.plural == plural)
    }
}

/// Exclusive access to the store.
pub struct Txn<'a> {
    store: &'a Store,
    inner: RwLockWriteGuard<'a, Inner>,
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(|o| o.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(|u| u.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn is_pod(rt: &ResourceType) -> bool {
    rt.is("", "pods")
}

impl Txn<'_> {
    /// The store.
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.inner.rv
    }

    /// One object.
    pub fn get(&self, tid: usize, ns: &str, name: &str) -> Option<Obj> {
        self.inner
            .tables
            .get(tid)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    fn publish(&mut self, kind: EventType, tid: usize, ns: &str, obj: Obj, old: Option<Obj>) {
        let ev = Arc::new(Event {
            rv: obj.rv,
            kind,
            tid,
            ns: ns.to_string(),
            obj: EvObj::from(&obj),
            old: old.as_ref().map(EvObj::from),
        });
        let inner = &mut *self.inner;
        inner.history.push_back(ev.clone());
        while inner.history.len() > self.store.history_limit {
            inner.history.pop_front();
        }
        let _ = self.store.tx.send(ev);
    }

    fn index(
        &mut self,
        tid: usize,
        ns: &str,
        name: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let r: Ref = (tid, ns.to_string(), name.to_string());
        let old_o = old.map(owner_uids).unwrap_or_default();
        let new_o = new.map(owner_uids).unwrap_or_default();
        if old_o != new_o {
            for u in &old_o {
                if let Some(s) = self.inner.dependents.get_mut(u) {
                    s.remove(&r);
                    if s.is_empty() {
                        self.inner.dependents.remove(u);
                    }
                }
            }
            for u in new_o {
                self.inner
                    .dependents
                    .entry(u)
                    .or_default()
                    .insert(r.clone());
            }
        }
        match (old, new) {
            (Some(o), None) => {
                self.inner.uids.remove(meta::meta_str(o, "uid"));
            }
            (None, Some(n)) => {
                self.inner
                    .uids
                    .insert(meta::meta_str(n, "uid").to_string(), r);
            }
            _ => {}
        }
    }

    /// Insert a new object (the caller checked it does not exist). Returns the stored object.
    pub fn insert(&mut self, tid: usize, value: Value) -> Obj {
        let ns = meta::meta_str(&value, "namespace").to_string();
        let name = meta::meta_str(&value, "name").to_string();
        self.inner.rv += 1;
        while self.inner.tables.len() <= tid {
            self.inner.tables.push(BTreeMap::new());
        }
        let obj = Obj::new(value, self.inner.rv);
        self.index(tid, &ns, &name, None, Some(&obj.value));
        self.inner.tables[tid].insert((ns.clone(), name), obj.clone());
        self.publish(EventType::Added, tid, &ns, obj.clone(), None);
        obj
    }

    /// Replace an existing object with `value` (a no-op write is not stored and makes no event).
    /// An object being deleted whose finalizers are now empty (and no grace period pending) is
    /// removed. Returns the object as it now is (the last state when removed).
    pub fn replace(&mut self, tid: usize, value: Value) -> Obj {
        let ns = meta::meta_str(&value, "namespace").to_string();
        let name = meta::meta_str(&value, "name").to_string();
        let Some(old) = self.get(tid, &ns, &name) else {
            return self.insert(tid, value);
        };
        let mut value = value;
        meta::meta_mut(&mut value).insert("resourceVersion".into(), json!(old.rv.to_string()));
        if value == *old.value {
            return old;
        }
        let deleting = value
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some();
        let grace = value
            .get("metadata")
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(|g| g.as_i64())
            .unwrap_or(0);
        if deleting
            && meta::finalizers(&value).is_empty()
            && grace == 0
            && !self.store.rt(tid).is("", "namespaces")
        {
            self.inner.rv += 1;
            let obj = Obj::new(value, self.inner.rv);
            self.inner.tables[tid].insert((ns.clone(), name.clone()), obj);
            return self.remove_now(tid, &ns, &name, None);
        }
        self.inner.rv += 1;
        let obj = Obj::new(value, self.inner.rv);
        self.index(tid, &ns, &name, Some(&old.value), Some(&obj.value));
        self.inner.tables[tid].insert((ns.clone(), name), obj.clone());
        self.publish(EventType::Modified, tid, &ns, obj.clone(), Some(old));
        obj
    }

    /// Remove an object at once and run what follows a removal (garbage collection of its
    /// dependents with `policy`, foreground owners, namespace termination).
    fn remove_now(&mut self, tid: usize, ns: &str, name: &str, policy: Option<&str>) -> Obj {
        let key = (ns.to_string(), name.to_string());
        let Some(old) = self.inner.tables.get_mut(tid).and_then(|t| t.remove(&key)) else {
            return Obj::new(Value::Null, self.inner.rv);
        };
        self.inner.rv += 1;
        let last = Obj::new((*old.value).clone(), self.inner.rv);
        self.index(tid, ns, name, Some(&old.value), None);
        self.publish(EventType::Deleted, tid, ns, last.clone(), None);
        let uid = meta::meta_str(&last.value, "uid").to_string();
        let policy = policy.unwrap_or("Background");
        self.collect_dependents(&uid, policy);
        for owner in owner_uids(&last.value) {
            self.check_foreground_owner(&owner);
        }
        if !ns.is_empty() {
            self.check_namespace_done(ns);
        }
        last
    }

    /// Background: delete dependents that have no other live owner, strip the reference from
    /// the others. Orphan: strip the reference everywhere.
    fn collect_dependents(&mut self, owner_uid: &str, policy: &str) {
        let Some(deps) = self.inner.dependents.get(owner_uid).cloned() else {
            return;
        };
        for (tid, ns, name) in deps {
            let Some(dep) = self.get(tid, &ns, &name) else {
                continue;
            };
            let others_alive = owner_uids(&dep.value)
                .iter()
                .any(|u| u != owner_uid && self.inner.uids.contains_key(u));
            if policy == "Orphan" || others_alive {
                let mut v = (*dep.value).clone();
                if let Some(refs) = meta::meta_mut(&mut v)
                    .get_mut("ownerReferences")
                    .and_then(|r| r.as_array_mut())
                {
                    refs.retain(|r| r.get("uid").and_then(|u| u.as_str()) != Some(owner_uid));
                    if refs.is_empty() {
                        meta::meta_mut(&mut v).remove("ownerReferences");
                    }
                }
                self.replace(tid, v);
            } else {
                let _ = self.delete(tid, &ns, &name, &DeleteOpts::default());
            }
        }
    }

    fn check_foreground_owner(&mut self, owner_uid: &str) {
        let Some((tid, ns, name)) = self.inner.uids.get(owner_uid).cloned() else {
            return;
        };
        let Some(owner) = self.get(tid, &ns, &name) else {
            return;
        };
        let fins = meta::finalizers(&owner.value);
        if !fins.iter().any(|f| f == "foregroundDeletion") {
            return;
        }
        if self
            .inner
            .dependents
            .get(owner_uid)
            .is_some_and(|d| !d.is_empty())
        {
            return;
        }
        let mut v = (*owner.value).clone();
        let rest: Vec<Value> = fins
            .into_iter()
            .filter(|f| f != "foregroundDeletion")
            .map(Value::String)
            .collect();
        if rest.is_empty() {
            meta::meta_mut(&mut v).remove("finalizers");
        } else {
            meta::meta_mut(&mut v).insert("finalizers".into(), Value::Array(rest));
        }
        self.replace(tid, v);
    }

    fn namespace_tid(&self) -> Option<usize> {
        self.store.tid("", "namespaces")
    }

    fn namespace_empty(&self, ns: &str) -> bool {
        self.inner.tables.iter().enumerate().all(|(tid, t)| {
            !self.store.rt(tid).namespaced
                || t.range((ns.to_string(), String::new())..)
                    .next()
                    .is_none_or(|(k, _)| k.0 != ns)
        })
    }

    fn check_namespace_done(&mut self, ns: &str) {
        let Some(ntid) = self.namespace_tid() else {
            return;
        };
        let Some(nso) = self.get(ntid, "", ns) else {
            return;
        };
        if nso
            .value
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_none()
        {
            return;
        }
        if self.namespace_empty(ns) && meta::finalizers(&nso.value).is_empty() {
            self.remove_now(ntid, "", ns, None);
        }
    }

    /// Whether namespace `ns` exists, and whether it is terminating.
    pub fn namespace_state(&self, ns: &str) -> Option<bool> {
        let ntid = self.namespace_tid()?;
        let o = self.get(ntid, "", ns)?;
        Some(
            o.value
                .get("metadata")
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some(),
        )
    }

    /// Delete an object as the real server does. Returns the object as it now is: marked with a
    /// deletionTimestamp when finalizers or a pod's grace period hold it, or its last state.
    pub fn delete(
        &mut self,
        tid: usize,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<(Obj, bool), ApiError> {
        let rt = self.store.rt(tid).clone();
        let cur = self
            .get(tid, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt, name))?;
        if let Some(u) = &opts.pre_uid
            && u != meta::meta_str(&cur.value, "uid")
        {
            return Err(ApiError::conflict(
                &rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {u}, UID in object meta: {}",
                    meta::meta_str(&cur.value, "uid")
                ),
            ));
        }
        if let Some(r) = &opts.pre_rv
            && *r != cur.rv.to_string()
        {
            return Err(ApiError::conflict(
                &rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {}",
                    cur.rv
                ),
            ));
        }
        let policy = opts.propagation.clone().unwrap_or_else(|| {
            if rt.is("batch", "jobs") {
                "Orphan"
            } else {
                "Background"
            }
            .to_string()
        });
        // Graceful deletion of pods bound to a node and not yet terminal.
        let grace = if is_pod(&rt) {
            let bound = meta::path(&cur.value, "spec.nodeName")
                .and_then(|v| v.as_str())
                .is_some_and(|s| !s.is_empty());
            let phase = meta::path(&cur.value, "status.phase")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            if !bound || phase == "Succeeded" || phase == "Failed" {
                0
            } else {
                opts.grace
                    .or_else(|| {
                        meta::path(&cur.value, "spec.terminationGracePeriodSeconds")
                            .and_then(|g| g.as_i64())
                    })
                    .unwrap_or(30)
                    .max(0)
            }
        } else {
            0
        };
        let mut fins = meta::finalizers(&cur.value);
        let deleting = cur
            .value
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some();
        if policy == "Orphan" {
            self.collect_dependents(meta::meta_str(&cur.value, "uid"), "Orphan");
        }
        let cur = self
            .get(tid, ns, name)
            .ok_or_else(|| ApiError::not_found(&rt, name))?;
        if policy == "Foreground"
            && !fins.iter().any(|f| f == "foregroundDeletion")
            && self
                .inner
                .dependents
                .get(meta::meta_str(&cur.value, "uid"))
                .is_some_and(|d| !d.is_empty())
        {
            fins.push("foregroundDeletion".into());
        }
        if fins.is_empty() && grace == 0 && !rt.is("", "namespaces") {
            let last = self.remove_now(tid, ns, name, Some(&policy));
            return Ok((last, true));
        }
        // Mark for deletion.
        let mut v = (*cur.value).clone();
        let cur_grace = cur
            .value
            .get("metadata")
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(|g| g.as_i64());
        let m = meta::meta_mut(&mut v);
        if !deleting || cur_grace.is_some_and(|g| grace < g) {
            m.insert(
                "deletionTimestamp".into(),
                json!(meta::rfc3339(
                    SystemTime::now() + Duration::from_secs(grace as u64)
                )),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if !deleting {
                let g = m.get("generation").and_then(|g| g.as_i64()).unwrap_or(0);
                m.insert("generation".into(), json!(g + 1));
            }
        }
        if fins.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(fins));
        }
        if rt.is("", "namespaces") {
            v["status"]["phase"] = json!("Terminating");
        }
        let obj = self.replace(tid, v);
        let uid = meta::meta_str(&cur.value, "uid").to_string();
        if policy == "Foreground" {
            let deps: Vec<Ref> = self
                .inner
                .dependents
                .get(&uid)
                .map(|d| d.iter().cloned().collect())
                .unwrap_or_default();
            for (dt, dns, dn) in deps {
                let _ = self.delete(
                    dt,
                    &dns,
                    &dn,
                    &DeleteOpts {
                        propagation: Some("Foreground".into()),
                        ..Default::default()
                    },
                );
            }
            self.check_foreground_owner(&uid);
        }
        if rt.is("", "namespaces") {
            self.empty_namespace(name);
        }
        let removed = self.get(tid, ns, name).is_none();
        Ok((obj, removed))
    }

    /// Delete every object in namespace `ns` (namespace termination).
    fn empty_namespace(&mut self, ns: &str) {
        for tid in 0..self.inner.tables.len() {
            if !self.store.rt(tid).namespaced {
                continue;
            }
            let names: Vec<String> = self.inner.tables[tid]
                .range((ns.to_string(), String::new())..)
                .take_while(|(k, _)| k.0 == ns)
                .map(|(k, _)| k.1.clone())
                .collect();
            for n in names {
                let _ = self.delete(tid, ns, &n, &DeleteOpts::default());
            }
        }
        self.check_namespace_done(ns);
    }
}
