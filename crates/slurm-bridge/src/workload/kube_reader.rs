//! [`WorkloadReader`] against a real API server (kube-rs), for the scheduler.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::k8s::slim_pod::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use super::reader::{ObjectRef, ReadError, WorkloadReader};

/// Plurals of the kinds the bridge reads, so they need no discovery round trip.
const KNOWN_PLURALS: [(&str, &str, &str); 14] = [
    ("v1", "Pod", "pods"),
    ("batch/v1", "Job", "jobs"),
    ("batch/v1", "CronJob", "cronjobs"),
    ("apps/v1", "ReplicaSet", "replicasets"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("apps/v1", "Deployment", "deployments"),
    ("apps/v1", "DaemonSet", "daemonsets"),
    ("v1", "ReplicationController", "replicationcontrollers"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
    (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "leaderworkersets",
    ),
    ("scheduling.k8s.io/v1alpha2", "PodGroup", "podgroups"),
    ("scheduling.k8s.io/v1alpha2", "Workload", "workloads"),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups"),
    (
        "scheduling.x-k8s.io/v1alpha1",
        "ElasticQuota",
        "elasticquotas",
    ),
];

/// Reads through a kube-rs client; other kinds are resolved by API discovery once.
pub struct KubeReader {
    client: Client,
    resources: Mutex<HashMap<(String, String), ApiResource>>,
}

impl KubeReader {
    /// A reader on this client.
    pub fn new(client: Client) -> Self {
        KubeReader {
            client,
            resources: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, api_version: &str, kind: &str) -> Option<ApiResource> {
        self.resources
            .lock()
            .ok()?
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    /// The API resource of `api_version`/`kind`: from the built-in table, else from discovery
    /// (once per kind).
    pub async fn api_resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource, ReadError> {
        if let Some(ar) = self.cached(api_version, kind) {
            return Ok(ar);
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = if let Some((_, _, plural)) = KNOWN_PLURALS
            .iter()
            .find(|(a, k, _)| *a == api_version && *k == kind)
        {
            ApiResource::from_gvk_with_plural(&gvk, plural)
        } else {
            kube::discovery::pinned_kind(&self.client, &gvk)
                .await
                .map(|(ar, _)| ar)
                .map_err(|_| ReadError::NoKind {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                })?
        };
        if let Ok(mut m) = self.resources.lock() {
            m.insert((api_version.to_string(), kind.to_string()), ar.clone());
        }
        Ok(ar)
    }
}

fn map_error(e: kube::Error, object: &ObjectRef) -> ReadError {
    match e {
        kube::Error::Api(status) if status.code == 404 => ReadError::NotFound(object.clone()),
        kube::Error::Api(status) if status.code == 403 => ReadError::Forbidden {
            object: object.clone(),
            message: status.message.clone(),
        },
        other => ReadError::Other {
            object: object.to_string(),
            message: other.to_string(),
        },
    }
}

impl WorkloadReader for KubeReader {
    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        let ar = self.api_resource(&object.api_version, &object.kind).await?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &object.namespace, &ar);
        api.get(&object.name)
            .await
            .map_err(|e| map_error(e, object))
    }

    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let selector = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut lp = ListParams::default();
        if !selector.is_empty() {
            lp = lp.labels(&selector);
        }
        let what = ObjectRef::new("v1", "Pod", namespace, &format!("[{selector}]"));
        api.list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| map_error(e, &what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduler spawns translations on tokio: the future must be `Send`.
    #[test]
    fn translate_future_is_send() {
        fn is_send<T: Send>(_: &T) {}
        fn check(reader: &KubeReader, pod: &Pod) {
            let f = crate::workload::translate(reader, pod);
            is_send(&f);
        }
        let _ = check;
    }

    #[test]
    fn api_errors_map_to_read_errors() {
        let obj = ObjectRef::new("batch/v1", "Job", "ns", "j");
        let api = |code: u16| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("msg", "Reason").with_code(code),
            ))
        };
        assert_eq!(map_error(api(404), &obj), ReadError::NotFound(obj.clone()));
        assert!(matches!(
            map_error(api(403), &obj),
            ReadError::Forbidden { .. }
        ));
        assert!(matches!(map_error(api(500), &obj), ReadError::Other { .. }));
    }
}
