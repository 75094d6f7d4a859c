//! Hybrid nodes (issue 38, item 2): a batch job's step (sbatch with srun, run by slurmd) and a
//! pod's container (run by the kubelet) at once on one hybrid node, on disjoint Slurm CPUs, each
//! leaving proof it ran.

use crate::e2e::{job_field, job_id_of, node_of, wait_some};
use crate::support::{
    WAIT, container_running, real_pod, shared, start_hybrid, wait_logs, wait_no_external_job,
    wait_released,
};
use kube::api::DeleteParams;
use std::collections::BTreeSet;
use std::time::Instant;

/// `scontrol show -d job`'s `CPU_IDs=0-1,4` as CPU ids.
fn cpu_ids(env: &crate::e2e::Env, id: &str) -> BTreeSet<u32> {
    let text = env
        .slurm
        .run(&["scontrol", "show", "-d", "job", id])
        .unwrap();
    let list = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CPU_IDs="))
        .unwrap_or_else(|| panic!("no CPU_IDs in {text}"));
    list.split(',')
        .flat_map(|r| match r.split_once('-') {
            Some((a, b)) => a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap(),
            None => r.parse::<u32>().unwrap()..=r.parse::<u32>().unwrap(),
        })
        .collect()
}

#[tokio::test]
async fn a_batch_job_and_a_pod_run_at_once_on_one_hybrid_node() {
    let started = Instant::now();
    let (env, _controllers) = start_hybrid(1).await;
    eprintln!("environment ready in {:?}", started.elapsed());
    let work = env.slurm.dir().join("work");

    // The batch job's step prints where it runs, then waits for the test's go (a file in the
    // job's working folder) so that it is seen running beside the pod.
    let batch = env
        .slurm
        .run(&[
            "sbatch",
            "--parsable",
            "-n",
            "1",
            "--mem=100",
            "--wrap",
            "srun sh -c 'echo batch-step-on-$SLURMD_NODENAME; \
             while [ ! -e go ]; do sleep 0.2; done; echo batch-step-done'",
        ])
        .expect("sbatch")
        .trim()
        .to_string();
    let out = work.join(format!("slurm-{batch}.out"));
    wait_some("the batch step's first line", WAIT, async || {
        std::fs::read_to_string(&out)
            .ok()
            .filter(|t| t.contains("batch-step-on-node-1"))
    })
    .await;
    assert_eq!(job_field(&env, &batch, "JobState"), "RUNNING");

    // A pod (not exclusive, half a CPU) bound through Slurm to the same node: its container
    // runs on the real kubelet while the batch step runs.
    env.create_pod(real_pod(
        &env,
        "beside",
        shared(),
        "500m",
        1,
        "echo pod-on-$(hostname); sleep 3600",
    ))
    .await;
    let pod = env.wait_bound(&["beside".into()], WAIT).await.remove(0);
    assert_eq!(node_of(&pod), "node-1");
    wait_logs(&env, "beside", "pod-on-beside").await;
    let pod = env
        .wait_pod("beside", "container running", WAIT, |p| {
            p.is_some_and(container_running)
        })
        .await
        .unwrap();
    let pod_job = job_id_of(&pod).to_string();

    // Both at once, on node-1, on disjoint CPUs of Slurm's.
    for id in [&batch, &pod_job] {
        assert_eq!(job_field(&env, id, "JobState"), "RUNNING", "job {id}");
        assert_eq!(job_field(&env, id, "NodeList"), "node-1", "job {id}");
    }
    let (b, p) = (cpu_ids(&env, &batch), cpu_ids(&env, &pod_job));
    assert!(!b.is_empty() && !p.is_empty());
    assert!(b.is_disjoint(&p), "batch CPUs {b:?} vs pod CPUs {p:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("batch-step-done"), "{text}");
    env.assert_invariants().await;

    // The batch step ends on the go and its job COMPLETES; the pod still runs.
    std::fs::write(work.join("go"), "").unwrap();
    wait_some("batch job COMPLETED", WAIT, async || {
        (job_field(&env, &batch, "JobState") == "COMPLETED").then_some(())
    })
    .await;
    assert_eq!(job_field(&env, &batch, "ExitCode"), "0:0");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["batch-step-on-node-1", "batch-step-done"]
    );
    assert!(env.job_running(job_id_of(&pod)).await);

    // The pod goes: its container stops, its job ends, its finalizer is released.
    env.pods()
        .delete("beside", &DeleteParams::default())
        .await
        .unwrap();
    wait_released(&env, "beside").await;
    env.wait_pod("beside", "gone", WAIT, |p| p.is_none()).await;
    env.wait_job_ended(job_id_of(&pod), WAIT).await;
    wait_no_external_job(&env).await;
    env.assert_invariants().await;
    eprintln!("test done in {:?}", started.elapsed());
}
