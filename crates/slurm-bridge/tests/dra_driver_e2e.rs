//! DRA on a real kubelet with a driver that is not the bridge's: Kubernetes' own DRA test
//! driver (`k8s.io/kubernetes/test/e2e/dra/test-driver`, built by kube-testenv as the tool
//! `dra-test-driver` from the Kubernetes module the kubelet comes from). Its kubelet plugin
//! publishes the node's devices `device-00` .. `device-03` (no attributes, one pool named after
//! the node); the bridge, told by its config (`draDeviceDrivers`) that this driver's devices are
//! GRES indexed by the number at the end of their names, registers the node in Slurm with them.
//! A pod asking for two of them is scheduled through Slurm (real slurmctld and slurmrestd), the
//! bridge writes its ResourceClaim naming the devices Slurm chose, the kubelet starts the
//! container only once the driver has prepared the claim (with the driver stopped, the pod is
//! bound and the kubelet reports why its container does not start), and the container sees the
//! environment the driver's CDI spec injects. The pod finishes: its Slurm job ends, its claim is
//! deleted and the kubelet unprepares it.

#[path = "e2e/mod.rs"]
mod e2e;

use e2e::controllers::Controllers;
use e2e::{Env, NS, allocated, claim_name, job_id_of, node_of, wait_some};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube_testenv::DraTestDriver;
use serde_json::json;
use slurm_bridge::dra::{DeviceIndex, GresDriver, GresDrivers, NodeInventory};
use std::time::{Duration, Instant};

const DRIVER: &str = "test-driver.cdi.k8s.io";
const RESOURCE: &str = "deviceclass.resource.kubernetes.io/test-driver.cdi.k8s.io";
const NODE: &str = "node-1";
const WAIT: Duration = Duration::from_secs(90);

/// Gone, or Succeeded without the bridge's finalizer: the pod controller releases a finished
/// pod after it cancelled its job, a moment after the kubelet reported it.
fn succeeded_and_released(p: Option<&k8s_openapi::api::core::v1::Pod>) -> bool {
    p.is_none_or(|p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            && !slurm_bridge::wellknown::holds_finalizer(p)
    })
}

/// The config's `draDeviceDrivers` entry for the test driver.
fn driver_setting() -> Vec<GresDriver> {
    vec![GresDriver {
        name: DRIVER.into(),
        index: DeviceIndex::NameNumber,
    }]
}

/// The test driver as [`NODE`]'s DRA driver (kube-testenv's helper: the kubelet's folders,
/// the instance's kubeconfig, `-v=6`), registered by the kubelet.
async fn start_driver(env: &Env) -> DraTestDriver {
    DraTestDriver::start(&env.kube_env, NODE, DRIVER, 4)
        .await
        .expect("the DRA test driver registered with the kubelet")
}

/// Waits until the driver's log has `text`.
async fn wait_log(driver: &DraTestDriver, text: &str) {
    wait_some(&format!("driver log shows {text:?}"), WAIT, async || {
        driver.log().contains(text).then_some(())
    })
    .await;
}

/// A bridge pod asking for 2 of the driver's devices, running `script` once in the kubelet
/// node's image.
fn dra_pod(env: &Env, name: &str, script: &str) -> serde_json::Value {
    e2e::pod(
        name,
        json!({}),
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": env.kube_env.image().unwrap(),
                "imagePullPolicy": "Never", "command": ["sh", "-c", script],
                "resources": {"requests": {RESOURCE: "2", "memory": "32Mi"},
                              "limits": {RESOURCE: "2", "memory": "32Mi"}}}],
        }),
    )
}

/// The variable the driver's CDI spec sets for `claim`'s request `gpu` (the bridge's request
/// name for GRES devices): `claim_<claim>_gpu`, non-alphanumerics as `_`.
fn claim_var(claim: &str) -> String {
    format!("claim_{claim}_gpu")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

async fn logs(env: &Env, pod: &str) -> String {
    env.pods()
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_runs_with_devices_of_kubernetes_dra_test_driver() {
    let started = Instant::now();
    // node-1: a real kubelet, an external node of Slurm (dynamic, registered by the node
    // controller), in the test partition (its node set selects the feature slurm-bridge).
    let mut env = Env::start_configured(0, |o| {
        let mut node = kube_testenv::NodeSpec::standard(NODE);
        node.labels.insert(
            slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
            "true".into(),
        );
        o.nodes = vec![node];
        o.kubelet_nodes = 1;
    })
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.kube.clone());
    nodes
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                slurm_bridge::wellknown::ANNOTATION_EXTERNAL_NODE_PARTITIONS: "slurm-bridge"}}})),
        )
        .await
        .unwrap();
    // The DeviceClass of the driver's devices, named as the driver (what the bridge expects).
    let dc: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]},
    }))
    .unwrap();
    Api::<DeviceClass>::all(env.kube.clone())
        .create(&PostParams::default(), &dc)
        .await
        .unwrap();

    // The driver publishes its slice: device-00 .. device-03, no attributes, pool node-1.
    let driver = start_driver(&env).await;
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    let drivers = GresDrivers::with(driver_setting());
    let mine = ListParams::default().fields(&format!("spec.nodeName={NODE},spec.driver={DRIVER}"));
    let published = wait_some("the test driver's ResourceSlice", WAIT, async || {
        let items = slices.list(&mine).await.ok()?.items;
        (items
            .iter()
            .map(|s| s.spec.devices.iter().flatten().count())
            .sum::<usize>()
            == 4)
            .then_some(items)
    })
    .await;
    let devices: Vec<_> = published
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .collect();
    assert!(published.iter().all(|s| s.spec.pool.name == NODE));
    assert!(
        devices.iter().all(|d| d.attributes.is_none()),
        "{devices:?}"
    );
    let inv = NodeInventory::with_drivers(NODE, &published, &drivers);
    assert_eq!(
        inv.gres_and_conf().unwrap().0,
        "gpu:test-driver.cdi.k8s.io:4",
        "{inv:?}"
    );
    // Without the setting, the bridge takes none of them.
    assert!(NodeInventory::from_slices(NODE, &published).is_empty());

    // The bridge, configured with the driver: the node registers in Slurm with its GRES.
    let controllers = Controllers::start(&env, |o| {
        o.config.dra_device_drivers = driver_setting();
    })
    .await;
    env.start_scheduler_opts(
        e2e::rest_client(&env.slurm),
        tokio::sync::watch::channel(true).1,
        |o| o.config.dra_device_drivers = driver_setting(),
    )
    .await;
    let shown = wait_some("node-1 in Slurm with the driver's GRES", WAIT, async || {
        let out = env
            .slurm
            .run(&["scontrol", "show", "node", NODE])
            .unwrap_or_default();
        out.contains("Gres=gpu:test-driver.cdi.k8s.io:4")
            .then_some(out)
    })
    .await;
    println!("{shown}");
    eprintln!("set up in {:?}", started.elapsed());

    // The driver stops: the kubelet unregisters its plugin (its slice stays 30 s).
    let stopped = Instant::now();
    assert!(
        driver.stop().await.unwrap().success(),
        "the driver stops cleanly"
    );

    // A pod asking for 2 of its devices: bound through Slurm with a claim, but its container
    // cannot start until the driver prepares the claim.
    let created = Instant::now();
    let script = "env | grep '^claim_' | sort; echo devices-seen";
    env.create_pod(dra_pod(&env, "dra-test", script)).await;
    let p = env.wait_bound(&["dra-test".into()], WAIT).await.remove(0);
    let bound = created.elapsed();
    assert_eq!(node_of(&p), NODE);
    let job = job_id_of(&p);
    let detail = env
        .slurm
        .run(&["scontrol", "show", "-d", "job", &job.to_string()])
        .unwrap();
    println!("{detail}");
    assert!(
        detail.contains("GRES=gpu:test-driver.cdi.k8s.io:"),
        "{detail}"
    );
    let claim1 = claim_name(&p).expect("a claim for the pod");
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    let claim = claims.get(&claim1).await.unwrap();
    let got = allocated(&claim);
    // The devices Slurm chose: its GRES index i is device-0i (the i-th by name number).
    let at = detail.find("(IDX:").expect("IDX in scontrol show -d job");
    let list = &detail[at + 5..];
    let idx = slurm_bridge::dra::parse_gres_index(&list[..list.find(')').unwrap()]).unwrap();
    let want: Vec<(String, String, String)> = idx
        .iter()
        .take(2)
        .map(|i| (DRIVER.into(), NODE.into(), format!("device-{i:02}")))
        .collect();
    assert_eq!(got, want, "the claim names the devices Slurm chose");
    println!("claim {claim1}: {got:?}");
    let message = wait_some(
        "the kubelet's FailedPrepareDynamicResources Event",
        WAIT,
        async || {
            env.event_reasons("dra-test")
                .await
                .into_iter()
                .find(|(r, _)| r == "FailedPrepareDynamicResources")
                .map(|(_, m)| m)
        },
    )
    .await;
    println!("driver stopped: {message}");
    assert!(message.contains("is not registered"), "{message}");
    let p = env.pods().get("dra-test").await.unwrap();
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"), "{status:?}");
    assert!(
        status.container_statuses.iter().flatten().all(|c| c
            .state
            .as_ref()
            .is_none_or(|s| s.running.is_none() && s.terminated.is_none())),
        "no container started: {status:?}"
    );

    // The driver is back (before the kubelet wipes its slice): the kubelet has it prepare the
    // claim (its CDI spec), and the container starts, seeing the spec's environment. The
    // kubelet 1.36 does not retry a pod whose claims failed to prepare on its own backoff: it
    // waits for the pod's next periodic sync (`syncFrequency` plus up to half of it in jitter;
    // kube-testenv's kubelets sync every 10 s, the default is 1 minute).
    let driver = start_driver(&env).await;
    let back = Instant::now();
    let restarted = stopped.elapsed();
    let uid = claim.metadata.uid.clone().unwrap();
    let spec = driver.cdi_spec(&uid, "gpu");
    let out = wait_some("the pod's output", WAIT, async || {
        let l = logs(&env, "dra-test").await;
        l.contains("devices-seen").then_some(l)
    })
    .await;
    let running = created.elapsed();
    let after_back = back.elapsed();
    println!("container output:\n{out}");
    wait_log(&driver, "DRAPlugin/NodePrepareResources").await;
    assert!(
        driver.log().contains(&uid),
        "the driver prepared claim {uid}"
    );
    // The driver's CDI spec sets claim_<claim>_<request>=true (non-alphanumerics as `_`).
    let var = claim_var(&claim1);
    assert!(
        out.lines().any(|l| l.trim() == format!("{var}=true")),
        "{var}=true in the container's environment:\n{out}"
    );

    // The pod finishes: its job ends, the claim goes, the kubelet has the driver unprepare it.
    env.wait_pod(
        "dra-test",
        "Succeeded with the bridge's finalizer released",
        WAIT,
        succeeded_and_released,
    )
    .await;
    env.wait_job_ended(job, WAIT).await;
    wait_some("the claim deleted", WAIT, async || {
        claims.get_opt(&claim1).await.ok()?.is_none().then_some(())
    })
    .await;
    wait_some("the CDI spec removed (unprepared)", WAIT, async || {
        (!spec.exists()).then_some(())
    })
    .await;
    wait_log(&driver, "DRAPlugin/NodeUnprepareResources").await;
    env.assert_invariants().await;

    // With the driver running from the start, a second pod's container starts as soon as the
    // kubelet has its claim prepared.
    let created2 = Instant::now();
    env.create_pod(dra_pod(&env, "dra-test-2", script)).await;
    let p2 = env.wait_bound(&["dra-test-2".into()], WAIT).await.remove(0);
    let bound2 = created2.elapsed();
    let claim2 = claim_name(&p2).expect("a claim for the second pod");
    let out2 = wait_some("the second pod's output", WAIT, async || {
        let l = logs(&env, "dra-test-2").await;
        l.contains("devices-seen").then_some(l)
    })
    .await;
    let running2 = created2.elapsed();
    let var2 = claim_var(&claim2);
    assert!(
        out2.lines().any(|l| l.trim() == format!("{var2}=true")),
        "{var2}=true in the second container's environment:\n{out2}"
    );
    env.wait_pod(
        "dra-test-2",
        "Succeeded with the bridge's finalizer released",
        WAIT,
        succeeded_and_released,
    )
    .await;
    env.wait_job_ended(job_id_of(&p2), WAIT).await;
    wait_some("the second claim deleted", WAIT, async || {
        claims.get_opt(&claim2).await.ok()?.is_none().then_some(())
    })
    .await;
    env.assert_invariants().await;
    eprintln!(
        "second pod (driver running): created → bound {bound2:?}, → container output {running2:?}"
    );
    eprintln!(
        "pod created → bound {bound:?}; driver back {restarted:?} after it stopped; container \
         output {after_back:?} after the driver was back, {running:?} after the pod's creation; \
         test {:?}",
        started.elapsed()
    );
    let _ = driver.stop().await;
    controllers.stop().await;
}
