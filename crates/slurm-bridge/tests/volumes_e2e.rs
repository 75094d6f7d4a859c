//! PersistentVolumeClaims through the bridge, end to end on real Slurm and the real control plane
//! (kube-controller-manager's PV controller completes the bindings): static local PVs with node
//! affinity for a gang (each pod on a node holding its PV), a missing claim that waits and then
//! runs, a bound claim whose PV is on one node only, an unbound Immediate claim. Each test checks
//! the lifecycle invariants.

mod e2e;

use e2e::controllers::Controllers;
use e2e::{Env, NS, job_id_of, node_of, pod};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const LOCAL: &str = "local";

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
        .await
        .expect("create")
}

/// The static pool class: no provisioner, bound when a pod is scheduled.
async fn local_class(env: &Env) {
    let classes: Api<StorageClass> = Api::all(env.kube.clone());
    create(
        &classes,
        json!({"metadata": {"name": LOCAL}, "provisioner": "kubernetes.io/no-provisioner",
               "volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
}

/// A local PV of `size` on `node` in the `local` class.
async fn local_pv(env: &Env, name: &str, node: &str, size: &str) {
    let pvs: Api<PersistentVolume> = Api::all(env.kube.clone());
    create(
        &pvs,
        json!({"metadata": {"name": name},
               "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": LOCAL,
                        "local": {"path": "/tmp"},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}),
    )
    .await;
}

async fn claim(env: &Env, name: &str, class: &str, size: &str) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.kube.clone(), NS);
    create(
        &pvcs,
        json!({"metadata": {"name": name},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                        "resources": {"requests": {"storage": size}}}}),
    )
    .await;
}

/// A bridge pod mounting claim `claim`, stopped 1 s after deletion.
fn pod_with_claim(name: &str, claim: &str, labels: Value) -> Value {
    let mut p = pod(
        name,
        json!({}),
        json!({"terminationGracePeriodSeconds": 1,
               "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}),
    );
    p["metadata"]["labels"] = labels;
    p
}

/// The node a PV's affinity names.
async fn pv_node(env: &Env, pv: &str) -> String {
    let pv = Api::<PersistentVolume>::all(env.kube.clone())
        .get(pv)
        .await
        .unwrap();
    pv.spec
        .unwrap()
        .node_affinity
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms[0]
        .match_expressions
        .as_ref()
        .unwrap()[0]
        .values
        .as_ref()
        .unwrap()[0]
        .clone()
}

/// Waits until claim `name` is Bound; returns its PV.
async fn wait_claim_bound(env: &Env, name: &str) -> String {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.kube.clone(), NS);
    let deadline = Instant::now() + WAIT;
    loop {
        let c = pvcs.get(name).await.unwrap();
        let phase = c.status.as_ref().and_then(|s| s.phase.clone());
        if phase.as_deref() == Some("Bound")
            && let Some(pv) = c.spec.as_ref().and_then(|s| s.volume_name.clone())
        {
            return pv;
        }
        assert!(
            Instant::now() < deadline,
            "claim {name} not Bound: {phase:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start(nodes: u32) -> (Env, Controllers) {
    let mut env = Env::start(nodes).await;
    local_class(&env).await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    (env, controllers)
}

#[tokio::test]
async fn a_gang_of_three_gets_local_volumes_on_the_nodes_that_hold_them() {
    let (env, _controllers) = start(4).await;
    // One PV each on node-2, node-3 and node-4; node-1 holds none.
    for (pv, node) in [("pv-a", "node-2"), ("pv-b", "node-3"), ("pv-c", "node-4")] {
        local_pv(&env, pv, node, "1Gi").await;
    }
    env.create(
        json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "trio", "namespace": NS}, "spec": {"minMember": 3}}),
    )
    .await;
    let names: Vec<String> = (0..3).map(|i| format!("trio-{i}")).collect();
    for name in &names {
        claim(&env, &format!("data-{name}"), LOCAL, "500Mi").await;
        env.create_pod(pod_with_claim(
            name,
            &format!("data-{name}"),
            json!({"scheduling.x-k8s.io/pod-group": "trio"}),
        ))
        .await;
    }
    let bound = env.wait_bound(&names, WAIT).await;

    // One Slurm job for the gang, kept off node-1, where no PV is.
    let jobs: BTreeSet<u32> = bound.iter().map(job_id_of).collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = env.scontrol_job(*jobs.iter().next().unwrap());
    assert!(job.contains("ExcNodeList=node-1"), "{job}");
    // Each pod on the node of the PV its claim is bound to; no PV twice.
    let mut used = BTreeSet::new();
    for p in &bound {
        let pv =
            wait_claim_bound(&env, &format!("data-{}", p.metadata.name.as_ref().unwrap())).await;
        assert_eq!(pv_node(&env, &pv).await, node_of(p), "{pv}");
        assert!(used.insert(pv.clone()), "{pv} given twice");
    }
    env.assert_invariants().await;
}

#[tokio::test]
async fn a_missing_claim_waits_and_a_bound_claim_pins_its_node() {
    let (env, _controllers) = start(3).await;
    local_pv(&env, "pv-two", "node-2", "1Gi").await;

    // The claim does not exist yet: the pod says so and nothing is submitted.
    env.create_pod(pod_with_claim("late", "late-data", json!({})))
        .await;
    let msg = env.wait_condition("late", "VolumesNotReady", WAIT).await;
    assert!(
        msg.contains("persistentvolumeclaim \"late-data\" not found"),
        "{msg}"
    );
    assert!(env.slurm_job_ids().is_empty());
    // Created: the pod is submitted at once (the claim's creation wakes it), lands on node-2,
    // where the only PV is, and the claim is bound to it.
    claim(&env, "late-data", LOCAL, "1Gi").await;
    let p = env.wait_bound(&["late".into()], WAIT).await.remove(0);
    assert_eq!(node_of(&p), "node-2");
    assert_eq!(wait_claim_bound(&env, "late-data").await, "pv-two");

    // A second pod on the same, now bound, claim: its job may use node-2 only.
    env.create_pod(pod_with_claim("again", "late-data", json!({})))
        .await;
    let msg = env.wait_condition("again", "SlurmJobPending", WAIT).await;
    let again = env.pods().get("again").await.unwrap();
    let job = env.scontrol_job(job_id_of(&again));
    assert!(job.contains("ExcNodeList=node-[1,3]"), "{job}\n{msg}");
    env.assert_invariants().await;
}

#[tokio::test]
async fn an_unbound_immediate_claim_is_left_to_the_pv_controller() {
    let (env, _controllers) = start(2).await;
    let classes: Api<StorageClass> = Api::all(env.kube.clone());
    create(
        &classes,
        json!({"metadata": {"name": "immediate"}, "provisioner": "example.com/none",
               "volumeBindingMode": "Immediate"}),
    )
    .await;
    claim(&env, "now", "immediate", "1Gi").await;
    env.create_pod(pod_with_claim("waits", "now", json!({})))
        .await;
    let msg = env.wait_condition("waits", "VolumesNotReady", WAIT).await;
    assert!(
        msg.contains("pod has unbound immediate PersistentVolumeClaims"),
        "{msg}"
    );
    // And a class that does not exist says which.
    claim(&env, "nowhere", "no-such-class", "1Gi").await;
    env.create_pod(pod_with_claim("lost", "nowhere", json!({})))
        .await;
    let msg = env.wait_condition("lost", "VolumesNotReady", WAIT).await;
    assert!(
        msg.contains("storageclass.storage.k8s.io \"no-such-class\" not found"),
        "{msg}"
    );
    assert!(env.slurm_job_ids().is_empty());
    env.assert_invariants().await;
}

/// A provisioner as local-path ones work: for each claim of class `class` that the scheduler gave
/// a `volume.kubernetes.io/selected-node`, a PV on that node, pre-bound to the claim. Runs until
/// the returned task is aborted.
fn provisioner(env: &Env, class: &'static str) -> tokio::task::JoinHandle<()> {
    let client = env.kube.clone();
    tokio::spawn(async move {
        let pvcs: Api<PersistentVolumeClaim> = Api::all(client.clone());
        let pvs: Api<PersistentVolume> = Api::all(client);
        loop {
            for c in pvcs.list(&Default::default()).await.unwrap().items {
                let spec = c.spec.clone().unwrap_or_default();
                let node = c
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
                    .cloned();
                let (Some(node), None) = (node, spec.volume_name.clone()) else {
                    continue;
                };
                if spec.storage_class_name.as_deref() != Some(class) {
                    continue;
                }
                let name = format!("pvc-{}", c.metadata.uid.clone().unwrap());
                let size = spec.resources.unwrap().requests.unwrap()["storage"]
                    .0
                    .clone();
                let pv = json!({"metadata": {"name": name,
                                             "annotations": {"pv.kubernetes.io/provisioned-by": "test.example.com/local"}},
                    "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Delete", "storageClassName": class,
                             "local": {"path": "/tmp"},
                             "claimRef": {"namespace": c.metadata.namespace, "name": c.metadata.name,
                                          "uid": c.metadata.uid},
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}});
                let _ = pvs
                    .create(&PostParams::default(), &serde_json::from_value(pv).unwrap())
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test]
async fn dynamic_claims_are_provisioned_on_the_node_slurm_chose() {
    let (env, _controllers) = start(3).await;
    let classes: Api<StorageClass> = Api::all(env.kube.clone());
    create(
        &classes,
        json!({"metadata": {"name": "dynamic"}, "provisioner": "test.example.com/local",
               "volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    let provisioner = provisioner(&env, "dynamic");

    // A claim of its own, and a generic ephemeral volume (its claim made by Kubernetes).
    claim(&env, "dyn", "dynamic", "2Gi").await;
    env.create_pod(pod_with_claim("own", "dyn", json!({})))
        .await;
    let mut scratch = pod(
        "scratch",
        json!({}),
        json!({"terminationGracePeriodSeconds": 1,
               "volumes": [{"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {
                   "accessModes": ["ReadWriteOnce"], "storageClassName": "dynamic",
                   "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
    );
    scratch["metadata"]["labels"] = json!({});
    env.create_pod(scratch).await;
    let bound = env
        .wait_bound(&["own".into(), "scratch".into()], WAIT)
        .await;
    for (p, claim) in [(&bound[0], "dyn"), (&bound[1], "scratch-tmp")] {
        let pv = wait_claim_bound(&env, claim).await;
        assert_eq!(pv_node(&env, &pv).await, node_of(p), "{claim} -> {pv}");
        let c = Api::<PersistentVolumeClaim>::namespaced(env.kube.clone(), NS)
            .get(claim)
            .await
            .unwrap();
        assert_eq!(
            c.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
            node_of(p)
        );
    }
    provisioner.abort();
    env.assert_invariants().await;
}

#[tokio::test]
async fn a_claim_never_bound_times_out_and_the_pod_is_scheduled_again() {
    let mut env = Env::start(2).await;
    let classes: Api<StorageClass> = Api::all(env.kube.clone());
    create(
        &classes,
        json!({"metadata": {"name": "never"}, "provisioner": "test.example.com/never",
               "volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_opts(slurm, tokio::sync::watch::channel(true).1, |o| {
        o.volume_bind_timeout = Duration::from_secs(3)
    })
    .await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    claim(&env, "stuck", "never", "1Gi").await;
    env.create_pod(pod_with_claim("stuck", "stuck", json!({})))
        .await;

    // Allocated, the pod waits for the claim (no provisioner answers), showing progress.
    let msg = env.wait_condition("stuck", "WaitingForVolumes", WAIT).await;
    assert!(msg.contains("0/1 claims bound; waiting for stuck"), "{msg}");
    let first = env.wait_job_id("stuck").await;
    // After the timeout its job is cancelled and it says why; it is then scheduled again.
    let msg = env
        .wait_condition("stuck", "VolumeBindingFailed", WAIT)
        .await;
    assert!(msg.contains("were not bound within 3s"), "{msg}");
    env.wait_job_ended(first, WAIT).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let p = env.pods().get("stuck").await.unwrap();
        if p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(slurm_bridge::wellknown::LABEL_SLURM_JOBID))
            .is_some_and(|id| *id != first.to_string())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no new job for the pod after its timeout"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(node_of(&env.pods().get("stuck").await.unwrap()).is_empty());
    // The pod goes: whichever job it has then ends with it.
    env.pods()
        .delete("stuck", &Default::default())
        .await
        .unwrap();
    env.wait_pod("stuck", "gone", WAIT, |p| p.is_none()).await;
    let deadline = Instant::now() + WAIT;
    while !env.active_job_ids().is_empty() {
        assert!(
            Instant::now() < deadline,
            "jobs left: {:?}",
            env.active_job_ids()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.assert_invariants().await;
}
