//! The messages of NRI's `nri.pkg.api.v1alpha1` package that this plugin reads or writes, a subset
//! of containerd/nri v0.12.3 `pkg/api/api.proto` (the version containerd v2.4.2 ships). Field
//! numbers and types match that file; fields left out are skipped when decoding, so the runtime
//! may send more than is declared here.

use std::collections::HashMap;

/// `RegisterPluginRequest`: the plugin's first call on the runtime service, naming itself.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    /// Plugin name, `[a-zA-Z0-9_.+-]+`.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Two digits; plugins are called in ascending index order.
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
    /// The NRI version the plugin implements, if known.
    #[prost(string, tag = "3")]
    pub nri_version: String,
}

/// `UpdateContainersRequest`: unsolicited updates of running containers, sent by the plugin.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersRequest {
    /// Containers to update.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// `UpdateContainersResponse`: the updates the runtime failed to apply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersResponse {
    /// Updates that failed.
    #[prost(message, repeated, tag = "1")]
    pub failed: Vec<ContainerUpdate>,
}

/// `ConfigureRequest`: the runtime's first call on the plugin, with its identity and timeouts.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    /// Plugin-specific configuration from the runtime's NRI configuration, if any.
    #[prost(string, tag = "1")]
    pub config: String,
    /// The runtime's name (`containerd`).
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// The runtime's version.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// How long the runtime waits for registration, in milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// How long the runtime waits for the plugin's answer to any request, in milliseconds.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
    /// The NRI version the runtime uses.
    #[prost(string, tag = "6")]
    pub nri_version: String,
}

/// `ConfigureResponse`: the events the plugin subscribes to, one bit per [`Event`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    /// Bit `event - 1` set for each subscribed [`Event`].
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// `SynchronizeRequest`: the pods and containers the runtime knows, possibly in several parts.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    /// Pods.
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    /// Containers.
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// More parts follow.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `SynchronizeResponse`: updates of existing containers, sent after the last part.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    /// Container updates.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    /// Echoes the request's `more`: the plugin handles split requests.
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// `CreateContainerRequest`, also the shape of `StopContainerRequest` and
/// `RemoveContainerRequest`: a container and its pod.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    /// The container's pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `CreateContainerResponse`: how to adjust the container being created.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    /// Adjustment of the new container.
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    /// Updates of other containers.
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
}

/// `UpdateContainerRequest`: the runtime is about to update a container's resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    /// The container's pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    /// The resources asked for.
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

/// `UpdateContainerResponse` and `StopContainerResponse` (same field 1): container updates.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdatesResponse {
    /// Container updates; one for the updated container supersedes the runtime's update.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// `StateChangeEvent`: an event relayed through the older catch-all call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    /// Which event.
    #[prost(enumeration = "Event", tag = "1")]
    pub event: i32,
    /// The pod.
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    /// The container, for container events.
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// `Empty`: the answer to events and Shutdown.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `Event`: lifecycle events a plugin can subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Event {
    /// Not an event.
    Unknown = 0,
    /// A pod sandbox starts.
    RunPodSandbox = 1,
    /// A pod sandbox stops.
    StopPodSandbox = 2,
    /// A pod sandbox is removed.
    RemovePodSandbox = 3,
    /// A container is being created (the plugin may adjust it).
    CreateContainer = 4,
    /// A container was created.
    PostCreateContainer = 5,
    /// A container starts.
    StartContainer = 6,
    /// A container started.
    PostStartContainer = 7,
    /// A container's resources are being updated.
    UpdateContainer = 8,
    /// A container's resources were updated.
    PostUpdateContainer = 9,
    /// A container stops.
    StopContainer = 10,
    /// A container is removed.
    RemoveContainer = 11,
    /// A pod's resources are being updated.
    UpdatePodSandbox = 12,
    /// A pod's resources were updated.
    PostUpdatePodSandbox = 13,
    /// Validation of the adjustments all plugins made.
    ValidateContainerAdjustment = 14,
}

impl Event {
    /// This event's bit in [`ConfigureResponse::events`].
    pub fn mask(self) -> i32 {
        1 << (self as i32 - 1)
    }
}

/// `ContainerState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ContainerState {
    /// Unknown.
    ContainerUnknown = 0,
    /// Created, not started.
    ContainerCreated = 1,
    /// Paused.
    ContainerPaused = 2,
    /// Running.
    ContainerRunning = 3,
    /// Stopped.
    ContainerStopped = 4,
}

/// `PodSandbox`: a pod as the runtime knows it (Kubernetes' name, namespace, UID).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    /// The runtime's sandbox id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The pod's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// The pod's UID.
    #[prost(string, tag = "3")]
    pub uid: String,
    /// The pod's namespace.
    #[prost(string, tag = "4")]
    pub namespace: String,
    /// The pod's labels.
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    /// The pod's annotations.
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    /// The runtime handler (RuntimeClass).
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
    /// Linux specifics: cgroup parent and the pod's resources.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
    /// The sandbox's process id.
    #[prost(uint32, tag = "9")]
    pub pid: u32,
}

/// `LinuxPodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandbox {
    /// Pod overhead.
    #[prost(message, optional, tag = "1")]
    pub pod_overhead: Option<LinuxResources>,
    /// Sum of the containers' resources.
    #[prost(message, optional, tag = "2")]
    pub pod_resources: Option<LinuxResources>,
    /// The pod's cgroup parent.
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
    /// The pod's cgroups path.
    #[prost(string, tag = "4")]
    pub cgroups_path: String,
}

/// `Container`: a container as the runtime knows it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    /// The runtime's container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its pod's sandbox id ([`PodSandbox::id`]).
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// The container's name in the pod spec.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Its state ([`ContainerState`]).
    #[prost(enumeration = "ContainerState", tag = "4")]
    pub state: i32,
    /// Labels.
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    /// Linux specifics: resources and cgroups path.
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    /// The container's process id on the host (0 until it started).
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

impl Container {
    /// The cpuset the container has (`linux.resources.cpu.cpus`); empty when unset.
    pub fn cpus(&self) -> &str {
        self.linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .and_then(|r| r.cpu.as_ref())
            .map_or("", |c| c.cpus.as_str())
    }
}

/// `LinuxContainer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    /// The container's resources.
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    /// Its cgroups path.
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// `LinuxResources`: CPU and memory (the other fields are not declared).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    /// Memory.
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    /// CPU, with the cpuset.
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
}

impl LinuxResources {
    /// Only a cpuset (`cpus`, and `mems` when not empty), as a pin adjusts or updates it.
    pub fn cpuset(cpus: &str, mems: &str) -> Self {
        LinuxResources {
            memory: None,
            cpu: Some(LinuxCpu {
                cpus: cpus.to_string(),
                mems: mems.to_string(),
                ..Default::default()
            }),
        }
    }
}

/// `LinuxMemory`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxMemory {
    /// Limit in bytes.
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
    /// Soft limit in bytes.
    #[prost(message, optional, tag = "2")]
    pub reservation: Option<OptionalInt64>,
}

/// `LinuxCPU`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    /// CPU shares.
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    /// CFS quota (µs per period).
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    /// CFS period (µs).
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    /// The cpuset, e.g. `0-3,8`.
    #[prost(string, tag = "6")]
    pub cpus: String,
    /// The memory nodes, e.g. `0`.
    #[prost(string, tag = "7")]
    pub mems: String,
}

/// `OptionalInt64`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    /// The value.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// `OptionalUInt64`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `ContainerAdjustment`: changes to a container being created; here only its Linux resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    /// Linux adjustments.
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

impl ContainerAdjustment {
    /// No change.
    pub fn none() -> Self {
        ContainerAdjustment::default()
    }

    /// Pins the container to `cpus` (cpuset syntax, e.g. `0-1,4`).
    pub fn cpuset(cpus: &str) -> Self {
        ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                resources: Some(LinuxResources::cpuset(cpus, "")),
            }),
        }
    }
}

/// `LinuxContainerAdjustment`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    /// Resources to set.
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
}

/// `ContainerUpdate`: new resources for an existing container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    /// The runtime's container id ([`Container::id`]).
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Linux resources.
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    /// A failure to apply it does not fail the request that carried it.
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

impl ContainerUpdate {
    /// Re-pins container `id` to `cpus`; only the cpuset changes.
    pub fn cpuset(id: &str, cpus: &str) -> Self {
        ContainerUpdate {
            container_id: id.to_string(),
            linux: Some(LinuxContainerUpdate {
                resources: Some(LinuxResources::cpuset(cpus, "")),
            }),
            ignore_failure: false,
        }
    }
}

/// `LinuxContainerUpdate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    /// Resources to set.
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}
