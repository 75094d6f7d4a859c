//! `slurm-bridge run` as an admin starts it: one process with every component, against real
//! Slurm and the real control plane. A pod is scheduled, runs to completion, its Slurm job ends
//! and its finalizer goes; SIGTERM then stops the process cleanly.

mod e2e;

use e2e::{Env, job_id_of, pod};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

#[tokio::test]
async fn run_schedules_a_pod_and_ends_its_job_when_it_completes() {
    let env = Env::start(2).await;
    let dir = std::env::temp_dir().join(format!("slurm-bridge-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut child, config) = e2e::spawn_run(&env, &dir, "", std::iter::empty::<&str>());

    env.create_pod(pod(
        "once",
        json!({}),
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "6"],
                            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
        }),
    ))
    .await;
    let bound = env
        .wait_bound(&["once".into()], Duration::from_secs(90))
        .await;
    let id = job_id_of(&bound[0]);

    // `status` shows the running group with its Slurm job.
    let status = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args(["status", "-o", "json", "--config"])
        .arg(&config)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let groups: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let group = &groups[0];
    assert_eq!(group["group"], "default/once", "{groups}");
    assert_eq!(group["job_id"], id, "{groups}");
    assert_eq!(group["state"], "RUNNING", "{groups}");
    assert_eq!(group["bound"], 1, "{groups}");

    env.wait_job_ended(id, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = env.pods().get("once").await.unwrap();
        if !slurm_bridge::wellknown::holds_finalizer(&p) {
            assert_eq!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded")
            );
            break;
        }
        assert!(Instant::now() < deadline, "finalizer still held");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.assert_invariants().await;

    // SIGTERM: a clean exit.
    let status = e2e::terminate(&mut child).await;
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
