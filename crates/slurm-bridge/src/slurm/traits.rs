//! Every Slurm call the bridge makes, behind small traits (as the original's `slurmcontrol`), so
//! reconcile logic runs against a fake in unit tests and against real Slurm end to end:
//! [`SlurmJobs`] and [`SlurmNodes`] (the shared caches' reads), [`JobControl`] (submit, update,
//! cancel), [`NodeControl`] (the node controller's node I/O). `slurm_rest::Client` implements
//! them all; [`Slurm`] is what the scheduler and the pod controller need.

use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry, Node, NodeListing, UpdateNodeMsg};
use std::future::Future;

/// Everything Slurm the scheduler and the pod controller need.
pub trait Slurm: JobControl + SlurmJobs + SlurmNodes {}
impl<T: JobControl + SlurmJobs + SlurmNodes> Slurm for T {}

/// The Slurm job reads the watcher makes.
pub trait SlurmJobs: Send + Sync + 'static {
    /// Every job with every field (once, at start).
    fn list_jobs(&self) -> impl Future<Output = Result<Vec<JobInfo>, slurm_rest::Error>> + Send;
    /// Id and state of every job (the cheap poll).
    fn job_states(
        &self,
    ) -> impl Future<Output = Result<Vec<JobStateEntry>, slurm_rest::Error>> + Send;
    /// Id and state of these jobs only, those Slurm does not know left out (the fast poll of
    /// jobs just submitted). Fakes may filter [`SlurmJobs::job_states`].
    fn job_states_of(
        &self,
        job_ids: &[u32],
    ) -> impl Future<Output = Result<Vec<JobStateEntry>, slurm_rest::Error>> + Send {
        async move {
            let mut states = self.job_states().await?;
            states.retain(|s| job_ids.contains(&s.job_id));
            Ok(states)
        }
    }
    /// One job; `None` when Slurm no longer knows it.
    fn job(
        &self,
        job_id: u32,
    ) -> impl Future<Output = Result<Option<JobInfo>, slurm_rest::Error>> + Send;
    /// What an allocated job holds on each node (core bitmap, GRES indices): read only when its
    /// pods ask for DRA devices. Fakes without it answer an empty layout.
    fn job_resources(
        &self,
        job_id: u32,
    ) -> impl Future<Output = Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error>>
    + Send {
        let _ = job_id;
        async { Ok(Vec::new()) }
    }
}

/// The Slurm node reads the node cache makes.
pub trait SlurmNodes: Send + Sync + 'static {
    /// Every node.
    fn list_nodes(&self) -> impl Future<Output = Result<Vec<Node>, slurm_rest::Error>> + Send;

    /// Every node, or [`NodeListing::Unchanged`] when none changed since `since` (a previous
    /// listing's `last_update`). Sources without conditional listings list every time.
    fn list_nodes_since(
        &self,
        since: Option<u64>,
    ) -> impl Future<Output = Result<NodeListing, slurm_rest::Error>> + Send {
        let _ = since;
        async {
            Ok(NodeListing::Nodes {
                nodes: self.list_nodes().await?,
                last_update: None,
            })
        }
    }
}

impl SlurmJobs for slurm_rest::Client {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        Ok(self.jobs(None).await?.jobs)
    }

    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        slurm_rest::Client::job_states(self).await
    }

    async fn job_states_of(
        &self,
        job_ids: &[u32],
    ) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        slurm_rest::Client::job_states_of(self, job_ids).await
    }

    async fn job_resources(
        &self,
        job_id: u32,
    ) -> Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error> {
        slurm_rest::Client::job_resources(self, job_id).await
    }

    async fn job(&self, job_id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        match slurm_rest::Client::job(self, job_id).await {
            Ok(job) => Ok(Some(job)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl SlurmNodes for slurm_rest::Client {
    async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
        self.nodes().await
    }

    async fn list_nodes_since(&self, since: Option<u64>) -> Result<NodeListing, slurm_rest::Error> {
        self.nodes_since(since).await
    }
}

/// Submit, update and cancel external jobs.
pub trait JobControl: Send + Sync + 'static {
    /// Submits a job; returns its id.
    fn submit(
        &self,
        desc: &JobDescMsg,
    ) -> impl Future<Output = Result<u32, slurm_rest::Error>> + Send;
    /// Changes a pending job.
    fn update(
        &self,
        job_id: u32,
        desc: &JobDescMsg,
    ) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
    /// Cancels a job; a job Slurm no longer knows counts as cancelled.
    fn cancel(&self, job_id: u32) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
}

impl JobControl for slurm_rest::Client {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        Ok(self.submit_job(desc).await?.job_id)
    }

    async fn update(&self, job_id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        self.update_job(job_id, desc).await.map(|_| ())
    }

    async fn cancel(&self, job_id: u32) -> Result<(), slurm_rest::Error> {
        match self.cancel_job(job_id, None, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

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
