//! The node agent's own lifecycle: started after a pod's container runs, it pins the container
//! without restarting it; restarted, it leaves pinned containers as they are; stopped, nothing
//! it pinned is killed.

use crate::e2e::job_id_of;
use crate::support::{NodeAgent, PRINT_CPUS, WAIT, job_cpus, pod, start, wait_pod_cpus};
use kube::api::DeleteParams;
use serde_json::json;

fn container_id(p: &k8s_openapi::api::core::v1::Pod) -> (String, i32) {
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .expect("a container status");
    (c.container_id.clone().unwrap_or_default(), c.restart_count)
}

#[tokio::test]
async fn an_agent_started_after_a_pod_pins_its_running_container_without_restarting_it() {
    let (env, _controllers) = start(None).await;
    let every = env.slurm.host_cpus().expect("cgroups").count() as usize;

    // No agent yet: the container runs on every CPU.
    let resources = json!({"requests": {"cpu": "1", "memory": "32Mi"}});
    let script = format!("while :; do {PRINT_CPUS}; sleep 0.3; done");
    env.create_pod(pod(&env, "early", resources, &script)).await;
    let p = env.wait_bound(&["early".into()], WAIT).await.remove(0);
    let job = job_id_of(&p);
    let want = job_cpus(&env, job);
    wait_pod_cpus(&env, "early", "on every CPU", |c| c.len() == every).await;
    let p = env
        .wait_pod("early", "container started", WAIT, |p| {
            p.and_then(|p| {
                p.status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .container_id
                    .clone()
            })
            .is_some()
        })
        .await
        .unwrap();
    let before = container_id(&p);

    // The agent connects: the runtime's synchronization re-pins the running container.
    let agent = NodeAgent::start(&env).await;
    wait_pod_cpus(&env, "early", "on its job's CPUs", |c| c == &want).await;
    agent.wait_log("re-pinning a running container").await;
    let p = env.pods().get("early").await.unwrap();
    assert_eq!(container_id(&p), before, "the container was not restarted");
    // Its probes: ready (registered with containerd), the re-pin counted.
    agent.wait_ready().await;
    assert_eq!(agent.get("/healthz").await.0, 200);
    let (code, metrics) = agent.get("/metrics").await;
    assert_eq!(code, 200);
    for line in [
        "slurm_bridge_node_agent_containers_repinned_total 1",
        "slurm_bridge_node_agent_nri_registered 1",
        "slurm_bridge_node_agent_nri_registrations_total 1",
    ] {
        assert!(metrics.contains(line), "{line}:\n{metrics}");
    }

    // Restarted, the agent finds it pinned already: nothing changes, nothing is killed.
    agent.stop().await;
    let agent = NodeAgent::start(&env).await;
    let p = env.pods().get("early").await.unwrap();
    assert_eq!(container_id(&p), before);
    wait_pod_cpus(&env, "early", "still on its job's CPUs", |c| c == &want).await;
    assert!(env.job_running(job).await);
    env.assert_invariants().await;

    env.pods()
        .delete("early", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("early", "gone", WAIT, |p| p.is_none()).await;
    env.wait_job_ended(job, WAIT).await;
    env.assert_invariants().await;
    drop(agent);
}
