//! Job models: the job description sent on submit/update, the job returned by GET, job
//! states, node resource layouts, and the answers of submit, update and cancel.

use super::de::{csv, null_default};
use super::{JobFlag, JobState, Meta, NoVal, Shared, SlurmWarning};
use serde::{Deserialize, Serialize};

/// A job description (`v0.0.44_job_desc_msg`), sent by POST /job/submit (wrapped in
/// `{"job": ..}`) and POST /job/{id} (bare). Every field is optional and omitted when `None`;
/// field names are exactly the JSON names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDescMsg {
    /// Job flags, e.g. `[EXTERNAL_JOB]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<JobFlag>>,
    /// Free text readable by admins only; the bridge keeps `{"pods":[..]}` here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_comment: Option<String>,
    /// Job name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Partition name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Account to charge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Quality of service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Reservation name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Required node features (`--constraint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraints: Option<String>,
    /// Licenses (`--licenses`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub licenses: Option<String>,
    /// Workload characterisation key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wckey: Option<String>,
    /// User id or name to run as (a string in v0.0.44).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Group id or name to run as (a string in v0.0.44).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// MCS label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcs_label: Option<String>,
    /// Node count or range, e.g. `"1"` or `"2-4"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// Minimum node count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum_nodes: Option<u32>,
    /// Maximum node count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_nodes: Option<u32>,
    /// Tasks per node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_per_node: Option<u32>,
    /// CPUs per task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Memory per node in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_node: Option<NoVal<u64>>,
    /// Memory per CPU in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_cpu: Option<NoVal<u64>>,
    /// TRES per node, e.g. `gres/gpu:2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tres_per_node: Option<String>,
    /// Time limit in minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<NoVal<u32>>,
    /// Priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<NoVal<u32>>,
    /// Sharing: `["none"]` for exclusive nodes, `[]` for shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<Vec<Shared>>,
    /// Nodes the job must run on (or choose from, with a node count).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "opt_csv")]
    pub required_nodes: Option<Vec<String>>,
    /// Nodes the job must not run on.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "opt_csv")]
    pub excluded_nodes: Option<Vec<String>>,
    /// Working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_working_directory: Option<String>,
    /// Submit held (stays PENDING with reason JobHeldUser until released).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,
    /// Comment visible to users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Environment (`NAME=value` strings); batch jobs need one, external jobs do not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Vec<String>>,
    /// Batch script (not used for external jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Total task count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    /// Minimum CPU count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum_cpus: Option<u32>,
    /// Nice value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    /// Requeue on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
}

fn opt_csv<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    csv(d).map(Some)
}

/// A job as GET /job/{id} and GET /jobs/ return it (`v0.0.44_job_info`, the fields the
/// bridge uses and a few more for diagnostics).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInfo {
    /// Job id.
    pub job_id: u32,
    /// Job name.
    pub name: Option<String>,
    /// Base state plus flag states, e.g. `[RUNNING]` or `[PENDING]`.
    #[serde(deserialize_with = "null_default")]
    pub job_state: Vec<JobState>,
    /// Why the job is in its state, e.g. `None`, `Priority`, `JobHeldUser`.
    pub state_reason: Option<String>,
    /// Longer description of the state.
    pub state_description: Option<String>,
    /// Allocated nodes as a host list, e.g. `node-[1-2]` (empty while pending).
    pub nodes: Option<String>,
    /// Admin comment (the bridge's `{"pods":[..]}`).
    pub admin_comment: Option<String>,
    /// Comment visible to users.
    pub comment: Option<String>,
    /// Partition.
    pub partition: Option<String>,
    /// Account.
    pub account: Option<String>,
    /// Quality of service.
    pub qos: Option<String>,
    /// Reservation (`resv_name`).
    pub resv_name: Option<String>,
    /// Priority.
    pub priority: NoVal<u32>,
    /// Time limit in minutes.
    pub time_limit: NoVal<u32>,
    /// Job flags.
    #[serde(deserialize_with = "null_default")]
    pub flags: Vec<JobFlag>,
    /// User id.
    pub user_id: Option<u32>,
    /// User name.
    pub user_name: Option<String>,
    /// Group id.
    pub group_id: Option<u32>,
    /// Group name.
    pub group_name: Option<String>,
    /// MCS label.
    pub mcs_label: Option<String>,
    /// Required nodes as a host list.
    pub required_nodes: Option<String>,
    /// Excluded nodes as a host list.
    pub excluded_nodes: Option<String>,
    /// Requested features (`--constraint`).
    pub features: Option<String>,
    /// Licenses.
    pub licenses: Option<String>,
    /// Workload characterisation key.
    pub wckey: Option<String>,
    /// Sharing mode.
    #[serde(deserialize_with = "null_default")]
    pub shared: Vec<Shared>,
    /// Whether the job is held.
    pub hold: Option<bool>,
    /// Node count.
    pub node_count: NoVal<u32>,
    /// Maximum node count.
    pub max_nodes: NoVal<u32>,
    /// CPU count.
    pub cpus: NoVal<u32>,
    /// Task count.
    pub tasks: NoVal<u32>,
    /// CPUs per task.
    pub cpus_per_task: NoVal<u16>,
    /// Tasks per node.
    pub tasks_per_node: NoVal<u16>,
    /// Memory per node in MiB.
    pub memory_per_node: NoVal<u64>,
    /// Memory per CPU in MiB.
    pub memory_per_cpu: NoVal<u64>,
    /// TRES per node.
    pub tres_per_node: Option<String>,
    /// Requested TRES.
    pub tres_req_str: Option<String>,
    /// Allocated TRES.
    pub tres_alloc_str: Option<String>,
    /// Submit time (Unix seconds).
    pub submit_time: NoVal<u64>,
    /// Start time (Unix seconds).
    pub start_time: NoVal<u64>,
    /// End time (Unix seconds).
    pub end_time: NoVal<u64>,
    /// Working directory.
    pub current_working_directory: Option<String>,
    /// Cluster name.
    pub cluster: Option<String>,
    /// Nodes the scheduler plans to use.
    pub scheduled_nodes: Option<String>,
}

impl JobInfo {
    /// True when `job_state` contains `state`.
    pub fn has_state(&self, state: &JobState) -> bool {
        self.job_state.contains(state)
    }
    /// True when the job is pending.
    pub fn is_pending(&self) -> bool {
        self.has_state(&JobState::Pending)
    }
    /// True when the job is running.
    pub fn is_running(&self) -> bool {
        self.has_state(&JobState::Running)
    }
}

/// Response of GET /jobs/ and GET /job/{id} (`v0.0.44_openapi_job_info_resp`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct JobsResponse {
    /// The jobs; with `update_time` it is empty when nothing changed since then (and a
    /// warning says so), otherwise every job.
    #[serde(deserialize_with = "null_default")]
    pub jobs: Vec<JobInfo>,
    /// When slurmctld last changed job data; pass it as the next `update_time`.
    pub last_update: NoVal<u64>,
    /// When the backfill scheduler last ran.
    pub last_backfill: NoVal<u64>,
    /// `meta`.
    pub meta: Option<Meta>,
    /// `warnings[]`.
    #[serde(deserialize_with = "null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// One job of GET /jobs/state/: its id and state only (cheap to poll).
///
/// slurmrestd 26.05 sends `{"job_id": "12", "state": ["RUNNING"]}` here (the id as a string,
/// `state` rather than `job_state`); numbers and `job_state` are accepted too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobStateEntry {
    /// Job id: the leading number of `id` (for an array task `10_3`, the array job 10).
    #[serde(skip)]
    pub job_id: u32,
    /// The id exactly as Slurm sent it (`"12"`, or `"10_3"` for an array task).
    #[serde(rename = "job_id", deserialize_with = "id_string")]
    pub id: String,
    /// Base state plus flag states.
    #[serde(alias = "job_state", deserialize_with = "null_default")]
    pub state: Vec<JobState>,
}

impl JobStateEntry {
    /// True when the id is a plain job id (not an array task or het component).
    pub fn is_plain_job(&self) -> bool {
        !self.id.is_empty() && self.id.bytes().all(|b| b.is_ascii_digit())
    }
    pub(crate) fn fill_job_id(&mut self) {
        let digits: String = self.id.chars().take_while(char::is_ascii_digit).collect();
        self.job_id = digits.parse().unwrap_or(0);
    }
}

fn id_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        S(String),
        N(u64),
        Null(()),
    }
    Ok(match Id::deserialize(d)? {
        Id::S(s) => s,
        Id::N(n) => n.to_string(),
        Id::Null(()) => String::new(),
    })
}

/// Response of GET /jobs/state/.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct JobStatesResponse {
    #[serde(deserialize_with = "null_default")]
    pub jobs: Vec<JobStateEntry>,
}

/// Response of POST /job/submit (`v0.0.44_openapi_job_submit_response`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SubmitResponse {
    /// The new job's id.
    pub job_id: u32,
    /// Step id (`batch` for batch jobs).
    pub step_id: Option<String>,
    /// Message from a job_submit plugin for the user.
    pub job_submit_user_msg: Option<String>,
    /// `warnings[]`.
    #[serde(deserialize_with = "null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// One result of POST /job/{id} (`v0.0.44_job_array_response_msg_entry`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct JobUpdateResult {
    /// Job id.
    pub job_id: Option<u32>,
    /// Step id.
    pub step_id: Option<String>,
    /// Error text, if this job failed to update.
    pub error: Option<String>,
    /// Slurm errno, 0 on success.
    pub error_code: Option<i32>,
    /// Why.
    pub why: Option<String>,
}

/// Response of POST /job/{id} (`v0.0.44_openapi_job_post_response`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct UpdateJobResponse {
    /// Per-job results.
    #[serde(deserialize_with = "null_default")]
    pub results: Vec<JobUpdateResult>,
    /// `warnings[]`.
    #[serde(deserialize_with = "null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// Error part of one entry of DELETE /job/{id}'s `status[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KillJobError {
    /// Error text.
    pub string: Option<String>,
    /// Slurm errno, 0 on success.
    pub code: Option<i32>,
    /// Message.
    pub message: Option<String>,
}

/// One entry of DELETE /job/{id}'s `status[]` (`v0.0.44_kill_jobs_resp_job`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KillJobResult {
    /// Outcome for this job.
    pub error: KillJobError,
    /// Step id.
    pub step_id: Option<String>,
    /// Job id.
    pub job_id: NoVal<u32>,
}

/// Response of DELETE /job/{id} (`v0.0.44_openapi_kill_job_resp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct CancelResponse {
    /// Per-job outcome.
    #[serde(deserialize_with = "null_default")]
    pub status: Vec<KillJobResult>,
    /// `warnings[]`.
    #[serde(deserialize_with = "null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// GRES allocated to a job on one node (`v0.0.44_node_gres_layout`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeGresLayout {
    /// GRES name, e.g. `gpu`.
    pub name: String,
    /// GRES type, e.g. `gpu.example.com`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Count.
    pub count: Option<i64>,
    /// Device indexes, e.g. `0-1`.
    pub index: Option<String>,
}

/// What a job holds on one node (`v0.0.44_node_resource_layout`), from GET /resources/{id}.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeResourceLayout {
    /// Node name.
    pub node: String,
    /// Sockets per node.
    pub sockets_per_node: Option<i32>,
    /// Cores per socket.
    pub cores_per_socket: Option<i32>,
    /// Allocated memory in MiB.
    pub mem_alloc: Option<i64>,
    /// Allocated cores as a hex bitmap, e.g. `0xFF`.
    pub core_bitmap: Option<String>,
    /// Channel.
    pub channel: NoVal<u32>,
    /// Allocated GRES.
    #[serde(deserialize_with = "null_default")]
    pub gres: Vec<NodeGresLayout>,
}

/// Response of GET /resources/{id}.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct ResourceLayoutResponse {
    #[serde(deserialize_with = "null_default")]
    pub nodes: Vec<NodeResourceLayout>,
}

/// Body of POST /job/submit (`v0.0.44_job_submit_req`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JobSubmitReq<'a> {
    pub job: &'a JobDescMsg,
}
