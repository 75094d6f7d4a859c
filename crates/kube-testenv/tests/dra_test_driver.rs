//! Kubernetes' own DRA test driver (tool `dra-test-driver`) as a kubelet node's DRA driver,
//! without slurm-bridge: it registers with the kubelet, publishes its ResourceSlice, and a pod
//! whose claim names two of its devices (allocated and reserved by the test, as a scheduler
//! would) starts on the kubelet with the environment the driver's CDI spec sets; the pod gone,
//! the kubelet has the driver unprepare the claim. Needs root and the cached (or buildable)
//! binaries.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube_testenv::dra_driver::TEST_DRIVER;
use kube_testenv::{DraTestDriver, Instance, InstanceOptions};
use serde_json::json;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Waits until `check` returns `Some`, for at most [`WAIT`].
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dra_test_driver_prepares_a_claim_on_a_kubelet_node() {
    let env = Instance::start(InstanceOptions {
        kubelet_nodes: 1,
        ..InstanceOptions::with_nodes(1)
    })
    .await
    .expect("instance with a kubelet node");
    let client = env.client();
    let driver = DraTestDriver::start(&env, "node-1", TEST_DRIVER, 4)
        .await
        .expect("the driver registered with the kubelet");

    // Its slice: pool node-1, device-00 .. device-03, no attributes.
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mine =
        ListParams::default().fields(&format!("spec.nodeName=node-1,spec.driver={TEST_DRIVER}"));
    let slice = eventually("the driver's slice", async || {
        slices.list(&mine).await.ok()?.items.into_iter().next()
    })
    .await;
    assert_eq!(slice.spec.pool.name, "node-1");
    let devices: Vec<&str> = slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(
        devices,
        ["device-00", "device-01", "device-02", "device-03"]
    );
    assert!(
        slice
            .spec
            .devices
            .iter()
            .flatten()
            .all(|d| d.attributes.is_none())
    );

    // A pod using a claim, not bound yet (no scheduler runs); the claim allocated device-01 and
    // device-03 on node-1 and reserved for the pod; then the pod bound, as a scheduler does.
    let classes: Api<DeviceClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": TEST_DRIVER},
                "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{TEST_DRIVER}\"")}}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let claim: ResourceClaim = claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "two"},
                "spec": {"devices": {"requests": [{"name": "req", "exactly": {
                    "deviceClassName": TEST_DRIVER, "allocationMode": "ExactCount", "count": 2}}]}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let image = env.image().expect("kubelet nodes");
    let pod: Pod = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "uses-two"}, "spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "resourceClaims": [{"name": "devs", "resourceClaimName": "two"}],
                "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "env | grep ^claim_; echo done; sleep 3600"],
                    "resources": {"claims": [{"name": "devs"}]}}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let result = |device: &str| json!({"request": "req", "driver": TEST_DRIVER, "pool": "node-1", "device": device});
    claims
        .patch_status(
            "two",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {
                    "devices": {"results": [result("device-01"), result("device-03")]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": "uses-two",
                                 "uid": pod.metadata.uid.clone().unwrap()}]}})),
        )
        .await
        .expect("allocate the claim");
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "uses-two"}, "target": {"kind": "Node", "name": "node-1"}});
    let _: serde_json::Value = client
        .request(
            http::Request::post("/api/v1/namespaces/default/pods/uses-two/binding")
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&binding).unwrap())
                .unwrap(),
        )
        .await
        .expect("bind the pod");

    // The kubelet has the driver prepare it; the container sees the CDI spec's variable.
    let out = eventually("the container's output", async || {
        let l = pods.logs("uses-two", &LogParams::default()).await.ok()?;
        l.contains("done").then_some(l)
    })
    .await;
    assert!(
        out.lines().any(|l| l.trim() == "claim_two_req=true"),
        "claim_two_req=true in:\n{out}"
    );
    let uid = claim.metadata.uid.clone().unwrap();
    let spec = driver.cdi_spec(&uid, "req");
    assert!(spec.exists(), "{}", spec.display());
    assert!(driver.log().contains("DRAPlugin/NodePrepareResources"));

    // The pod goes: the kubelet has the driver unprepare the claim (its spec goes).
    pods.delete("uses-two", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the CDI spec removed", async || {
        (!spec.exists()).then_some(())
    })
    .await;
    assert!(driver.log().contains("DRAPlugin/NodeUnprepareResources"));
    assert!(driver.stop().await.unwrap().success(), "stops on SIGTERM");
}
