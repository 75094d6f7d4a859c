//! What a test describes: the objects, the Slurm jobs (in the watcher's index and in Slurm),
//! the faults to inject and the passes to run first.

use super::NS;
use super::fake_slurm::SlurmFailure;
use super::objects::{Obj, node};
use crate::slurm::WatchedJob;
use crate::workload::admin_comment::AdminComment;
use axum::http::Method;
use slurm_rest::models::{JobInfo, JobState};

/// A bridge job as both the watcher index and Slurm know it.
#[derive(Clone, Debug)]
pub struct SlurmJob {
    pub id: u32,
    pub state: JobState,
    pub reason: Option<String>,
    pub nodes: Option<String>,
    /// Pod keys (`ns/name`) of the admin_comment.
    pub pods: Vec<String>,
    /// Group key of the admin_comment; `None` for a job of the Go original.
    pub group: Option<String>,
}

impl SlurmJob {
    /// RUNNING on these Slurm nodes (a host list).
    pub fn running(mut self, nodes: &str) -> Self {
        self.state = JobState::Running;
        self.nodes = Some(nodes.to_string());
        self
    }

    pub fn suspended(mut self, nodes: &str) -> Self {
        self.state = JobState::Suspended;
        self.nodes = Some(nodes.to_string());
        self
    }

    /// Slurm's pending reason.
    pub fn reason(mut self, reason: &str) -> Self {
        self.reason = Some(reason.to_string());
        self
    }

    pub fn state(mut self, state: JobState) -> Self {
        self.state = state;
        self
    }

    /// Made by the Go original: no group key in the admin_comment.
    pub fn without_group(mut self) -> Self {
        self.group = None;
        self
    }

    fn comment(&self) -> AdminComment {
        AdminComment {
            pods: self.pods.clone(),
            group: self.group.clone(),
            uids: vec![],
            desc: None,
            cluster: None,
        }
    }

    pub fn watched(&self) -> WatchedJob {
        WatchedJob {
            job_id: self.id,
            state: vec![self.state.clone()],
            state_reason: self.reason.clone(),
            nodes: self.nodes.clone(),
            comment: self.comment(),
        }
    }

    pub fn info(&self) -> JobInfo {
        JobInfo {
            job_id: self.id,
            job_state: vec![self.state.clone()],
            state_reason: self.reason.clone(),
            nodes: self.nodes.clone(),
            admin_comment: Some(self.comment().encode()),
            ..Default::default()
        }
    }
}

/// A PENDING bridge job for these pods (`name` in [`NS`]) of the group `group`.
pub fn job(id: u32, group: &str, pods: &[&str]) -> SlurmJob {
    SlurmJob {
        id,
        state: JobState::Pending,
        reason: None,
        nodes: None,
        pods: pods.iter().map(|p| format!("{NS}/{p}")).collect(),
        group: Some(group.to_string()),
    }
}

/// Something that happens before the pass under test (its writes are not counted).
#[derive(Clone, Debug)]
pub enum Step {
    /// A reconcile pass of this pod (read from the API server as it is then).
    Pass(&'static str),
    /// Slurm and the watcher now show this job (the watcher's `Changed` event included).
    Job(SlurmJob),
    /// This object is created or replaced in the API server.
    Put(Obj),
    /// From now on this failure is injected.
    Fault(Fault),
    /// Every injected failure is lifted (for a failure in the steps only: `Fault(..)`, a
    /// `Pass`, then `Heal`).
    Heal,
}

/// Failures injected after the [`Step`]s, for the pass under test.
#[derive(Clone, Debug)]
pub enum Fault {
    Submit(SlurmFailure),
    Update(SlurmFailure),
    Cancel(SlurmFailure),
    /// Kubernetes requests with this method whose path contains the text fail with the code.
    Kube(Method, &'static str, u16),
}

/// The state a pass starts from.
#[derive(Clone, Debug)]
pub struct World {
    pub objects: Vec<Obj>,
    /// Slurm's node names; `None`: the Kubernetes nodes' names.
    pub slurm_nodes: Option<Vec<String>>,
    pub jobs: Vec<SlurmJob>,
    /// Jobs as Slurm has them when the watcher's index says otherwise (it has not polled yet).
    pub slurm_only: Vec<SlurmJob>,
    pub before: Vec<Step>,
    pub faults: Vec<Fault>,
    pub leader: bool,
    /// A shutdown has begun (`Ctx::stopping`).
    pub stopping: bool,
    /// The pod the pass is given when it is not the API server's (a cache behind the server).
    pub given: Option<Obj>,
}

impl World {
    /// Ready nodes with these names (Kubernetes and Slurm).
    pub fn nodes(names: &[&str]) -> World {
        World::default().with_nodes(names)
    }

    pub fn with_nodes(mut self, names: &[&str]) -> World {
        self.objects.extend(names.iter().map(|n| node(n)));
        self
    }

    pub fn with(mut self, obj: Obj) -> World {
        self.objects.push(obj);
        self
    }

    pub fn job(mut self, job: SlurmJob) -> World {
        self.jobs.push(job);
        self
    }

    pub fn slurm_has(mut self, job: SlurmJob) -> World {
        self.slurm_only.push(job);
        self
    }

    pub fn then(mut self, step: Step) -> World {
        self.before.push(step);
        self
    }

    pub fn fault(mut self, fault: Fault) -> World {
        self.faults.push(fault);
        self
    }

    pub fn not_leader(mut self) -> World {
        self.leader = false;
        self
    }

    pub fn stopping(mut self) -> World {
        self.stopping = true;
        self
    }

    pub fn given(mut self, pod: Obj) -> World {
        self.given = Some(pod);
        self
    }
}

impl Default for World {
    fn default() -> Self {
        World {
            objects: Vec::new(),
            slurm_nodes: None,
            jobs: Vec::new(),
            slurm_only: Vec::new(),
            before: Vec::new(),
            faults: Vec::new(),
            leader: true,
            stopping: false,
            given: None,
        }
    }
}
