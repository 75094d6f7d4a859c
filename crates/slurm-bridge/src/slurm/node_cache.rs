//! The Slurm node names, listed once per interval (GET /nodes/) instead of once per pod.

use super::SlurmNodes;
use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

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
    synced: watch::Sender<bool>,
}

impl<S: SlurmNodes> SlurmNodeCache<S> {
    pub fn new(source: Arc<S>, interval: Duration) -> Arc<Self> {
        Arc::new(SlurmNodeCache {
            source,
            interval,
            current: RwLock::new(NodeNames::default()),
            synced: watch::channel(false).0,
        })
    }

    /// The names as of the last successful listing with their generation, read together: a
    /// placement cached under a generation must come from that generation's names.
    pub fn snapshot(&self) -> NodeNames {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first successful listing.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Lists the nodes now; the generation moves on only when the names changed.
    pub async fn refresh(&self) -> Result<Arc<BTreeSet<String>>, slurm_rest::Error> {
        let nodes = self.source.list_nodes().await?;
        let names: BTreeSet<String> = nodes
            .into_iter()
            .map(|n| n.name)
            .filter(|n| !n.is_empty())
            .collect();
        let names = self.replace(names);
        self.synced.send_replace(true);
        Ok(names)
    }

    /// Installs a new listing unless it equals the current one; returns the current names.
    fn replace(&self, names: BTreeSet<String>) -> Arc<BTreeSet<String>> {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
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
}
