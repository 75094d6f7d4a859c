//! [`WorkloadReader`] on the shared caches, for the scheduler's passes: a group's pods from the
//! pod store through the group index ([`super::pod_groups`]), owners and group objects from the
//! per-kind object caches ([`super::objects`]), so a pass in the steady state makes no request.
//! What the caches cannot answer is read live ([`KubeReader`]): a kind not cached (yet), an
//! object newer than its cache, a pod of another scheduler named as an owner.
//!
//! Group members are the pods the pod cache holds, i.e. those naming the bridge's scheduler (a
//! live LIST also returned pods of other schedulers, which the bridge never binds).

use super::objects::ObjectCaches;
use super::pod_groups::{GROUP_LABELS, Membership, PodGroupIndex};
use crate::k8s::slim_pod::Pod;
use crate::workload::kube_reader::KubeReader;
use crate::workload::reader::labels_match;
use crate::workload::{ObjectRef, ReadError, WorkloadReader};
use kube::core::{DynamicObject, TypeMeta};
use kube::runtime::reflector::{self, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The pod store and its group index.
#[derive(Clone)]
pub struct PodReads {
    /// The pods naming the bridge's scheduler.
    pub store: Store<Pod>,
    /// Their groups.
    pub groups: PodGroupIndex,
}

/// See the module doc.
pub struct CachedReader {
    live: KubeReader,
    pods: Option<PodReads>,
    objects: Arc<ObjectCaches>,
    cached: AtomicU64,
    live_reads: AtomicU64,
    drivers: crate::dra::GresDrivers,
}

impl CachedReader {
    /// A reader on the caches; `pods: None` lists pods live (unit tests without a pod index).
    pub fn new(client: kube::Client, pods: Option<PodReads>, objects: Arc<ObjectCaches>) -> Self {
        CachedReader {
            live: KubeReader::new(client),
            pods,
            objects,
            cached: AtomicU64::new(0),
            drivers: crate::dra::GresDrivers::builtin(),
            live_reads: AtomicU64::new(0),
        }
    }

    /// The same, its translations' DRA classes of `drivers` GRES (the config's
    /// `draDeviceDrivers`).
    pub fn with_gres_drivers(mut self, drivers: crate::dra::GresDrivers) -> Self {
        self.drivers = drivers;
        self
    }

    /// Reads answered from the caches so far.
    pub fn cached_reads(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
    }

    /// Reads sent to the API server so far.
    pub fn live_reads(&self) -> u64 {
        self.live_reads.load(Ordering::Relaxed)
    }

    fn hit<T>(&self, t: T) -> T {
        self.cached.fetch_add(1, Ordering::Relaxed);
        t
    }

    fn miss(&self) {
        self.live_reads.fetch_add(1, Ordering::Relaxed);
    }

    fn cached_pods(reads: &PodReads, namespace: &str, names: Vec<String>) -> Vec<Arc<Pod>> {
        names
            .iter()
            .filter_map(|n| {
                reads
                    .store
                    .get(&reflector::ObjectRef::new(n).within(namespace))
            })
            .collect()
    }
}

/// A cached pod as the owner walk reads it: its metadata.
fn pod_as_owner(pod: &Pod) -> DynamicObject {
    DynamicObject {
        types: Some(TypeMeta {
            api_version: "v1".into(),
            kind: "Pod".into(),
        }),
        metadata: pod.metadata.clone(),
        data: crate::workload::read_fields::no_data(),
    }
}

impl WorkloadReader for CachedReader {
    fn gres_drivers(&self) -> crate::dra::GresDrivers {
        self.drivers.clone()
    }

    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        if object.is("v1", "Pod") {
            if let Some(reads) = &self.pods
                && let Some(p) = reads
                    .store
                    .get(&reflector::ObjectRef::new(&object.name).within(&object.namespace))
            {
                return Ok(self.hit(pod_as_owner(&p)));
            }
        } else if let Some(o) = self.objects.get(&self.live, object).await {
            return Ok(self.hit((*o).clone()));
        }
        self.miss();
        self.live.get(object).await
    }

    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        let Some(reads) = &self.pods else {
            self.miss();
            return self.live.list_pods(namespace, labels).await;
        };
        let indexed = labels
            .iter()
            .find_map(|(k, v)| GROUP_LABELS.iter().find(|g| **g == k).map(|g| (*g, v)));
        let candidates = match indexed {
            Some((key, value)) => {
                let names = reads
                    .groups
                    .members(namespace, &Membership::Label(key, value.clone()));
                Self::cached_pods(reads, namespace, names)
            }
            // No group label: a scan of the store (translation asks for none such).
            None => reads
                .store
                .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace)),
        };
        Ok(self.hit(
            candidates
                .into_iter()
                .filter(|p| labels_match(p.metadata.labels.as_ref(), labels))
                .map(|p| (*p).clone())
                .collect(),
        ))
    }

    async fn list_scheduling_group(
        &self,
        namespace: &str,
        group: &str,
    ) -> Result<Vec<Pod>, ReadError> {
        let Some(reads) = &self.pods else {
            self.miss();
            let listed = self.live.list_pods(namespace, &BTreeMap::new()).await?;
            return Ok(listed
                .into_iter()
                .filter(|p| crate::workload::kinds::podgroup::pod_group_name(p) == Some(group))
                .collect());
        };
        let names = reads
            .groups
            .members(namespace, &Membership::SchedulingGroup(group.to_string()));
        Ok(self.hit(
            Self::cached_pods(reads, namespace, names)
                .into_iter()
                .map(|p| (*p).clone())
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduler spawns translations on tokio: the future must be `Send`.
    #[test]
    fn translate_future_is_send() {
        fn is_send<T: Send>(_: &T) {}
        fn check(reader: &CachedReader, pod: &Pod) {
            let f = crate::workload::translate(reader, pod);
            is_send(&f);
        }
        let _ = check;
    }
}
