//! A changed ResourceSlice re-registers its node, and a pod Slurm refused before is sent again.

use crate::e2e::{NS, allocated, claim_name};
use crate::support::{DRA_GPU, DRA_NODE, dra_pod, start, wait_node};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A ResourceSlice that changes (a fifth GPU) re-registers the idle node with the new GRES; a pod
/// asking for 5 GPUs, refused by Slurm before ("Requested node configuration is not available"),
/// is sent again at once when the node's configuration changes, not after the 5-minute wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_changed_slice_re_registers_the_node() {
    let (env, controllers) = start().await;
    wait_node(&env, DRA_NODE, &["Gres=gpu:gpu.example.com:4"]).await;
    env.create_pod(dra_pod("five", DRA_GPU, "5", &["sleep", "infinity"]))
        .await;
    let refused = env
        .wait_condition("five", "SlurmSubmitFailed", Duration::from_secs(60))
        .await;
    println!("before the fifth GPU: {refused}");
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    let gpus: Vec<Value> = (0..5)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
        .collect();
    let started = Instant::now();
    slices
        .patch(
            "dra-1-gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pool": {"generation": 2}, "devices": gpus}})),
        )
        .await
        .unwrap();
    let shown = wait_node(&env, DRA_NODE, &["Gres=gpu:gpu.example.com:5"]).await;
    println!(
        "re-registered {:.1} s after the slice changed:\n{shown}",
        started.elapsed().as_secs_f64()
    );
    assert!(shown.contains("CPUTot=8"), "{shown}");
    // The refused pod is sent again and gets all 5.
    let pod = env
        .wait_bound(&["five".into()], Duration::from_secs(30))
        .await
        .remove(0);
    println!(
        "the refused pod bound {:.1} s after the slice changed",
        started.elapsed().as_secs_f64()
    );
    let claim = Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
        .get(&claim_name(&pod).unwrap())
        .await
        .unwrap();
    assert_eq!(allocated(&claim).len(), 5);
    env.assert_invariants().await;
    controllers.stop().await;
}
