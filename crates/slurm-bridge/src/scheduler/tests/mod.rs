//! One reconcile pass, tested in milliseconds: a fake Slurm ([`fake_slurm`]) and an in-memory
//! Kubernetes API ([`fake_kube`]) behind the real [`Ctx`], the real `reconcile` and
//! `error_policy`.
//!
//! A test describes a [`World`] (objects in the API server, nodes, Slurm jobs in the watcher
//! index and in Slurm, failures to inject, passes to run first), runs one pass of one pod, and
//! compares what the pass did with a [`Row`]: the Slurm writes (in order), the Kubernetes writes
//! (as a set), and the returned [`Action`] (or the error and `error_policy`'s retry). Rows live
//! in [`reconcile_table`]; adding a case is adding a `Row`.

mod fake_kube;
mod fake_slurm;
mod harness;
mod objects;
mod reconcile_table;
mod restart;
mod submit_slots;
mod world;
mod writer_race;

pub use harness::*;
pub use objects::*;
pub use world::*;

use crate::scheduler::runner::Action;
use crate::wellknown::{FINALIZER, LABEL_SLURM_JOBID};
pub use axum::http::Method;
pub use fake_slurm::FIRST_SUBMITTED_ID;
use serde_json::json;
use slurm_rest::models::JobState;
use std::time::Duration;

/// The scheduler's name in the tests' config.
pub const SCHEDULER: &str = "slurm-bridge-scheduler";

/// The namespace of every namespaced object the builders make.
pub const NS: &str = "ns";

/// What a row expects the pass to return.
#[derive(Clone, Debug)]
pub enum Expect {
    /// `Action::await_change()`.
    Await,
    /// `Action::requeue(d)`.
    Requeue(Duration),
    /// A requeue after more than zero and at most this (a delay counted from a time stamp).
    RequeueWithin(Duration),
    /// The pass failed with an error whose text contains this; `error_policy` retries after
    /// `retry` (the first failure of the pod: 0.5 s).
    Failed {
        error: &'static str,
        retry: Duration,
    },
}

/// The requeue delay of an action.
pub fn requeue_after(action: &Action) -> Option<Duration> {
    action.requeue_after()
}

/// One case: the world, the pod whose pass is tested, and what the pass must do.
#[derive(Clone)]
pub struct Row {
    pub name: &'static str,
    pub world: fn() -> World,
    /// The pod (`ns/<pod>`) whose pass is tested.
    pub pod: &'static str,
    /// Slurm writes, in order ([`fake_slurm::SlurmCall::describe`]).
    pub slurm: &'static [&'static str],
    /// Kubernetes writes, in any order ([`fake_kube::KubeWrite::describe`]).
    pub kube: &'static [&'static str],
    pub action: Expect,
}

impl Row {
    /// Runs the row; `Err` says what differed.
    pub async fn check(&self) -> Result<(), String> {
        let h = Harness::new((self.world)()).await;
        let out = h.pass(self.pod).await;
        let mut problems = Vec::new();
        if out.slurm != self.slurm {
            problems.push(format!(
                "Slurm calls: expected {:?}, got {:?}",
                self.slurm, out.slurm
            ));
        }
        let mut want: Vec<&str> = self.kube.to_vec();
        want.sort();
        let mut got: Vec<&str> = out.kube.iter().map(String::as_str).collect();
        got.sort();
        if want != got {
            problems.push(format!("Kubernetes writes: expected {want:?}, got {got:?}"));
        }
        let after = requeue_after(&out.action);
        match (&self.action, &out.error) {
            (Expect::Failed { error, retry }, Some(e)) => {
                if !e.contains(error) {
                    problems.push(format!("error {e:?} does not contain {error:?}"));
                }
                if after != Some(*retry) {
                    problems.push(format!("retry after {after:?}, expected {retry:?}"));
                }
            }
            (Expect::Failed { error, .. }, None) => problems.push(format!(
                "the pass succeeded ({:?}), expected an error containing {error:?}",
                out.action
            )),
            (_, Some(e)) => problems.push(format!("the pass failed: {e}")),
            (Expect::Await, None) if after.is_some() => {
                problems.push(format!("expected await_change, got {:?}", out.action))
            }
            (Expect::Requeue(d), None) if after != Some(*d) => problems.push(format!(
                "expected requeue after {d:?}, got {:?}",
                out.action
            )),
            (Expect::RequeueWithin(d), None)
                if !after.is_some_and(|a| a > Duration::ZERO && a <= *d) =>
            {
                problems.push(format!(
                    "expected requeue within {d:?}, got {:?}",
                    out.action
                ))
            }
            _ => {}
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n    "))
        }
    }
}

/// Runs every row and reports every failing one (not only the first).
pub async fn check_rows(rows: &[Row]) {
    let mut names = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for row in rows {
        assert!(names.insert(row.name), "two rows are named {}", row.name);
        let started = std::time::Instant::now();
        if let Err(e) = row.check().await {
            failures.push(format!("{}:\n    {e}", row.name));
        }
        // Not a speed check: a row that ran into a real timeout (a 5 s client deadline, a 30 s
        // requeue) instead of the decision it names is broken. The bound is far above a row's
        // own time (milliseconds) so a loaded machine does not trip it.
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "row {} took {took:?}: it waited on a real timer",
            row.name
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
