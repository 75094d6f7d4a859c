//! DRA devices of a node and of a pod (reference §1.6, §5.7, §5.10). Pure, no I/O.
//!
//! - [`NodeInventory`]: a node's CPUs (`dra.cpu`) and GPUs (`gpu.nvidia.com`, `gpu.example.com`
//!   and the config's `draDeviceDrivers`, [`GresDrivers`]) from its ResourceSlices, and the
//!   `Gres=`/`GresConf=` it registers in Slurm with.
//! - [`parse_gres_index`]: Slurm's GRES index lists (`0-1,3`).
//! - [`DeviceAsk`]: what a pod asks of DRA extended resources (`deviceclass.resource.kubernetes.io/<class>`).
//! - [`share`]: the part of a node's Slurm allocation that one pod gets, and [`claim_parts`] the
//!   ResourceClaim requests and allocation results naming exactly those devices.
//!
//! Merging slices (a difference from the reference, which let the last slice of a kind win): a
//! node's devices are the union of the devices of all its slices per driver. When two slices
//! describe the same CPU id or GPU index, the slice of the newer pool generation wins, then the
//! slice name sorting last, so the result does not depend on list order.
//!
//! Claims (`claims`) are the Kubernetes side: the scheduler makes a pod's claim at bind time, the
//! pod controller deletes it when the pod is done. The node controller reads [`NodeInventory`].

mod ask;
mod claim_parts;
pub mod claims;
mod drivers;
mod inventory;
mod share;
#[cfg(test)]
mod tests;

pub use crate::resources::gres_drivers::{
    DeviceIndex, GPU_EXAMPLE, GPU_NVIDIA, GresDriver, GresDrivers,
};
pub use ask::DeviceAsk;
pub use claim_parts::{ClaimParts, claim_parts};
pub use inventory::{GpuDevice, NodeInventory, parse_gres_index};
pub use share::{NodeAllocation, Share, share};

use crate::resources::bitmap::BitmapError;

/// The request name of CPUs in a generated claim.
pub const REQUEST_CPU: &str = "cpu";
/// The request name of GPUs in a generated claim (the GRES name).
pub const REQUEST_GPU: &str = "gpu";
/// Largest number of indices one GRES index list may expand to.
const MAX_INDICES: usize = 1 << 16;

/// Why DRA devices cannot be worked out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    #[error("GRES index list {input:?} does not parse (e.g. 0-1,3): {reason}")]
    Index { input: String, reason: String },
    #[error(transparent)]
    Bitmap(#[from] BitmapError),
    #[error(
        "the node has GPUs of more than one DRA driver ({0}); an external node takes one GPU type only"
    )]
    MixedGpus(String),
    #[error(
        "DeviceClass {class:?} is asked in containers {first:?} and {second:?}; a DRA class may be \
         asked in one container only"
    )]
    ClassInTwoContainers {
        class: String,
        first: String,
        second: String,
    },
    #[error("resource {resource}: {value} is not a whole number of devices")]
    NotWhole { resource: String, value: String },
    #[error(
        "the pod asks for CPU DRA resource \"deviceclass.resource.kubernetes.io/dra.cpu\" but \
         DeviceClass \"dra.cpu\" does not exist"
    )]
    NoCpuDeviceClass,
    #[error(
        "the pod asks for CPU DRA resource \"deviceclass.resource.kubernetes.io/dra.cpu\" but \
         node {node} has no dra.cpu ResourceSlice"
    )]
    NoCpuSlice { node: String },
    #[error(
        "Slurm allocated {allocated} CPU(s) on node {node} (cores {cores}); the pod asks for {asked}"
    )]
    NotEnoughCpus {
        node: String,
        cores: String,
        allocated: usize,
        asked: u64,
    },
    #[error(
        "not enough allocated Slurm GRES indices for DeviceClass {class:?} on node {node}: \
         requested {asked}, allocated {allocated}"
    )]
    NotEnoughGres {
        node: String,
        class: String,
        asked: u64,
        allocated: usize,
    },
    #[error("cpu ID {cpu} from the Slurm allocation not found on node {node}'s dra.cpu slices")]
    CpuNotOnNode { node: String, cpu: i64 },
    #[error(
        "GRES index {index} ({class}) from the Slurm allocation not found on node {node}'s \
         ResourceSlices ({count} device(s))"
    )]
    GpuNotOnNode {
        node: String,
        class: String,
        index: u32,
        count: usize,
    },
}
