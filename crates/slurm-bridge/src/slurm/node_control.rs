//! The Slurm node writes (and fresh reads) of the node controller, behind a small trait so its
//! reconcile logic runs against a fake in unit tests and against real Slurm end to end.

use slurm_rest::models::{Node, UpdateNodeMsg};
use std::future::Future;

/// Slurm node I/O of the node controller. Every read is fresh (not the shared listing).
pub trait NodeControl: Send + Sync + 'static {
    /// One node; `None` when Slurm does not know it.
    fn node(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Node>, slurm_rest::Error>> + Send;
    /// Creates a dynamic node from a slurm.conf node line (`NodeName=... State=External ...`).
    fn create_node(
        &self,
        node_conf: &str,
    ) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
    /// Changes a node's state, reason, features or topology.
    fn update_node(
        &self,
        name: &str,
        update: &UpdateNodeMsg,
    ) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
    /// Removes a dynamic node.
    fn delete_node(&self, name: &str)
    -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
    /// True when the partition exists.
    fn partition_exists(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<bool, slurm_rest::Error>> + Send;
    /// The names of every partition (validation of several at once, and error messages).
    fn partition_names(
        &self,
    ) -> impl Future<Output = Result<Vec<String>, slurm_rest::Error>> + Send;
}

impl NodeControl for slurm_rest::Client {
    async fn node(&self, name: &str) -> Result<Option<Node>, slurm_rest::Error> {
        match slurm_rest::Client::node(self, name).await {
            // GET /node/{name} may answer another node when the name is unknown to Slurm but
            // matches a node set: only an exact match is this node.
            Ok(n) if n.name == name => Ok(Some(n)),
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_node(&self, node_conf: &str) -> Result<(), slurm_rest::Error> {
        slurm_rest::Client::create_node(self, node_conf).await
    }

    async fn update_node(
        &self,
        name: &str,
        update: &UpdateNodeMsg,
    ) -> Result<(), slurm_rest::Error> {
        slurm_rest::Client::update_node(self, name, update).await
    }

    async fn delete_node(&self, name: &str) -> Result<(), slurm_rest::Error> {
        slurm_rest::Client::delete_node(self, name).await
    }

    async fn partition_exists(&self, name: &str) -> Result<bool, slurm_rest::Error> {
        match self.partition(name).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn partition_names(&self) -> Result<Vec<String>, slurm_rest::Error> {
        Ok(self
            .partitions()
            .await?
            .into_iter()
            .map(|p| p.name)
            .collect())
    }
}
