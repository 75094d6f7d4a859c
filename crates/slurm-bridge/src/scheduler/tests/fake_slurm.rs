//! A recording fake of Slurm: a job table and a node list, the scheduler's writes (submit,
//! update, cancel) recorded in order, and failures injected per call kind.

use crate::slurm::JobControl;
use crate::slurm::{SlurmJobs, SlurmNodes};
use crate::sync::MutexExt;
use crate::workload::admin_comment::AdminComment;
use slurm_rest::models::{JobDescMsg, JobInfo, JobState, JobStateEntry, SlurmErrorEntry};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Ids the fake gives submitted jobs, counting up from here (seeded jobs use small ids).
pub const FIRST_SUBMITTED_ID: u32 = 100;

/// A Slurm write the scheduler made.
#[derive(Clone, Debug)]
pub enum SlurmCall {
    Submit(JobDescMsg),
    Update(u32, JobDescMsg),
    Cancel(u32),
}

impl SlurmCall {
    /// The call as table rows name it: `submit ns/a,ns/b`, `update 7 ns/a`, `cancel 7`; a
    /// submit or update that excludes nodes adds ` excluding <hostlist>`.
    pub fn describe(&self) -> String {
        fn pods(desc: &JobDescMsg) -> String {
            desc.admin_comment
                .as_deref()
                .and_then(|c| AdminComment::decode(c).ok())
                .map(|c| c.pods.join(","))
                .unwrap_or_else(|| "?".into())
        }
        fn excluded(desc: &JobDescMsg) -> String {
            let list: Vec<&String> = desc
                .excluded_nodes
                .iter()
                .flatten()
                .filter(|n| !n.is_empty())
                .collect();
            if list.is_empty() {
                String::new()
            } else {
                format!(
                    " excluding {}",
                    list.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }
        }
        match self {
            SlurmCall::Submit(d) => format!("submit {}{}", pods(d), excluded(d)),
            SlurmCall::Update(id, d) => format!("update {id} {}{}", pods(d), excluded(d)),
            SlurmCall::Cancel(id) => format!("cancel {id}"),
        }
    }
}

/// A failure the fake answers with (slurm_rest::Error is not Clone: made afresh per call).
#[derive(Clone, Debug)]
pub enum SlurmFailure {
    /// slurmrestd unreachable (connection refused): the request never left.
    Unreachable,
    /// The request reached Slurm, which acted on it (a submit makes its job), and the answer
    /// was lost: a reset after the write.
    AnswerLost,
    /// Slurm refuses the job: errno 2014, "Requested node configuration is not available".
    NodeConfigUnavailable,
    /// Slurm refuses an update: errno 2073, the job is no longer pending.
    NotPending,
}

impl SlurmFailure {
    pub fn error(&self, context: &str) -> slurm_rest::Error {
        let entry = |number: i32, text: &str| SlurmErrorEntry {
            error_number: Some(number),
            error: Some(text.into()),
            description: None,
            source: None,
        };
        match self {
            SlurmFailure::Unreachable => slurm_rest::Error::synthetic(
                slurm_rest::ErrorKind::Transient,
                format!("{context}: connection refused"),
            )
            .never_sent(),
            SlurmFailure::AnswerLost => slurm_rest::Error::synthetic(
                slurm_rest::ErrorKind::Transient,
                format!("{context}: connection reset after the request was sent"),
            ),
            SlurmFailure::NodeConfigUnavailable => slurm_rest::Error::from_slurm(
                context,
                500,
                vec![entry(2014, "Requested node configuration is not available")],
            ),
            SlurmFailure::NotPending => slurm_rest::Error::from_slurm(
                context,
                500,
                vec![entry(2073, "Job is no longer pending execution")],
            ),
        }
    }
}

#[derive(Default)]
struct State {
    calls: Vec<SlurmCall>,
    next_id: u32,
    jobs: BTreeMap<u32, JobInfo>,
    nodes: Vec<String>,
    fail_submit: Option<SlurmFailure>,
    fail_update: Option<SlurmFailure>,
    fail_cancel: Option<SlurmFailure>,
    /// Submits wait for a permit of this before they are answered ([`FakeSlurm::hold_submits`]).
    submit_gate: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    submits_in_flight: usize,
    most_submits_in_flight: usize,
}

/// The fake. Submitted jobs are PENDING until a test changes them ([`FakeSlurm::set_job`]).
pub struct FakeSlurm {
    state: Mutex<State>,
}

impl Default for FakeSlurm {
    fn default() -> Self {
        FakeSlurm {
            state: Mutex::new(State {
                next_id: FIRST_SUBMITTED_ID,
                ..Default::default()
            }),
        }
    }
}

impl FakeSlurm {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    pub fn set_nodes(&self, names: &[String]) {
        self.state().nodes = names.to_vec();
    }

    /// Puts (or replaces) a job in Slurm's table.
    pub fn set_job(&self, job: JobInfo) {
        self.state().jobs.insert(job.job_id, job);
    }

    pub fn job_info(&self, id: u32) -> Option<JobInfo> {
        self.state().jobs.get(&id).cloned()
    }

    pub fn fail_submit(&self, f: Option<SlurmFailure>) {
        self.state().fail_submit = f;
    }

    pub fn fail_update(&self, f: Option<SlurmFailure>) {
        self.state().fail_update = f;
    }

    pub fn fail_cancel(&self, f: Option<SlurmFailure>) {
        self.state().fail_cancel = f;
    }

    /// Holds every submit until the returned gate gives it a permit.
    pub fn hold_submits(&self) -> std::sync::Arc<tokio::sync::Semaphore> {
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        self.state().submit_gate = Some(gate.clone());
        gate
    }

    /// Submits received and not answered yet, now and at most so far.
    pub fn submits_in_flight(&self) -> (usize, usize) {
        let s = self.state();
        (s.submits_in_flight, s.most_submits_in_flight)
    }

    /// The writes so far, described ([`SlurmCall::describe`]).
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.iter().map(SlurmCall::describe).collect()
    }

    /// The writes so far, as sent.
    pub fn raw_calls(&self) -> Vec<SlurmCall> {
        self.state().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }
}

impl JobControl for FakeSlurm {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        let gate = {
            let mut s = self.state();
            s.submits_in_flight += 1;
            s.most_submits_in_flight = s.most_submits_in_flight.max(s.submits_in_flight);
            s.submit_gate.clone()
        };
        if let Some(gate) = gate {
            gate.acquire()
                .await
                .expect("the gate is never closed")
                .forget();
        }
        let mut s = self.state();
        s.submits_in_flight -= 1;
        s.calls.push(SlurmCall::Submit(desc.clone()));
        let lost = match &s.fail_submit {
            Some(SlurmFailure::AnswerLost) => true,
            Some(f) => return Err(f.error("POST /slurm/v0.0.44/job/submit")),
            None => false,
        };
        let id = s.next_id;
        s.next_id += 1;
        s.jobs.insert(
            id,
            JobInfo {
                job_id: id,
                name: desc.name.clone(),
                job_state: vec![JobState::Pending],
                admin_comment: desc.admin_comment.clone(),
                ..Default::default()
            },
        );
        if lost {
            return Err(SlurmFailure::AnswerLost.error("POST /slurm/v0.0.44/job/submit"));
        }
        Ok(id)
    }

    async fn update(&self, job_id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        let mut s = self.state();
        s.calls.push(SlurmCall::Update(job_id, desc.clone()));
        let context = format!("POST /slurm/v0.0.44/job/{job_id}");
        if let Some(f) = &s.fail_update {
            return Err(f.error(&context));
        }
        match s.jobs.get_mut(&job_id) {
            Some(j) if j.job_state.contains(&JobState::Pending) => {
                if desc.admin_comment.is_some() {
                    j.admin_comment = desc.admin_comment.clone();
                }
                Ok(())
            }
            Some(_) => Err(SlurmFailure::NotPending.error(&context)),
            None => Err(slurm_rest::Error::from_slurm(
                &context,
                404,
                vec![SlurmErrorEntry {
                    error_number: Some(2017),
                    error: Some("Invalid job id specified".into()),
                    ..Default::default()
                }],
            )),
        }
    }

    async fn cancel(&self, job_id: u32) -> Result<(), slurm_rest::Error> {
        let mut s = self.state();
        s.calls.push(SlurmCall::Cancel(job_id));
        if let Some(f) = &s.fail_cancel {
            return Err(f.error(&format!("DELETE /slurm/v0.0.44/job/{job_id}")));
        }
        if let Some(j) = s.jobs.get_mut(&job_id) {
            j.job_state = vec![JobState::Cancelled];
        }
        Ok(())
    }
}

impl SlurmJobs for FakeSlurm {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        Ok(self.state().jobs.values().cloned().collect())
    }

    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        Ok(self
            .state()
            .jobs
            .values()
            .map(|j| JobStateEntry {
                job_id: j.job_id,
                id: j.job_id.to_string(),
                state: j.job_state.clone(),
            })
            .collect())
    }

    async fn job(&self, job_id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        Ok(self.state().jobs.get(&job_id).cloned())
    }
}

impl SlurmNodes for FakeSlurm {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        Ok(self
            .state()
            .nodes
            .iter()
            .map(|n| slurm_rest::models::Node {
                name: n.clone(),
                ..Default::default()
            })
            .collect())
    }
}
