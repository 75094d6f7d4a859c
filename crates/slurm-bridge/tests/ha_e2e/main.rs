//! High availability on real Slurm and the real control plane, with `slurm-bridge` processes as
//! an admin runs them, two replicas each under leader election:
//! - fencing: the leader is paused (SIGSTOP) past its Lease, the standby takes over and acts,
//!   the old leader is resumed and sends nothing (its own write counter, Slurm's job list, the
//!   API server's Events), for `run` and for the split mode (`scheduler` and `controllers`, each
//!   with its Lease);
//! - failover: the leader is killed (SIGKILL) during a churn of pods, again and again; no pod is
//!   ever in two live Slurm jobs, and the failover times are printed (`HA_KILLS=10` for the full
//!   run, see the README);
//! - admission: two replicas serve the webhooks with certificates of one CA shared through a
//!   Secret, and the API server calls both with the one caBundle.
//!
//! The support: `replicas` (the processes, the Lease each competes for, their logs and write
//! counters) and `checks` (pods in Slurm jobs, Events by replica); the tests by what they prove:
//! `fencing`, `failover`, `webhooks`.

#[path = "../e2e/mod.rs"]
mod e2e;

mod checks;
mod failover;
mod fencing;
mod replicas;
mod webhooks;
