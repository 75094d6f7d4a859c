//! Registration from ResourceSlices, claims naming exactly what Slurm allocated (two pods of one
//! job on one node included), device-plugin GPUs without claims, and claims deleted when their
//! pods finish.

use crate::e2e::{self, NS, allocated, claim_name};
use crate::support::{
    DRA_CPU, DRA_GPU, DRA_NODE, PLUGIN_NODE, dra_pod, job_gres_indices, machine_cpus, scontrol,
    start, start_counting, wait_node,
};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dra_registration_claims_and_cleanup() {
    let (env, controllers, slurm) = start_counting().await;

    // Registration: CPUs and cores from the dra.cpu slice without its 2 E-cores, Gres/GresConf
    // from the gpu.example.com slice; device-plugin GPUs on the other node.
    let shown = wait_node(
        &env,
        DRA_NODE,
        &[
            "CPUTot=8",
            "Gres=gpu:gpu.example.com:4",
            "CoresPerSocket=4",
            "ThreadsPerCore=2",
        ],
    )
    .await;
    println!("{shown}");
    wait_node(&env, PLUGIN_NODE, &["Gres=gpu:nvidia.com:2"]).await;

    // A GPU pod: bound with an allocated claim naming the GRES indices Slurm chose.
    env.create_pod(dra_pod(
        "gpu-pod",
        "deviceclass.resource.kubernetes.io/gpu.example.com",
        "2",
        &["sleep", "8"],
    ))
    .await;
    let pod = env
        .wait_bound(&["gpu-pod".into()], Duration::from_secs(60))
        .await
        .remove(0);
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(DRA_NODE)
    );
    let job_id = e2e::job_id_of(&pod);
    // Its layout was read from Slurm once: by the job watcher when it saw the job start (the
    // claim plan reuses it), or by the plan when the watcher read the whole job instead.
    assert_eq!(
        slurm.resource_reads_of(job_id),
        1,
        "GET /resources/{job_id} once, reads: {:?}",
        slurm.resource_reads.lock().unwrap()
    );
    let name = claim_name(&pod).expect("extendedResourceClaimStatus set before binding");
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    let claim = claims.get(&name).await.unwrap();
    let detail = scontrol(
        &env,
        &["scontrol", "show", "-d", "job", &job_id.to_string()],
    );
    println!("{detail}");
    let idx = job_gres_indices(&detail);
    let want: Vec<(String, String, String)> = idx
        .iter()
        .take(2)
        .map(|i| {
            (
                "gpu.example.com".to_string(),
                "pool-numa0".to_string(),
                format!("gpu-{i}"),
            )
        })
        .collect();
    assert_eq!(allocated(&claim), want, "claim {claim:?}");
    let status = claim.status.as_ref().unwrap();
    let reserved = status.reserved_for.as_ref().unwrap();
    assert_eq!(reserved.len(), 1);
    assert_eq!(Some(reserved[0].uid.clone()), pod.uid());
    let selector = status
        .allocation
        .as_ref()
        .and_then(|a| a.node_selector.as_ref())
        .unwrap();
    assert_eq!(
        selector.node_selector_terms[0]
            .match_fields
            .as_ref()
            .unwrap()[0]
            .values,
        Some(vec![DRA_NODE.to_string()])
    );
    let mappings = &pod
        .status
        .as_ref()
        .unwrap()
        .extended_resource_claim_status
        .as_ref()
        .unwrap()
        .request_mappings;
    assert_eq!(mappings.len(), 1);
    assert_eq!(mappings[0].container_name, "main");
    assert_eq!(
        mappings[0].resource_name,
        "deviceclass.resource.kubernetes.io/gpu.example.com"
    );
    println!(
        "claim {name}: {}",
        serde_json::to_string_pretty(&claim).unwrap()
    );

    // A device-plugin GPU pod: GRES, and no claim.
    env.create_pod(e2e::pod(
        "plugin-pod",
        json!({}),
        json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
            "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}),
    ))
    .await;
    let plugin = env
        .wait_bound(&["plugin-pod".into()], Duration::from_secs(60))
        .await
        .remove(0);
    assert_eq!(
        plugin.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(PLUGIN_NODE)
    );
    assert_eq!(claim_name(&plugin), None);
    let plugin_job = scontrol(
        &env,
        &[
            "scontrol",
            "show",
            "-d",
            "job",
            &e2e::job_id_of(&plugin).to_string(),
        ],
    );
    assert!(plugin_job.contains("gres/gpu"), "{plugin_job}");
    let all = claims.list(&Default::default()).await.unwrap();
    assert_eq!(all.items.len(), 1, "only the GPU pod's claim");

    // The GPU pod finishes: its claim is deleted.
    env.wait_pod("gpu-pod", "finished", Duration::from_secs(60), |p| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded")
            || p.is_none()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while claims.get_opt(&name).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "claim {name} not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A CPU DRA pod: its claim selects the machine CPUs (SMT siblings) of its allocated cores.
    env.create_pod(dra_pod(
        "cpu-pod",
        "deviceclass.resource.kubernetes.io/dra.cpu",
        "2",
        &["sleep", "infinity"],
    ))
    .await;
    let cpu_pod = env
        .wait_bound(&["cpu-pod".into()], Duration::from_secs(60))
        .await
        .remove(0);
    let cpu_claim = claims
        .get(&claim_name(&cpu_pod).expect("CPU claim"))
        .await
        .unwrap();
    let layout = env
        .rest
        .job_resources(e2e::job_id_of(&cpu_pod))
        .await
        .unwrap();
    let bitmap = layout
        .iter()
        .find(|l| l.node == DRA_NODE)
        .and_then(|l| l.core_bitmap.clone())
        .unwrap();
    let cores = slurm_bridge::resources::bitmap::parse_core_bitmap(&bitmap).unwrap();
    let first = *cores.iter().next().expect("an allocated core");
    let want: BTreeSet<String> = machine_cpus(first)
        .iter()
        .map(|c| format!("cpu{c}"))
        .collect();
    let got: BTreeSet<String> = allocated(&cpu_claim)
        .into_iter()
        .map(|(driver, pool, device)| {
            assert_eq!((driver.as_str(), pool.as_str()), ("dra.cpu", DRA_NODE));
            device
        })
        .collect();
    assert_eq!(got, want, "core bitmap {bitmap}");

    env.assert_consistent().await;
    // The finished GPU pod lets go of the finalizer once its claim is gone.
    env.wait_pod(
        "gpu-pod",
        "without the finalizer",
        Duration::from_secs(30),
        |p| p.is_none_or(|p| p.finalizers().is_empty()),
    )
    .await;
    env.assert_invariants().await;
    controllers.stop().await;
}

/// Two pods of one gang that share a node (`pods-per-node: 2`) run as one Slurm job of 2 tasks on
/// one node; each gets a claim of its own, the two claims' devices are disjoint, and together
/// they are the GPUs Slurm allocated the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pods_of_a_job_on_one_node_get_disjoint_claims() {
    let (env, controllers) = start().await;
    wait_node(&env, DRA_NODE, &["Gres=gpu:gpu.example.com:4"]).await;
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "pair", "annotations": {"slurmjob.slinky.slurm.net/pods-per-node": "2"}},
        "spec": {"minMember": 2}
    }))
    .await;
    let names: Vec<String> = ["pair-a", "pair-b"].map(String::from).to_vec();
    for name in &names {
        let mut p = e2e::pod(
            name,
            json!({}),
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
                "command": ["sleep", "6"],
                "resources": {"requests": {DRA_GPU: "2", DRA_CPU: "2", "memory": "100Mi"},
                              "limits": {DRA_GPU: "2", DRA_CPU: "2"}}}]}),
        );
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "pair"});
        env.create_pod(p).await;
    }
    let pods = env.wait_bound(&names, Duration::from_secs(60)).await;
    let job_id = e2e::job_id_of(&pods[0]);
    for p in &pods {
        assert_eq!(e2e::job_id_of(p), job_id, "one Slurm job for the gang");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(DRA_NODE)
        );
    }
    let detail = scontrol(
        &env,
        &["scontrol", "show", "-d", "job", &job_id.to_string()],
    );
    println!("{detail}");
    assert!(detail.contains("NumNodes=1 "), "{detail}");
    assert!(detail.contains("NumTasks=2 "), "{detail}");
    let idx = job_gres_indices(&detail);
    assert_eq!(idx.len(), 4, "the job has both pods' GPUs: {detail}");

    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    let mut gpus_seen = BTreeSet::new();
    let mut cpus_seen = BTreeSet::new();
    let mut claim_names = Vec::new();
    for p in &pods {
        let name = claim_name(p).expect("each pod has its claim");
        let claim = claims.get(&name).await.unwrap();
        let reserved = claim
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.clone())
            .unwrap();
        assert_eq!(
            Some(reserved[0].uid.clone()),
            p.uid(),
            "reserved for its own pod"
        );
        let devices = allocated(&claim);
        let gpus: Vec<_> = devices
            .iter()
            .filter(|d| d.0 == "gpu.example.com")
            .collect();
        let cpus: Vec<_> = devices.iter().filter(|d| d.0 == "dra.cpu").collect();
        assert_eq!(
            (gpus.len(), cpus.len()),
            (2, 2),
            "{}: {devices:?}",
            p.name_any()
        );
        for g in gpus {
            assert!(gpus_seen.insert(g.2.clone()), "GPU {} in two claims", g.2);
        }
        for c in cpus {
            assert!(cpus_seen.insert(c.2.clone()), "CPU {} in two claims", c.2);
        }
        println!("{} -> {name}: {devices:?}", p.name_any());
        claim_names.push(name);
    }
    let want: BTreeSet<String> = idx.iter().map(|i| format!("gpu-{i}")).collect();
    assert_eq!(gpus_seen, want, "the claims hold exactly the job's GPUs");
    // The CPUs are SMT siblings of the job's allocated cores.
    let layout = env.rest.job_resources(job_id).await.unwrap();
    let bitmap = layout
        .iter()
        .find(|l| l.node == DRA_NODE)
        .and_then(|l| l.core_bitmap.clone())
        .unwrap();
    let allocated_cpus: BTreeSet<String> =
        slurm_bridge::resources::bitmap::parse_core_bitmap(&bitmap)
            .unwrap()
            .iter()
            .flat_map(|c| machine_cpus(*c))
            .map(|c| format!("cpu{c}"))
            .collect();
    assert!(
        cpus_seen.is_subset(&allocated_cpus),
        "{cpus_seen:?} not within the allocated cores' CPUs {allocated_cpus:?} (bitmap {bitmap})"
    );

    // Both finish: both claims go, and the job ends.
    for name in &claim_names {
        let deadline = Instant::now() + Duration::from_secs(60);
        while claims.get_opt(name).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "claim {name} not deleted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    env.wait_job_ended(job_id, Duration::from_secs(30)).await;
    for name in &names {
        env.wait_pod(
            name,
            "finished without the finalizer",
            Duration::from_secs(30),
            |p| {
                p.is_none_or(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
                        && p.finalizers().is_empty()
                })
            },
        )
        .await;
    }
    env.assert_invariants().await;
    controllers.stop().await;
}
