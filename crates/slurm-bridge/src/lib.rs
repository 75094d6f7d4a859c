//! slurm-bridge: runs Slurm as the scheduler for selected Kubernetes workloads.
//!
//! A group of pods becomes one Slurm external job ([`workload`]); the `translate`
//! subcommand ([`cli::translate`]) shows that mapping for manifests without a cluster.

pub mod admission;
pub mod backoff;
pub mod caches;
pub mod cli;
pub mod config;
pub mod controllers;
pub mod dra;
pub mod k8s;
pub mod leader;
pub mod node_agent;
pub mod resources;
pub mod scheduler;
pub mod server;
pub mod slurm;
pub mod small_set;
pub mod sync;
pub mod tenancy;
pub mod volumes;
pub mod wellknown;
pub mod workload;
