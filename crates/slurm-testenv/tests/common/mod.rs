//! What the slurm-testenv test binaries share: reading a job's fields, submitting, and polling
//! until Slurm shows a state.

#![allow(dead_code)]

use slurm_testenv::Instance;
use std::time::{Duration, Instant};

/// `scontrol show job` field `key` of job `id` (e.g. `JobState`).
pub fn job_field(inst: &Instance, id: &str, key: &str) -> String {
    let text = inst.run(&["scontrol", "show", "job", id]).unwrap();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

/// Polls `check` every 100 ms until it holds (returns `None`); panics with `what` and the last
/// thing `check` saw after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match check() {
            None => return,
            Some(now) => last = now,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} within {timeout:?}; last seen: {last}");
}

/// Waits until job `id`'s `JobState` is `state`.
pub fn wait_job_state(inst: &Instance, id: &str, state: &str, timeout: Duration) {
    wait_for(&format!("job {id} {state}"), timeout, || {
        let now = job_field(inst, id, "JobState");
        (now != state).then_some(now)
    });
}

/// `sbatch --parsable` with `args`; the job id.
pub fn submit(inst: &Instance, args: &[&str]) -> String {
    let mut argv = vec!["sbatch", "--parsable"];
    argv.extend_from_slice(args);
    inst.run(&argv).unwrap().trim().to_string()
}
