//! Real Slurm for tests, as controller-runtime's envtest is for kube-apiserver.
//!
//! A Debian-unstable root file system with Slurm 26.05 is built once with debootstrap and cached
//! outside the checkout ([`rootfs`]). Each [`Instance`] runs its own slurmctld and slurmrestd
//! (JWT auth, data_parser v0.0.44) inside that root file system on free loopback ports, with its
//! own slurm.conf, keys, state and logs, so tests run in parallel. An instance stops when its
//! handle is dropped; a watchdog stops it if the test process dies first, and the next start
//! sweeps anything left behind.
//!
//! With [`InstanceOptions::accounting`] an instance also runs its own MariaDB server and slurmdbd
//! ([`accounting`]): associations, limits and QoS are enforced and priority is multifactor
//! (fairshare); [`Instance::sacctmgr`], [`Instance::add_unix_user`] and
//! [`Instance::add_unix_group`] set up tenants.
//!
//! With [`InstanceOptions::cgroups`] the slurmd-run nodes confine job steps with Slurm's own
//! cgroups (v1): they are the host's real CPUs ([`Instance::machine_cpus`]), a step may run only
//! on its job's CPUs ([`Instance::job_cpu_ids`], [`cpus::cpus_allowed_list`]) and within its
//! memory.
//!
//! ```no_run
//! let slurm = slurm_testenv::Instance::start(slurm_testenv::InstanceOptions {
//!     nodes: 2,
//!     ..Default::default()
//! })?;
//! println!("{} {}", slurm.rest_url(), slurm.run(&["sinfo"])?);
//! # Ok::<(), slurm_testenv::Error>(())
//! ```

pub mod accounting;
mod cgroup;
pub mod conf;
pub mod cpus;
mod error;
pub mod http;
mod instance;
pub mod mirror;
mod node;
pub mod paths;
pub mod ports;
pub mod process;
pub mod rootfs;
mod sandbox;
pub mod shell;

pub use error::{Error, Result};
pub use instance::{DATA_PARSER, Daemon, Instance, InstanceOptions, sweep_stale};
pub use node::NodeSpec;
