//! The node agent as the node's `dra.cpu` DRA driver (`--dra-cpu`) on a real kubelet: it
//! publishes the node's CPUs as a ResourceSlice, the kubelet registers its plugin, and a pod
//! asking `deviceclass.resource.kubernetes.io/dra.cpu` is scheduled through Slurm, its claim
//! (written by the bridge) prepared by the agent, and its container started seeing (`DRA_CPUS`,
//! from the agent's CDI spec) and running on (the NRI pin) exactly its job's CPUs, beside a
//! batch step on the others. Deleting the pod unprepares the claim and ends the job.

use crate::e2e::{self, Env, NS, claim_name, job_field, job_id_of, node_of, wait_some};
use crate::support::{
    NodeAgent, PRINT_CPUS, WAIT, job_cpus, logs, pod, printed_cpus, sbatch, start, wait_output,
};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_testenv::KubeletDirs;
use serde_json::json;
use slurm_bridge::dra::NodeInventory;
use slurm_bridge::resources::cpulist::parse_cpu_list;
use std::collections::BTreeSet;
use std::time::Instant;

const DRA_CPU: &str = "deviceclass.resource.kubernetes.io/dra.cpu";

/// The CPU list a pod printed as `dra=<list>` (its `DRA_CPUS`).
fn printed_dra_cpus(text: &str) -> Option<BTreeSet<u32>> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("dra="))
        .map(|l| parse_cpu_list(l).expect("a CPU list in DRA_CPUS"))
}

/// The `dra.cpu` DeviceClass, and the agent as the node's driver; waits until its slice holds
/// every CPU of the host (`host_count`), as the bridge's inventory reads it.
async fn start_driver(env: &Env, host_count: usize) -> (NodeAgent, KubeletDirs) {
    let dc: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "dra.cpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"dra.cpu\""}}]},
    }))
    .unwrap();
    Api::<DeviceClass>::all(env.kube.clone())
        .create(&PostParams::default(), &dc)
        .await
        .unwrap();
    let agent = NodeAgent::start_dra(env).await;
    let dirs = env.kube_env.kubelet_dirs("node-1").unwrap();
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    let inventory = wait_some("the agent's dra.cpu slice", WAIT, async || {
        let items = slices
            .list(&ListParams::default().fields("spec.nodeName=node-1,spec.driver=dra.cpu"))
            .await
            .ok()?
            .items;
        let inv = NodeInventory::from_slices("node-1", &items);
        (inv.cpus.cpus.len() == host_count).then_some(inv)
    })
    .await;
    assert_eq!(inventory.cpus.slurm_cpus(), host_count);
    (agent, dirs)
}

#[tokio::test]
async fn a_dra_cpu_pod_starts_on_a_real_kubelet_with_its_jobs_cpus() {
    let started = Instant::now();
    let (env, _controllers) = start(None).await;
    let host = env.slurm.host_cpus().expect("cgroups");
    let host_count = host.count() as usize;
    assert!(
        host.count() >= 2,
        "this test needs a host of 2 CPUs or more; it has {}",
        host.count()
    );
    let (agent, dirs) = start_driver(&env, host_count).await;
    eprintln!(
        "environment ready, plugin registered, slice published in {:?}",
        started.elapsed()
    );

    // The pod: one dra.cpu, memory set (Slurm holds it for its job).
    let created = Instant::now();
    let resources = json!({"requests": {DRA_CPU: "1", "memory": "32Mi"},
                           "limits": {DRA_CPU: "1", "memory": "32Mi"}});
    env.create_pod(pod(
        &env,
        "dra-cpu",
        resources,
        &format!("echo dra=$DRA_CPUS; {PRINT_CPUS}; sleep 3600"),
    ))
    .await;
    let p = env.wait_bound(&["dra-cpu".into()], WAIT).await.remove(0);
    let bound = created.elapsed();
    assert_eq!(node_of(&p), "node-1");
    let pod_job = job_id_of(&p);
    let want = job_cpus(&env, pod_job);
    assert!(!want.is_empty() && want.len() < host_count, "{want:?}");

    // The claim the bridge wrote names them; the agent prepared it (its CDI spec is there).
    let claim_name = claim_name(&p).expect("a claim for the dra.cpu pod");
    let claim = Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
        .get(&claim_name)
        .await
        .unwrap();
    let devices: BTreeSet<String> = e2e::allocated(&claim)
        .into_iter()
        .map(|(_, _, d)| d)
        .collect();
    let named: BTreeSet<String> = want.iter().map(|c| format!("cpu{c}")).collect();
    assert_eq!(devices, named, "the claim names the job's CPUs");
    let spec = dirs.cdi.join(format!(
        "dra.cpu-{}.json",
        claim.metadata.uid.as_deref().unwrap()
    ));

    // The container sees its CPUs and runs on them.
    let out = wait_some("the pod prints DRA_CPUS and its CPUs", WAIT, async || {
        let l = logs(&env, "dra-cpu").await;
        (printed_dra_cpus(&l).is_some() && !printed_cpus(&l).is_empty()).then_some(l)
    })
    .await;
    let running = created.elapsed();
    assert!(
        spec.exists(),
        "CDI spec {} of the prepared claim",
        spec.display()
    );
    assert_eq!(
        printed_dra_cpus(&out).unwrap(),
        want,
        "DRA_CPUS is the job's CPU_IDs"
    );
    assert_eq!(
        printed_cpus(&out),
        vec![want.clone()],
        "the container runs on its job's CPU_IDs"
    );
    agent.wait_log("prepared a dra.cpu claim").await;
    agent.wait_log("pinned").await;
    eprintln!("pod created → bound {bound:?}, → container output {running:?}");

    // A batch step beside it gets the other CPU(s), disjoint.
    let batch = sbatch(
        &env,
        "100",
        &format!("srun sh -c '{PRINT_CPUS}; sleep 600'"),
    );
    let out = wait_output(&env, &batch, "shows its CPUs", |l| l.starts_with("cpus=")).await;
    let batch_cpus = job_cpus(&env, &batch);
    assert_eq!(printed_cpus(&out), vec![batch_cpus.clone()]);
    assert!(
        batch_cpus.is_disjoint(&want),
        "batch {batch_cpus:?} and pod {want:?} share CPUs"
    );
    assert_eq!(job_field(&env, pod_job, "JobState"), "RUNNING");
    env.assert_invariants().await;

    // The pod goes: the kubelet unprepares the claim (the CDI spec goes), its job ends, the
    // claim is deleted; the batch job runs on.
    env.pods()
        .delete("dra-cpu", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("dra-cpu", "gone", WAIT, |p| p.is_none()).await;
    wait_some("the CDI spec removed", WAIT, async || {
        (!spec.exists()).then_some(())
    })
    .await;
    agent.wait_log("unprepared a dra.cpu claim").await;
    env.wait_job_ended(pod_job, WAIT).await;
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    wait_some("the claim deleted", WAIT, async || {
        claims
            .get_opt(&claim_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(job_field(&env, &batch, "JobState"), "RUNNING");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &batch]).unwrap();
    let status = agent.stop().await;
    assert!(status.success(), "the agent stops cleanly: {status:?}");
    eprintln!("test done in {:?}", started.elapsed());
}

/// Two pods of one job share the node (`pods-per-node: 2`, one `dra.cpu` each): Slurm gives the
/// job both CPUs, the bridge's claims split them, and each container sees and runs on its own
/// claim's CPU, not the whole job's. A restarted agent reads the prepared claims back from its
/// CDI specs and leaves both containers on their CPUs.
#[tokio::test]
async fn pods_of_one_job_each_run_on_their_claims_part_and_a_restarted_agent_keeps_it() {
    let (env, _controllers) = start(None).await;
    let host = env.slurm.host_cpus().expect("cgroups");
    let host_count = host.count() as usize;
    assert!(host_count >= 2, "this test needs 2 CPUs or more");
    let (agent, dirs) = start_driver(&env, host_count).await;
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "pair", "annotations": {
            "slurmjob.slinky.slurm.net/pods-per-node": "2",
            "slurmjob.slinky.slurm.net/exclusive": "false"}},
        "spec": {"minMember": 2}
    }))
    .await;
    let names: Vec<String> = ["pair-a", "pair-b"].map(String::from).to_vec();
    // Each prints its DRA_CPUS once and its CPUs every half second.
    let script = format!("echo dra=$DRA_CPUS; while :; do {PRINT_CPUS}; sleep 0.5; done");
    for name in &names {
        let resources = json!({"requests": {DRA_CPU: "1", "memory": "32Mi"},
                               "limits": {DRA_CPU: "1", "memory": "32Mi"}});
        let mut p = pod(&env, name, resources, &script);
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "pair"});
        env.create_pod(p).await;
    }
    let pods = env.wait_bound(&names, WAIT).await;
    let job = job_id_of(&pods[0]);
    assert!(pods.iter().all(|p| job_id_of(p) == job), "one Slurm job");
    let job_set = job_cpus(&env, job);
    let mut parts = Vec::new();
    for (name, p) in names.iter().zip(&pods) {
        let claim = Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
            .get(&claim_name(p).expect("a claim"))
            .await
            .unwrap();
        let claimed: BTreeSet<u32> = e2e::allocated(&claim)
            .into_iter()
            .map(|(_, _, d)| d.trim_start_matches("cpu").parse().unwrap())
            .collect();
        let out = wait_some(&format!("{name} prints its CPUs"), WAIT, async || {
            let l = logs(&env, name).await;
            (printed_dra_cpus(&l).is_some() && !printed_cpus(&l).is_empty()).then_some(l)
        })
        .await;
        assert_eq!(printed_dra_cpus(&out).unwrap(), claimed, "{name}: DRA_CPUS");
        assert_eq!(
            printed_cpus(&out)[0],
            claimed,
            "{name} runs on its claim's CPUs"
        );
        assert!(
            claimed.is_subset(&job_set),
            "{claimed:?} within {job_set:?}"
        );
        parts.push(claimed);
    }
    assert!(parts[0].is_disjoint(&parts[1]), "{parts:?}");
    assert_eq!(
        parts[0].union(&parts[1]).copied().collect::<BTreeSet<_>>(),
        job_set,
        "the two claims split the job's CPUs"
    );
    env.assert_invariants().await;

    // The agent restarts: it reads both claims back and leaves both containers where they are.
    let status = agent.stop().await;
    assert!(status.success());
    let agent = NodeAgent::start_dra(&env).await;
    agent
        .wait_log("dra.cpu claims prepared before a restart")
        .await;
    // Its slices were as it would write them: checked, not written again.
    agent
        .wait_log("the dra.cpu ResourceSlices are up to date")
        .await;
    agent.wait_log("NRI: synchronizing").await;
    for (name, claimed) in names.iter().zip(&parts) {
        let before = printed_cpus(&logs(&env, name).await).len();
        let now = wait_some(&format!("{name} prints its CPUs again"), WAIT, async || {
            let seen = printed_cpus(&logs(&env, name).await);
            (seen.len() > before + 1).then_some(seen)
        })
        .await;
        assert!(now.iter().all(|c| c == claimed), "{name}: {now:?}");
    }
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(!log.contains("re-pinning"), "nothing re-pinned:\n{log}");
    assert!(
        !log.contains("published the dra.cpu"),
        "no slice written:\n{log}"
    );

    // The pods go: both specs go, the job ends.
    for name in &names {
        env.pods()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for name in &names {
        env.wait_pod(name, "gone", WAIT, |p| p.is_none()).await;
    }
    wait_some("no CDI spec left", WAIT, async || {
        std::fs::read_dir(&dirs.cdi)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("dra.cpu-"))
            .then_some(())
    })
    .await;
    env.wait_job_ended(job, WAIT).await;
    env.assert_invariants().await;
}
