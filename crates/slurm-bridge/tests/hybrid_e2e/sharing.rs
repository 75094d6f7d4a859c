//! What batch jobs and pods share: the cores of one node (disjoint), a reservation, licenses.

use crate::e2e::controllers::Controllers;
use crate::e2e::{Env, NS, allocated, claim_name, job_field, job_id_of, node_of, wait_some};
use crate::support::{
    WAIT, cpu_ids, delete_pods, pod, publish_cpu_slice, sbatch, scontrol, wait_job_state,
    wait_no_external_job,
};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams};
use serde_json::json;
use slurm_testenv::conf::Policy;
use std::collections::BTreeSet;

/// 3. Pods (2 CPUs each, not exclusive; one of them through the `dra.cpu` DRA class) and a batch
/// job (4 CPUs) run on one 8-CPU node at once, on disjoint cores; the DRA pod's claim names
/// exactly the cores Slurm gave its job.
#[tokio::test]
async fn pods_and_a_batch_job_share_one_node_on_disjoint_cores() {
    let mut env = Env::start_hybrid(1, Policy::default(), |_| {}).await;
    publish_cpu_slice(&env, "node-1").await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    let shared = json!({"slurmjob.slinky.slurm.net/exclusive": "false"});
    env.create_pod(pod(
        "small",
        shared.clone(),
        json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}]}),
    ))
    .await;
    let small = env.wait_bound(&["small".into()], WAIT).await.remove(0);
    let batch = sbatch(&env, &["-n", "4", "--mem=1000", "--wrap", "sleep 300"]);
    wait_job_state(&env, &batch, "RUNNING").await;
    let dra = "deviceclass.resource.kubernetes.io/dra.cpu";
    env.create_pod(pod(
        "cpu-claim",
        shared,
        json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                "resources": {"requests": {dra: "2", "memory": "100Mi"}, "limits": {dra: "2"}}}]}),
    ))
    .await;
    let claimed = env.wait_bound(&["cpu-claim".into()], WAIT).await.remove(0);

    assert_eq!(job_field(&env, &batch, "NodeList"), "node-1");
    let mut seen = BTreeSet::new();
    let mut sets = Vec::new();
    for (what, id, want) in [
        ("pod small", job_id_of(&small).to_string(), 2),
        ("batch job", batch.clone(), 4),
        ("pod cpu-claim", job_id_of(&claimed).to_string(), 2),
    ] {
        assert_eq!(job_field(&env, &id, "JobState"), "RUNNING", "{what}");
        let cpus = cpu_ids(&env, &id);
        assert_eq!(cpus.len(), want, "{what}: {cpus:?}");
        assert!(
            seen.is_disjoint(&cpus),
            "{what}'s {cpus:?} overlaps {seen:?}"
        );
        seen.extend(cpus.iter().copied());
        sets.push(cpus);
    }
    for p in [&small, &claimed] {
        assert_eq!(node_of(p), "node-1");
    }
    // The claim names exactly the machine CPUs of the job's cores.
    let claim = Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
        .get(&claim_name(&claimed).expect("a claim for the dra.cpu pod"))
        .await
        .unwrap();
    let devices: BTreeSet<String> = allocated(&claim)
        .into_iter()
        .map(|(driver, pool, device)| {
            assert_eq!((driver.as_str(), pool.as_str()), ("dra.cpu", "node-1"));
            device
        })
        .collect();
    let want: BTreeSet<String> = sets[2].iter().map(|c| format!("cpu{c}")).collect();
    assert_eq!(devices, want);
    env.assert_invariants().await;

    // The pods go: their jobs end and the claim is deleted; the batch job keeps running.
    delete_pods(&env, &["small", "cpu-claim"]).await;
    wait_no_external_job(&env).await;
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    wait_some("the claim deleted", WAIT, async || {
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(job_field(&env, &batch, "JobState"), "RUNNING");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &batch]).unwrap();
}

/// 5. A reservation and licenses shared by batch jobs and pods.
#[tokio::test]
async fn reservations_and_licenses_are_shared_by_batch_jobs_and_pods() {
    let policy = Policy {
        licenses: vec![("lic".into(), 2)],
        ..Default::default()
    };
    let mut env = Env::start_hybrid(2, policy, |_| {}).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    // A reservation of node-2: a pod naming it runs only there; one that does not, elsewhere.
    scontrol(
        &env,
        &[
            "create",
            "reservation",
            "reservationname=maint",
            "nodes=node-2",
            "users=root",
            "starttime=now",
            "duration=60",
        ],
    );
    env.create_pod(pod(
        "reserved",
        json!({"slurmjob.slinky.slurm.net/reservation": "maint"}),
        json!({}),
    ))
    .await;
    env.create_pod(pod("unreserved", json!({}), json!({})))
        .await;
    let bound = env
        .wait_bound(&["reserved".into(), "unreserved".into()], WAIT)
        .await;
    assert_eq!(node_of(&bound[0]), "node-2");
    assert_eq!(node_of(&bound[1]), "node-1");
    assert_eq!(
        job_field(&env, job_id_of(&bound[0]), "Reservation"),
        "maint"
    );
    env.assert_invariants().await;
    delete_pods(&env, &["reserved", "unreserved"]).await;
    wait_no_external_job(&env).await;
    scontrol(&env, &["delete", "reservationname=maint"]);

    // Two licenses: one batch job and one pod hold one each; a third job of either kind waits.
    let lic = json!({"slurmjob.slinky.slurm.net/licenses": "lic:1",
                     "slurmjob.slinky.slurm.net/exclusive": "false"});
    let batch = sbatch(
        &env,
        &["-n", "1", "--mem=100", "-L", "lic:1", "--wrap", "sleep 300"],
    );
    wait_job_state(&env, &batch, "RUNNING").await;
    env.create_pod(pod("licensed", lic.clone(), json!({})))
        .await;
    env.wait_bound(&["licensed".into()], WAIT).await;
    env.create_pod(pod("unlicensed", lic, json!({}))).await;
    let msg = env
        .wait_condition("unlicensed", "SlurmJobPending", WAIT)
        .await;
    assert!(msg.contains("Licenses"), "{msg}");
    // A batch job behind it waits too (for licenses, or behind the pod's older job).
    let batch2 = sbatch(
        &env,
        &["-n", "1", "--mem=100", "-L", "lic:1", "--wrap", "sleep 300"],
    );
    wait_some("the second batch job pending", WAIT, async || {
        let reason = job_field(&env, &batch2, "Reason");
        (job_field(&env, &batch2, "JobState") == "PENDING"
            && ["Licenses", "Priority"].contains(&reason.as_str()))
        .then_some(())
    })
    .await;
    env.assert_invariants().await;

    // The licensed pod goes: its license passes to one of the two waiting.
    delete_pods(&env, &["licensed"]).await;
    wait_some("a waiting job takes the freed license", WAIT, async || {
        let batch_runs = job_field(&env, &batch2, "JobState") == "RUNNING";
        let pod_bound = !node_of(&env.pods().get("unlicensed").await.unwrap()).is_empty();
        (batch_runs || pod_bound).then_some(())
    })
    .await;
    env.assert_invariants().await;
    for id in [&batch, &batch2] {
        env.slurm.run(&["scancel", id]).unwrap();
    }
}
