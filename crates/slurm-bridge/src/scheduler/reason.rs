//! The PodScheduled reasons the scheduler sets on the pods it cannot bind yet (beside
//! Kubernetes' own `Unschedulable` family), also used as the reasons of its Events.

/// Waiting for the rest of a gang.
pub const WAITING_FOR_GANG: &str = "WaitingForGang";
/// An incomplete gang waited longer than its PodGroup's `scheduleTimeoutSeconds` (a Warning).
pub const GANG_TIMEOUT: &str = "GangTimeout";
/// A coscheduling PodGroup that admits no new job.
pub const POD_GROUP_CLOSED: &str = "PodGroupClosed";
/// The Slurm job is pending; the message carries Slurm's state_reason.
pub const SLURM_JOB_PENDING: &str = "SlurmJobPending";
/// The Slurm job is suspended; its pods are bound when it resumes.
pub const SLURM_JOB_SUSPENDED: &str = "SlurmJobSuspended";
/// Slurm rejected the job; the message carries Slurm's error text.
pub const SLURM_SUBMIT_FAILED: &str = "SlurmSubmitFailed";
/// slurmrestd could not be reached.
pub const SLURM_UNAVAILABLE: &str = "SlurmUnavailable";
/// A `slurmjob.slinky.slurm.net/*` annotation is invalid; the message names the key.
pub const INVALID_ANNOTATION: &str = "InvalidAnnotation";
/// The pod's tenant ([`crate::tenancy`]) does not allow what its authors asked of Slurm (a
/// user, account, QoS, partition, priority, reservation or wckey), or its namespace has no
/// tenant; the message names each key, the namespace and what is accepted.
pub const NOT_ALLOWED_BY_TENANT: &str = "NotAllowedByTenant";
/// The pod's group could not be worked out (an owner missing, ...).
pub const TRANSLATION_FAILED: &str = "TranslationFailed";
/// No Kubernetes node suits the pod.
pub const NO_FEASIBLE_NODES: &str = "NoFeasibleNodes";
/// The pod's volumes cannot be served yet (a claim missing, an unbound Immediate claim, a
/// missing StorageClass...); the message is kube-scheduler's. Retried when a claim changes.
pub const VOLUMES_NOT_READY: &str = "VolumesNotReady";
/// Slurm allocated the pod's node; its claims are being bound there before the pod is.
pub const WAITING_FOR_VOLUMES: &str = "WaitingForVolumes";
/// Reserving a PV for a claim, or selecting the node for provisioning, failed.
pub const VOLUME_BINDING_FAILED: &str = "VolumeBindingFailed";
/// The allocation could not be mapped to Kubernetes nodes.
pub const ALLOCATION_UNMAPPED: &str = "SlurmAllocationUnmapped";
/// The group's allocated job does not cover the pod (it joined after the allocation, or
/// Slurm granted fewer nodes than the group has pods): it gets a job of its own.
pub const OUTSIDE_GROUP_ALLOCATION: &str = "OutsideGroupAllocation";
/// Labelling or binding the pod failed; the message carries the API server's answer.
pub const BINDING_FAILED: &str = "BindingFailed";
/// Cancelling a job that no longer stands for a runnable gang failed.
pub const SLURM_CANCEL_FAILED: &str = "SlurmCancelFailed";
/// Another Kubernetes write of the scheduler failed (a label removal, ...).
pub const SCHEDULER_ERROR: &str = "SchedulerError";
/// Writing `PodGroupScheduled` on a built-in PodGroup failed (an Event only).
pub const POD_GROUP_UPDATE_FAILED: &str = "PodGroupUpdateFailed";
