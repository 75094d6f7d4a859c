//! One module per family of inputs.

mod annotations;
mod dra_slices;
mod kube_text;
mod review_and_config;
mod slurm_text;
mod slurmrestd;
