//! CPUs: a batch job's step and a pod's container on one node each run on the CPUs Slurm gave
//! their job, disjoint; a CPU-bound step and a CPU-bound pod keep their pace side by side; a
//! pod the bridge did not bind is left alone, whatever job label its author wrote.

use crate::e2e::{self, job_field, job_id_of, node_of, wait_some};
use crate::support::{
    NodeAgent, PRINT_CPUS, WAIT, batch_output, job_cpus, logs, pod, printed_cpus, sbatch, start,
    wait_output, wait_pod_cpus,
};
use kube::api::DeleteParams;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Instant;

/// A CPU-bound shell loop printing `tick <uptime>` every 20,000 rounds.
const SPIN: &str = "i=0; while :; do i=$((i+1)); if [ $((i % 20000)) = 0 ]; then read u _ < /proc/uptime; echo tick $u; fi; done";

/// Rounds per second from the `from`-th tick to the last one in `text` (`/proc/uptime` counts
/// hundredths of a second: a span of many ticks keeps the error small).
fn rate(text: &str, from: usize) -> f64 {
    let t: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tick ")?.trim().parse().ok())
        .skip(from)
        .collect();
    match (t.first(), t.last()) {
        (Some(a), Some(b)) if b > a => 20_000.0 * (t.len() - 1) as f64 / (b - a),
        _ => 0.0,
    }
}

fn ticks(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with("tick ")).count()
}

#[tokio::test]
async fn a_batch_step_and_a_pod_each_run_on_the_cpus_slurm_gave_their_job() {
    let started = Instant::now();
    let (env, _controllers) = start(None).await;
    let host = env.slurm.host_cpus().expect("cgroups");
    assert!(
        host.count() >= 2,
        "this test needs a host of 2 CPUs or more; it has {}",
        host.count()
    );
    let agent = NodeAgent::start(&env).await;
    eprintln!("environment ready in {:?}", started.elapsed());

    // The pod first, alone on the node: one CPU, pinned by the agent to its job's CPU.
    let resources =
        json!({"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"memory": "32Mi"}});
    env.create_pod(pod(
        &env,
        "spinner",
        resources,
        &format!("{PRINT_CPUS}; {SPIN}"),
    ))
    .await;
    let p = env.wait_bound(&["spinner".into()], WAIT).await.remove(0);
    assert_eq!(node_of(&p), "node-1");
    let pod_job = job_id_of(&p);
    let pod_cpus = job_cpus(&env, pod_job);
    assert_eq!(pod_cpus.len(), 1, "one CPU for a 1-CPU pod: {pod_cpus:?}");
    let seen = wait_pod_cpus(&env, "spinner", "(any)", |_| true).await;
    assert_eq!(
        seen, pod_cpus,
        "the pod's container runs on its job's CPU_IDs"
    );
    agent.wait_log("pinned").await;

    // Its pace alone: 20 ticks.
    let alone = wait_some("20 ticks of the pod alone", WAIT, async || {
        let l = logs(&env, "spinner").await;
        (ticks(&l) >= 20).then_some(l)
    })
    .await;
    let pod_alone = rate(&alone, 2);

    // A CPU-bound batch step beside it: Slurm gives it the other CPU, and cgroups keep it there.
    let batch = sbatch(&env, "100", &format!("srun sh -c '{PRINT_CPUS}; {SPIN}'"));
    let out = wait_output(&env, &batch, "shows its CPUs", |l| l.starts_with("cpus=")).await;
    let batch_cpus = job_cpus(&env, &batch);
    assert_eq!(
        printed_cpus(&out),
        vec![batch_cpus.clone()],
        "the step runs on its job's CPU_IDs"
    );
    assert!(
        batch_cpus.is_disjoint(&pod_cpus),
        "batch {batch_cpus:?} and pod {pod_cpus:?} share CPUs"
    );
    assert_eq!(job_field(&env, &batch, "NodeList"), "node-1");
    assert_eq!(job_field(&env, pod_job, "JobState"), "RUNNING");

    // Both spin at once: each keeps its pace (figures printed; the machine is shared, so no
    // timing is asserted, only that both make progress on their own CPUs).
    let before = ticks(&logs(&env, "spinner").await);
    let side = wait_some("20 more ticks of each side by side", WAIT, async || {
        let l = logs(&env, "spinner").await;
        let b = std::fs::read_to_string(batch_output(&env, &batch)).unwrap_or_default();
        (ticks(&l) >= before + 20 && ticks(&b) >= 20).then_some((l, b))
    })
    .await;
    let pod_side = rate(&side.0, before + 2);
    let batch_side = rate(&side.1, 2);
    assert!(pod_side > 0.0 && batch_side > 0.0);
    // The pod's CPUs did not change under the batch job.
    assert_eq!(
        printed_cpus(&logs(&env, "spinner").await),
        vec![pod_cpus.clone()]
    );
    env.assert_invariants().await;

    // The pod goes (its job ends with it); the batch step's pace alone.
    env.pods()
        .delete("spinner", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("spinner", "gone", WAIT, |p| p.is_none()).await;
    env.wait_job_ended(pod_job, WAIT).await;
    let out = batch_output(&env, &batch);
    let before = ticks(&std::fs::read_to_string(&out).unwrap());
    let alone = wait_some("20 more ticks of the batch step alone", WAIT, async || {
        let b = std::fs::read_to_string(&out).unwrap_or_default();
        (ticks(&b) >= before + 20).then_some(b)
    })
    .await;
    let batch_alone = rate(&alone, before + 2);
    eprintln!(
        "rounds/s of a CPU-bound shell loop: pod alone {pod_alone:.0}, side by side {pod_side:.0}; batch step side by side {batch_side:.0}, alone {batch_alone:.0}"
    );
    env.slurm.run(&["scancel", &batch]).unwrap();
    env.assert_invariants().await;
    drop(agent);
    eprintln!("test done in {:?}", started.elapsed());
}

#[tokio::test]
async fn a_pod_the_bridge_did_not_bind_is_left_alone_even_with_a_forged_job_label() {
    let (env, _controllers) = start(None).await;
    let all: BTreeSet<u32> = env
        .slurm
        .host_cpus()
        .expect("cgroups")
        .to_machine(&(0..env.slurm.host_cpus().unwrap().count()).collect::<Vec<_>>())
        .into_iter()
        .collect();
    let agent = NodeAgent::start(&env).await;

    // A bridge pod, pinned to its job's CPU.
    let resources = json!({"requests": {"cpu": "1", "memory": "32Mi"}});
    env.create_pod(pod(
        &env,
        "bridged",
        resources.clone(),
        &format!("{PRINT_CPUS}; sleep 3600"),
    ))
    .await;
    let p = env.wait_bound(&["bridged".into()], WAIT).await.remove(0);
    let job = job_id_of(&p);
    let pinned = wait_pod_cpus(&env, "bridged", "(any)", |_| true).await;
    assert_eq!(pinned, job_cpus(&env, job));

    // A pod placed on node-1 by its author (no scheduler, tolerating the managed-node taint)
    // carrying that job's label: the job does not name it, so the agent does not pin it to the
    // job's CPUs.
    let image = env.kube_env.image().unwrap();
    let forged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forged", "namespace": e2e::NS,
                     "labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: job.to_string()}},
        "spec": {"nodeName": "node-1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "tolerations": [{"key": slurm_bridge::wellknown::TAINT_MANAGED_NODE, "operator": "Exists"}],
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", format!("{PRINT_CPUS}; sleep 3600")],
                                 "resources": resources}]},
    });
    env.create(forged).await;
    let seen = wait_pod_cpus(&env, "forged", "(any)", |_| true).await;
    assert_eq!(seen, all, "a pod the bridge did not bind keeps every CPU");
    agent.wait_log("the label is not the bridge's").await;
    // Slurm still has one job, the bridge pod's.
    assert_eq!(env.active_job_ids(), vec![job]);

    // The forged pod going does not end the job it named.
    env.pods()
        .delete("forged", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("forged", "gone", WAIT, |p| p.is_none()).await;
    assert!(
        env.job_running(job).await,
        "job {job} ended with a pod it does not name"
    );
    env.assert_invariants().await;

    env.pods()
        .delete("bridged", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("bridged", "gone", WAIT, |p| p.is_none()).await;
    env.wait_job_ended(job, WAIT).await;
    env.assert_invariants().await;
}
