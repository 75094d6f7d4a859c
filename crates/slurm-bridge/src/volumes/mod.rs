//! Volumes for pods that Slurm schedules, as kube-scheduler's VolumeBinding plugin (issue 20).
//!
//! Pure decisions over a [`VolumeSnapshot`]: before submit, [`fit`] says which nodes can
//! serve a pod's PVCs (or why it cannot be submitted yet); after Slurm allocated, [`plan_pod`]
//! says what each claim gets on the chosen node. [`bind`] then writes the plan (PV claimRef,
//! `volume.kubernetes.io/selected-node`), undoes it on failure, and reports progress.

pub mod bind;
pub mod claims;
pub mod error;
pub mod filter;
pub mod matching;
pub mod plan;
pub mod selectors;
pub mod snapshot;

#[cfg(test)]
mod tests;

pub use bind::{Applied, Progress, all_bound, apply, fetch_progress, undo};
pub use claims::{PodClaim, has_claims, pod_claims};
pub use error::VolumeError;
pub use filter::{FitKey, VolumeFit, fit};
pub use plan::{ClaimAction, Reserved, VolumePlan, plan_pod};
pub use snapshot::VolumeSnapshot;
