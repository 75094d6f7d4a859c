//! A wrapper around any Slurm implementation whose writes (submit, update, cancel, node create,
//! update and delete) pass the leader [`Fence`] right before they are sent; reads always pass.
//! A fenced write fails as a transient error that was never sent, so no pass takes it for
//! Slurm's answer.

use super::{JobControl, NodeControl, SlurmJobs, SlurmNodes};
use crate::leader::Fence;
use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry, Node, NodeListing, UpdateNodeMsg};

/// `inner` with its writes fenced; wrap the client closest to the wire (inside
/// [`super::Instrumented`]), so the check is the last step before the request.
pub struct Fenced<S> {
    /// The client whose writes are fenced.
    pub inner: S,
    /// Open while this replica leads.
    pub fence: Fence,
}

impl<S> Fenced<S> {
    /// Fences the writes of `inner` with `fence`.
    pub fn new(inner: S, fence: Fence) -> Self {
        Fenced { inner, fence }
    }

    fn check(&self) -> Result<(), slurm_rest::Error> {
        self.fence.check("slurm").map_err(|e| {
            slurm_rest::Error::synthetic(slurm_rest::ErrorKind::Transient, e.to_string())
        })
    }
}

impl<S: JobControl> JobControl for Fenced<S> {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        self.check()?;
        self.inner.submit(desc).await
    }
    async fn update(&self, job_id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        self.check()?;
        self.inner.update(job_id, desc).await
    }
    async fn cancel(&self, job_id: u32) -> Result<(), slurm_rest::Error> {
        self.check()?;
        self.inner.cancel(job_id).await
    }
}

impl<S: SlurmJobs> SlurmJobs for Fenced<S> {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        self.inner.list_jobs().await
    }
    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        self.inner.job_states().await
    }
    async fn job_states_of(
        &self,
        job_ids: &[u32],
    ) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        self.inner.job_states_of(job_ids).await
    }
    async fn job(&self, job_id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        self.inner.job(job_id).await
    }
    async fn job_resources(
        &self,
        job_id: u32,
    ) -> Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error> {
        self.inner.job_resources(job_id).await
    }
}

impl<S: SlurmNodes> SlurmNodes for Fenced<S> {
    async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
        self.inner.list_nodes().await
    }
    async fn list_nodes_since(&self, since: Option<u64>) -> Result<NodeListing, slurm_rest::Error> {
        self.inner.list_nodes_since(since).await
    }
}

impl<S: NodeControl> NodeControl for Fenced<S> {
    async fn node(&self, name: &str) -> Result<Option<Node>, slurm_rest::Error> {
        self.inner.node(name).await
    }
    async fn create_node(&self, node_conf: &str) -> Result<(), slurm_rest::Error> {
        self.check()?;
        self.inner.create_node(node_conf).await
    }
    async fn update_node(
        &self,
        name: &str,
        update: &UpdateNodeMsg,
    ) -> Result<(), slurm_rest::Error> {
        self.check()?;
        self.inner.update_node(name, update).await
    }
    async fn delete_node(&self, name: &str) -> Result<(), slurm_rest::Error> {
        self.check()?;
        self.inner.delete_node(name).await
    }
    async fn partition_exists(&self, name: &str) -> Result<bool, slurm_rest::Error> {
        self.inner.partition_exists(name).await
    }
    async fn partition_names(&self) -> Result<Vec<String>, slurm_rest::Error> {
        self.inner.partition_names().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the calls that reach it.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl JobControl for Counting {
        async fn submit(&self, _: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(1)
        }
        async fn update(&self, _: u32, _: &JobDescMsg) -> Result<(), slurm_rest::Error> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        async fn cancel(&self, _: u32) -> Result<(), slurm_rest::Error> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_closed_fence_sends_no_write_and_says_why() {
        let f = Fenced::new(Counting::default(), Fence::closed());
        let desc = JobDescMsg::default();
        let e = f.submit(&desc).await.unwrap_err();
        assert!(
            e.is_transient(),
            "a fenced write is retried, never a rejection"
        );
        assert!(e.to_string().contains("leader Lease"), "{e}");
        assert!(f.cancel(7).await.is_err());
        assert!(f.update(7, &desc).await.is_err());
        assert_eq!(f.inner.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(f.fence.refused("slurm"), 3);

        f.fence.set(Some(
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        ));
        assert_eq!(f.submit(&desc).await.unwrap(), 1);
        assert_eq!(f.inner.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
