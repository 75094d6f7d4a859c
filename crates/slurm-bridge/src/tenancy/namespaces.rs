//! Namespace labels for tenants that select namespaces by label: read with a GET and kept for a
//! short while, so a pass never waits on the API server for a namespace it saw a moment ago.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;

use crate::sync::MutexExt;

/// How long a namespace's labels are trusted before they are read again.
pub const LABELS_TTL: Duration = Duration::from_secs(30);

type Labels = BTreeMap<String, String>;

/// Labels and when they were read, by namespace.
type LabelCache = Arc<Mutex<HashMap<String, (Arc<Labels>, Instant)>>>;

/// Where namespace labels come from.
#[derive(Clone)]
pub enum NamespaceLabels {
    /// No tenant selects by label: labels are never needed.
    Unneeded,
    /// Read from the API server, each kept for [`LABELS_TTL`].
    Fetched {
        /// The client.
        client: kube::Client,
        /// Labels and when they were read, by namespace.
        cache: LabelCache,
    },
    /// Fixed labels (tests, `translate`): a namespace not listed has none.
    Static(Arc<BTreeMap<String, Labels>>),
}

impl std::fmt::Debug for NamespaceLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamespaceLabels::Unneeded => f.write_str("Unneeded"),
            NamespaceLabels::Fetched { .. } => f.write_str("Fetched"),
            NamespaceLabels::Static(m) => f.debug_tuple("Static").field(m).finish(),
        }
    }
}

/// A namespace's labels could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("reading the labels of namespace {namespace} (to find its tenant): {message}")]
pub struct LabelsError {
    /// The namespace.
    pub namespace: String,
    /// Why.
    pub message: String,
}

impl NamespaceLabels {
    /// Labels read through `client`.
    pub fn fetched(client: kube::Client) -> NamespaceLabels {
        NamespaceLabels::Fetched {
            client,
            cache: Default::default(),
        }
    }

    /// The labels of `namespace` (empty when unneeded or unknown to a static source).
    pub async fn labels(&self, namespace: &str) -> Result<Arc<Labels>, LabelsError> {
        match self {
            NamespaceLabels::Unneeded => Ok(Arc::default()),
            NamespaceLabels::Static(m) => {
                Ok(Arc::new(m.get(namespace).cloned().unwrap_or_default()))
            }
            NamespaceLabels::Fetched { client, cache } => {
                if let Some((labels, at)) = cache.locked().get(namespace)
                    && at.elapsed() < LABELS_TTL
                {
                    return Ok(labels.clone());
                }
                let api: kube::Api<Namespace> = kube::Api::all(client.clone());
                let ns = api.get_opt(namespace).await.map_err(|e| LabelsError {
                    namespace: namespace.into(),
                    message: e.to_string(),
                })?;
                let labels = Arc::new(ns.and_then(|n| n.metadata.labels).unwrap_or_default());
                let mut cache = cache.locked();
                if cache.len() > 10_000 {
                    cache.retain(|_, (_, at)| at.elapsed() < LABELS_TTL);
                }
                cache.insert(namespace.to_string(), (labels.clone(), Instant::now()));
                Ok(labels)
            }
        }
    }
}
