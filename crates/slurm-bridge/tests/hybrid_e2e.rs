//! Hybrid nodes end to end: Slurm nodes run by real slurmd daemons (slurm-testenv), the same
//! hosts as Kubernetes nodes (kube-testenv's agent plays their kubelets), the scheduler and the
//! controllers in-process. Batch jobs (sbatch) and pods meet on the same nodes under one Slurm
//! policy: they take turns, preempt each other, share a node's cores, and share reservations and
//! licenses. Each test checks the lifecycle invariants.

mod e2e;

use e2e::controllers::{Controllers, disruption};
use e2e::{Env, NS, SCHEDULER, allocated, claim_name, job_id_of};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::controllers::node::slurm_view::CONDITION_TYPE;
use slurm_bridge::wellknown::{LABEL_EXTERNAL_NODE, LABEL_SLURM_NODENAME, TAINT_MANAGED_NODE};
use slurm_testenv::conf::{Partition, Policy, PreemptMode};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Submits a batch job with `sbatch --parsable ARGS`; returns its id.
fn sbatch(env: &Env, args: &[&str]) -> String {
    let mut argv = vec!["sbatch", "--parsable"];
    argv.extend_from_slice(args);
    env.slurm.run(&argv).expect("sbatch").trim().to_string()
}

fn scontrol(env: &Env, args: &[&str]) {
    let mut argv = vec!["scontrol"];
    argv.extend_from_slice(args);
    env.slurm.run(&argv).expect("scontrol");
}

/// A field of `scontrol show job ID` (`JobState`, `Reason`, `NodeList`, `Restarts`...).
fn job_field(env: &Env, id: &str, key: &str) -> String {
    env.slurm
        .run(&["scontrol", "show", "job", id])
        .expect("scontrol show job")
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

/// Polls `probe` every 100 ms until it returns `Some`; panics naming `what` after `timeout`.
async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_job_state(env: &Env, id: &str, state: &str) {
    let what = format!("batch job {id} {state}");
    wait_for(&what, WAIT, async || {
        (job_field(env, id, "JobState") == state).then_some(())
    })
    .await;
}

/// A `batch/v1` Job of `pods` pods for the bridge, each running `sleep SECS`, killed `grace`
/// seconds after deletion.
fn k8s_job(name: &str, pods: u32, secs: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 6,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "busybox", "command": ["sleep", secs],
                                    "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
                },
            },
        },
    })
}

/// The live (not being deleted) pods of Job `job`, once there are `n`.
async fn job_pods(env: &Env, job: &str, n: usize) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    wait_for(&format!("{n} pods of Job {job}"), WAIT, async || {
        let pods: Vec<Pod> = env
            .pods()
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_terminal(p))
            .collect();
        (pods.len() == n).then_some(pods)
    })
    .await
}

fn is_terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Waits until Job `job` reports `n` succeeded pods.
async fn wait_job_succeeded(env: &Env, job: &str, n: i32) {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.kube.clone(), NS);
    wait_for(&format!("Job {job}: {n} succeeded"), WAIT, async || {
        let j = jobs.get(job).await.unwrap();
        (j.status.and_then(|s| s.succeeded).unwrap_or(0) >= n).then_some(())
    })
    .await;
}

/// Deletes pods `names` and waits until each is gone (its containers stopped, its finalizer
/// released).
async fn delete_pods(env: &Env, names: &[&str]) {
    for name in names {
        env.pods()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        env.wait_pod(name, "gone", WAIT, |p| p.is_none()).await;
    }
}

/// Waits until Slurm runs no external job (every pod's job has ended with its pod).
async fn wait_no_external_job(env: &Env) {
    wait_for("no live external job", WAIT, async || {
        env.active_job_ids().is_empty().then_some(())
    })
    .await;
}

/// A bridge pod running `sleep infinity`, stopped 1 s after its deletion.
fn pod(name: &str, annotations: Value, mut spec_extra: Value) -> Value {
    spec_extra["terminationGracePeriodSeconds"] = json!(1);
    e2e::pod(name, annotations, spec_extra)
}

fn pending_reason(message: &str) -> bool {
    message.contains("Resources") || message.contains("Priority")
}

/// 1. A batch job and a Kubernetes Job on the same two nodes take turns, both ways.
#[tokio::test]
async fn batch_jobs_and_pods_take_turns_on_the_same_nodes() {
    let mut env = Env::start_hybrid(2, Policy::default(), |_| {}).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    // A batch job holds both nodes: the Job's pods wait with Slurm's reason.
    let batch = sbatch(&env, &["-N", "2", "--exclusive", "--wrap", "sleep 300"]);
    wait_job_state(&env, &batch, "RUNNING").await;
    assert_eq!(job_field(&env, &batch, "NodeList"), "node-[1-2]");
    env.create(k8s_job("first", 2, "3", json!({}))).await;
    let pods = job_pods(&env, "first", 2).await;
    for name in names(&pods) {
        let msg = env.wait_condition(&name, "SlurmJobPending", WAIT).await;
        assert!(pending_reason(&msg), "{name}: {msg}");
    }
    for p in env.pods().list(&ListParams::default()).await.unwrap() {
        assert!(
            node_of(&p).is_empty(),
            "{} bound beside the batch job",
            p.name_any()
        );
    }
    env.assert_invariants().await;

    // It ends: they bind, one on each node, and run to completion.
    env.slurm.run(&["scancel", &batch]).unwrap();
    let bound = env.wait_bound(&names(&pods), WAIT).await;
    let nodes: BTreeSet<String> = bound.iter().map(node_of).collect();
    assert_eq!(nodes, BTreeSet::from(["node-1".into(), "node-2".into()]));
    env.assert_invariants().await;
    wait_job_succeeded(&env, "first", 2).await;
    wait_no_external_job(&env).await;
    env.assert_invariants().await;

    // The other way round: pods hold the nodes, a batch job waits for them, then runs.
    env.create(k8s_job("second", 2, "8", json!({}))).await;
    let pods = job_pods(&env, "second", 2).await;
    env.wait_bound(&names(&pods), WAIT).await;
    let batch = sbatch(&env, &["-N", "2", "--exclusive", "--wrap", "sleep 300"]);
    wait_for(
        "the batch job pending for the pods' nodes",
        WAIT,
        async || {
            let (state, reason) = (
                job_field(&env, &batch, "JobState"),
                job_field(&env, &batch, "Reason"),
            );
            (state == "PENDING" && pending_reason(&reason)).then_some(())
        },
    )
    .await;
    env.assert_invariants().await;
    wait_job_succeeded(&env, "second", 2).await;
    wait_job_state(&env, &batch, "RUNNING").await;
    wait_no_external_job(&env).await;
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &batch]).unwrap();
}

/// 2. Preemption both ways, by partition priority tier (`high` over `slurm-bridge`).
#[tokio::test]
async fn batch_jobs_preempt_pods_and_pods_preempt_batch_jobs() {
    let policy = Policy {
        preempt: Some(PreemptMode::Requeue),
        partitions: vec![Partition::new("high", 10)],
        ..Default::default()
    };
    let mut env = Env::start_hybrid(1, policy, |_| {}).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    env.create(k8s_job("low", 1, "infinity", json!({}))).await;
    let first = job_pods(&env, "low", 1).await.remove(0);
    let first_name = first.name_any();
    let first = env
        .wait_bound(std::slice::from_ref(&first_name), WAIT)
        .await
        .remove(0);
    let first_job = job_id_of(&first);

    // A batch job of the higher tier takes the node: the pod is removed as preemption does.
    let high = sbatch(&env, &["-p", "high", "--exclusive", "--wrap", "sleep 300"]);
    wait_job_state(&env, &high, "RUNNING").await;
    let removed = env
        .wait_pod(&first_name, "DisruptionTarget and deletion", WAIT, |p| {
            p.is_some_and(|p| disruption(p).is_some() && p.metadata.deletion_timestamp.is_some())
        })
        .await
        .unwrap();
    let (reason, message) = disruption(&removed).unwrap();
    assert!(
        ["SlurmJobPreempted", "SlurmJobRequeued"].contains(&reason.as_str()),
        "{reason}: {message}"
    );
    assert!(message.contains(&first_job.to_string()), "{message}");
    // Its grace period is honoured: the deletion carries the pod's own 2 s.
    assert_eq!(removed.metadata.deletion_grace_period_seconds, Some(2));
    let events = env.event_reasons(&first_name).await;
    assert!(
        events.iter().any(|(r, _)| *r == reason),
        "no {reason} Event: {events:?}"
    );
    env.wait_pod(&first_name, "gone", WAIT, |p| p.is_none())
        .await;
    env.wait_job_ended(first_job, WAIT).await;

    // The Job's replacement waits while the batch job runs, then runs when it ends.
    let replacement = job_pods(&env, "low", 1).await.remove(0).name_any();
    assert_ne!(replacement, first_name);
    let msg = env
        .wait_condition(&replacement, "SlurmJobPending", WAIT)
        .await;
    assert!(pending_reason(&msg), "{msg}");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &high]).unwrap();
    let bound = env
        .wait_bound(std::slice::from_ref(&replacement), WAIT)
        .await;
    assert_eq!(node_of(&bound[0]), "node-1");
    env.assert_invariants().await;

    // A pod of the higher tier preempts a batch job of the lower one, which is requeued.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.kube.clone(), NS);
    jobs.delete("low", &DeleteParams::background())
        .await
        .unwrap();
    wait_no_external_job(&env).await;
    let low = sbatch(
        &env,
        &[
            "-p",
            "slurm-bridge",
            "--exclusive",
            "--requeue",
            "--wrap",
            "sleep 300",
        ],
    );
    wait_job_state(&env, &low, "RUNNING").await;
    env.create_pod(pod(
        "urgent",
        json!({"slurmjob.slinky.slurm.net/partition": "high"}),
        json!({}),
    ))
    .await;
    let bound = env.wait_bound(&["urgent".into()], WAIT).await;
    assert_eq!(node_of(&bound[0]), "node-1");
    wait_job_state(&env, &low, "PENDING").await;
    assert_eq!(job_field(&env, &low, "Restarts"), "1");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &low]).unwrap();
}

/// Expands `scontrol show -d job`'s `CPU_IDs=0-1,4` into the CPU ids.
fn cpu_ids(env: &Env, id: &str) -> BTreeSet<u32> {
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

/// A `dra.cpu` DeviceClass and a slice for `node` as the CPU DRA driver would publish for an
/// 8-core host with one thread per core: device `cpuN` is machine CPU N on core N.
async fn publish_cpu_slice(env: &Env, node: &str) {
    let classes: Api<DeviceClass> = Api::all(env.kube.clone());
    let dc: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "dra.cpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"dra.cpu\""}}]},
    }))
    .unwrap();
    classes.create(&PostParams::default(), &dc).await.unwrap();
    let devices: Vec<Value> = (0..8)
        .map(|id| {
            json!({"name": format!("cpu{id}"), "attributes": {
                "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": id},
                "dra.cpu/socketID": {"int": 0}, "dra.cpu/coreType": {"int": 2}}})
        })
        .collect();
    let slice: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{node}-cpu")},
        "spec": {"driver": "dra.cpu", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }))
    .unwrap();
    Api::<ResourceSlice>::all(env.kube.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
}

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
    wait_for("the claim deleted", WAIT, async || {
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

fn unavailable(n: &Node) -> Option<(String, String)> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_MANAGED_NODE))
}

async fn wait_node(env: &Env, name: &str, what: &str, ok: impl Fn(&Node) -> bool) -> Node {
    let nodes: Api<Node> = Api::all(env.kube.clone());
    wait_for(&format!("node {name}: {what}"), WAIT, async || {
        let n = nodes.get(name).await.unwrap();
        ok(&n).then_some(n)
    })
    .await
}

/// Slurm's `State=` of a node, e.g. `IDLE+DRAIN`.
fn slurm_state(env: &Env, node: &str) -> String {
    env.slurm
        .run(&["scontrol", "show", "node", node])
        .unwrap()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("State="))
        .unwrap_or_default()
        .to_string()
}

/// 4. Slurm's view reaches Kubernetes on hybrid nodes, one of them named differently in each
/// (`slurm-nodename` label); the bridge never registers, re-creates or removes a slurmd node.
#[tokio::test]
async fn slurm_node_states_reach_kubernetes_and_slurmd_nodes_are_never_managed() {
    let mut env = Env::start_hybrid(3, Policy::default(), |o| {
        // Kubernetes calls the third host kube-3; Slurm calls it node-3.
        o.nodes[2].name = "kube-3".into();
        o.nodes[2]
            .labels
            .insert(LABEL_SLURM_NODENAME.into(), "node-3".into());
    })
    .await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    for name in ["node-1", "node-2", "kube-3"] {
        wait_node(&env, name, "the bridge taint", tainted).await;
    }

    // A Kubernetes node labelled external whose Slurm node is run by slurmd: a warning, and
    // the Slurm node is left as it is.
    let nodes: Api<Node> = Api::all(env.kube.clone());
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL_EXTERNAL_NODE: "true"}}})),
        )
        .await
        .unwrap();
    wait_for("SlurmNodeNotExternal Event on node-2", WAIT, async || {
        let out = env
            .kube_env
            .kubectl(&[
                "get",
                "events",
                "-A",
                "--field-selector",
                "involvedObject.name=node-2,reason=SlurmNodeNotExternal",
                "-o",
                "name",
            ])
            .unwrap_or_default();
        (!out.trim().is_empty()).then_some(())
    })
    .await;
    let state = slurm_state(&env, "node-2");
    assert_eq!(state, "IDLE", "node-2 was touched: {state}");

    // Drained in Slurm: the condition shows it and nothing new lands there.
    scontrol(
        &env,
        &[
            "update",
            "nodename=node-1",
            "state=drain",
            "reason=maintenance",
        ],
    );
    let n = wait_node(&env, "node-1", "SlurmNodeUnavailable", |n| {
        unavailable(n).is_some()
    })
    .await;
    let (reason, message) = unavailable(&n).unwrap();
    assert_eq!(reason, "SlurmNodeDrained", "{message}");
    assert!(message.contains("maintenance"), "{message}");
    for name in ["a", "b", "c"] {
        env.create_pod(pod(name, json!({}), json!({}))).await;
    }
    let bound = wait_for("two of three pods bound", WAIT, async || {
        let pods: Vec<Pod> = env.pods().list(&ListParams::default()).await.unwrap().items;
        let bound: Vec<Pod> = pods
            .into_iter()
            .filter(|p| !node_of(p).is_empty())
            .collect();
        (bound.len() == 2).then_some(bound)
    })
    .await;
    let on: BTreeSet<String> = bound.iter().map(node_of).collect();
    assert_eq!(on, BTreeSet::from(["node-2".into(), "kube-3".into()]));
    let waiting = ["a", "b", "c"]
        .into_iter()
        .find(|n| !bound.iter().any(|p| p.name_any() == *n))
        .unwrap();
    let msg = env.wait_condition(waiting, "SlurmJobPending", WAIT).await;
    assert!(pending_reason(&msg), "{msg}");
    env.assert_invariants().await;

    // Resumed: the condition goes and the waiting pod runs there.
    scontrol(&env, &["update", "nodename=node-1", "state=resume"]);
    wait_node(&env, "node-1", "SlurmNodeUnavailable gone", |n| {
        unavailable(n).is_none()
    })
    .await;
    let p = env.wait_bound(&[waiting.to_string()], WAIT).await.remove(0);
    assert_eq!(node_of(&p), "node-1");
    env.assert_invariants().await;

    // Cordon drains the Slurm node (with the bridge's reason); uncordon lifts it.
    env.kube_env.kubectl(&["cordon", "kube-3"]).unwrap();
    wait_for("node-3 drained for the cordon", WAIT, async || {
        slurm_state(&env, "node-3").contains("DRAIN").then_some(())
    })
    .await;
    let reason = env
        .slurm
        .run(&["sinfo", "-h", "-n", "node-3", "-o", "%E"])
        .unwrap();
    assert!(reason.contains("slurm-bridge:"), "{reason}");
    env.kube_env.kubectl(&["uncordon", "kube-3"]).unwrap();
    wait_for("node-3 undrained", WAIT, async || {
        (!slurm_state(&env, "node-3").contains("DRAIN")).then_some(())
    })
    .await;

    // slurmd of node-2 dies: the node goes DOWN, the Kubernetes node says so, and its pod is
    // removed with the reason shown.
    let victim = bound
        .iter()
        .find(|p| node_of(p) == "node-2")
        .unwrap()
        .name_any();
    env.slurm.kill_slurmd("node-2").unwrap();
    let n = wait_node(&env, "node-2", "SlurmNodeDown", |n| {
        unavailable(n).is_some_and(|(r, _)| r == "SlurmNodeDown")
    })
    .await;
    assert!(unavailable(&n).is_some());
    let removed = env
        .wait_pod(&victim, "removed for the lost node", WAIT, |p| {
            p.is_none_or(|p| disruption(p).is_some())
        })
        .await;
    if let Some(p) = removed {
        let (reason, message) = disruption(&p).unwrap();
        assert!(
            ["SlurmNodeFailure", "SlurmJobRequeued", "SlurmJobCancelled"]
                .contains(&reason.as_str()),
            "{reason}: {message}"
        );
    }
    let events = env.event_reasons(&victim).await;
    assert!(
        events.iter().any(|(r, _)| r.starts_with("Slurm")),
        "no Slurm reason among {victim}'s Events: {events:?}"
    );
    env.wait_pod(&victim, "gone", WAIT, |p| p.is_none()).await;
    env.assert_invariants().await;

    // Through all of it the slurmd nodes stayed slurmd nodes: none deleted or made external.
    let sinfo = env.slurm.run(&["sinfo", "-h", "-N", "-o", "%N"]).unwrap();
    let listed: BTreeSet<&str> = sinfo.lines().map(str::trim).collect();
    assert_eq!(listed, BTreeSet::from(["node-1", "node-2", "node-3"]));
    for n in ["node-1", "node-2", "node-3"] {
        assert!(!slurm_state(&env, n).contains("EXTERNAL"), "{n} external");
    }
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
        job_field(&env, &job_id_of(&bound[0]).to_string(), "Reservation"),
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
    wait_for("the second batch job pending", WAIT, async || {
        let reason = job_field(&env, &batch2, "Reason");
        (job_field(&env, &batch2, "JobState") == "PENDING"
            && ["Licenses", "Priority"].contains(&reason.as_str()))
        .then_some(())
    })
    .await;
    env.assert_invariants().await;

    // The licensed pod goes: its license passes to one of the two waiting.
    delete_pods(&env, &["licensed"]).await;
    wait_for("a waiting job takes the freed license", WAIT, async || {
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
