//! Which pods the webhooks take (reference §3.1), and the managed-namespace predicate.
//!
//! A namespace is managed when it is listed in `managedNamespaces`, or, when
//! `managedNamespaceSelector` is set (it then replaces the list, even when empty `{}`, which
//! matches every namespace), when the selector matches its labels. Labels come from a
//! Namespace watch cache ([`Namespaces::start`]); a namespace the cache has not seen yet (one
//! created a moment ago) is fetched once with a GET.

use super::review::Operation;
use crate::k8s::selector::label_selector_matches;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The scheduler name the API server gives pods that name none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// True for `default-scheduler` and for an unset name (which the API server defaults to it).
pub fn is_default_scheduler(name: Option<&str>) -> bool {
    matches!(name, None | Some("") | Some(DEFAULT_SCHEDULER))
}

/// Whether the webhooks act on a pod (mutate it, validate it):
/// - a pod naming the bridge scheduler, in any namespace, always;
/// - on CREATE, a pod in a managed namespace that names no scheduler or `default-scheduler`.
///
/// A pod that names another scheduler is left alone even in a managed namespace (the Go
/// original validated and mutated it; reference §10.3 #10), and an UPDATE of a pod that does
/// not name the bridge scheduler (one created before its namespace became managed) is left
/// alone too. Nothing is taken while the bridge has no scheduler name.
pub fn processed(
    operation: Operation,
    pod: &Pod,
    scheduler_name: &str,
    in_managed_namespace: bool,
) -> bool {
    if scheduler_name.is_empty() {
        return false;
    }
    let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
    if name == Some(scheduler_name) {
        return true;
    }
    operation == Operation::Create && in_managed_namespace && is_default_scheduler(name)
}

/// Whether deciding on this pod needs to know if its namespace is managed (only a CREATE of a
/// pod naming the default scheduler does).
pub fn needs_namespace(operation: Operation, pod: &Pod, scheduler_name: &str) -> bool {
    !scheduler_name.is_empty()
        && operation == Operation::Create
        && is_default_scheduler(pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()))
}

/// The namespace lookup failed (answered as an error, so with `failurePolicy: Fail` pods
/// cannot be created in the meantime, as in the reference).
#[derive(Debug, thiserror::Error)]
#[error("looking up namespace {namespace}: {message}")]
pub struct NamespaceError {
    /// Namespace looked up.
    pub namespace: String,
    /// Why it failed.
    pub message: String,
}

/// The managed-namespace predicate.
#[derive(Clone)]
pub enum Namespaces {
    /// `managedNamespaces`: an exact-name list.
    Listed(Arc<HashSet<String>>),
    /// `managedNamespaceSelector`, over a Namespace watch cache.
    Selected {
        /// The selector.
        selector: Arc<LabelSelector>,
        /// Namespaces seen by the watch.
        store: Store<Namespace>,
        /// For namespaces the watch has not delivered yet.
        client: kube::Client,
    },
    /// Fixed labels per namespace (tests without a cluster).
    Static {
        /// The selector.
        selector: Arc<LabelSelector>,
        /// Labels of each known namespace.
        labels: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    },
}

impl std::fmt::Debug for Namespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Namespaces::Listed(l) => f.debug_tuple("Listed").field(l).finish(),
            Namespaces::Selected { selector, .. } => f
                .debug_struct("Selected")
                .field("selector", selector)
                .finish(),
            Namespaces::Static { selector, labels } => f
                .debug_struct("Static")
                .field("selector", selector)
                .field("labels", labels)
                .finish(),
        }
    }
}

impl Namespaces {
    /// The predicate for a config: the list, or, with a selector, a Namespace watch cache. The
    /// returned future runs the watch (retrying with backoff) until it is dropped; the store is
    /// ready once the first listing has arrived (`Store::wait_until_ready`).
    pub fn start(
        client: &kube::Client,
        managed: &[String],
        selector: Option<&LabelSelector>,
    ) -> (
        Namespaces,
        Option<impl Future<Output = ()> + Send + 'static>,
    ) {
        let Some(selector) = selector else {
            return (Namespaces::listed(managed), None);
        };
        let (store, writer) = reflector::store();
        let api: kube::Api<Namespace> = kube::Api::all(client.clone());
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        let task = async move {
            use futures::StreamExt;
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    tracing::warn!(error = %e, "namespace watch failed; retrying");
                }
            }
        };
        (
            Namespaces::Selected {
                selector: Arc::new(selector.clone()),
                store,
                client: client.clone(),
            },
            Some(task),
        )
    }

    /// The exact-name list predicate.
    pub fn listed(managed: &[String]) -> Namespaces {
        Namespaces::Listed(Arc::new(managed.iter().cloned().collect()))
    }

    /// Waits until the predicate can answer (the cache has listed once), at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        match self {
            Namespaces::Selected { store, .. } => {
                tokio::time::timeout(timeout, store.wait_until_ready())
                    .await
                    .is_ok_and(|r| r.is_ok())
            }
            _ => true,
        }
    }

    /// Whether `namespace` is managed.
    pub async fn is_managed(&self, namespace: &str) -> Result<bool, NamespaceError> {
        match self {
            Namespaces::Listed(l) => Ok(l.contains(namespace)),
            Namespaces::Static { selector, labels } => Ok(labels
                .get(namespace)
                .is_some_and(|l| label_selector_matches(selector, l))),
            Namespaces::Selected {
                selector,
                store,
                client,
            } => {
                if let Some(ns) = store.get(&ObjectRef::new(namespace)) {
                    return Ok(label_selector_matches(
                        selector,
                        ns.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                    ));
                }
                // Not (yet) in the cache: one GET.
                let api: kube::Api<Namespace> = kube::Api::all(client.clone());
                match api.get_opt(namespace).await {
                    Ok(Some(ns)) => Ok(label_selector_matches(
                        selector,
                        ns.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                    )),
                    Ok(None) => Err(NamespaceError {
                        namespace: namespace.into(),
                        message: "not found".into(),
                    }),
                    Err(e) => Err(NamespaceError {
                        namespace: namespace.into(),
                        message: e.to_string(),
                    }),
                }
            }
        }
    }
}
