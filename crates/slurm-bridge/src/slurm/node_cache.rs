//! The Slurm node names, listed once per interval (GET /nodes/) instead of once per pod.

use super::SlurmNodes;
use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// Slurm node names, refreshed in the background.
pub struct SlurmNodeCache<S> {
    source: Arc<S>,
    interval: Duration,
    names: RwLock<Arc<BTreeSet<String>>>,
    synced: watch::Sender<bool>,
}

impl<S: SlurmNodes> SlurmNodeCache<S> {
    pub fn new(source: Arc<S>, interval: Duration) -> Arc<Self> {
        Arc::new(SlurmNodeCache {
            source,
            interval,
            names: RwLock::new(Arc::new(BTreeSet::new())),
            synced: watch::channel(false).0,
        })
    }

    /// The names as of the last successful listing.
    pub fn names(&self) -> Arc<BTreeSet<String>> {
        self.names.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first successful listing.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Lists the nodes now.
    pub async fn refresh(&self) -> Result<Arc<BTreeSet<String>>, slurm_rest::Error> {
        let nodes = self.source.list_nodes().await?;
        let names: Arc<BTreeSet<String>> = Arc::new(
            nodes
                .into_iter()
                .map(|n| n.name)
                .filter(|n| !n.is_empty())
                .collect(),
        );
        *self.names.write().unwrap_or_else(|e| e.into_inner()) = names.clone();
        self.synced.send_replace(true);
        Ok(names)
    }

    /// Refreshes forever.
    pub async fn run(self: Arc<Self>) {
        loop {
            let wait = match self.refresh().await {
                Ok(_) => self.interval,
                Err(e) => {
                    tracing::warn!(error = %e, "listing Slurm nodes failed");
                    Duration::from_secs(2).min(self.interval)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}
