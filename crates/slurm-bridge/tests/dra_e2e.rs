//! DRA end to end on real Slurm (GresTypes=gpu) and the real control plane (resource.k8s.io/v1,
//! DRAExtendedResource): node registration from ResourceSlices (and re-registration when a slice
//! changes), claims naming exactly what Slurm allocated, two pods of one job on one node with
//! disjoint claims, a failure injected at each step of making a claim leaving none behind,
//! device-plugin GPUs without claims, and claims deleted when their pods finish.
//!
//! kube-testenv's node agent runs no DRA driver: the test creates the DeviceClasses and
//! ResourceSlices through the API, as a driver would.

mod e2e;

use e2e::controllers::Controllers;
use e2e::{Env, NS, allocated, claim_name};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const DRA_NODE: &str = "dra-1";
const PLUGIN_NODE: &str = "plugin-1";

/// Machine CPU id of (socket, core, thread) on the test node: 2 sockets x 2 cores x 2 threads,
/// siblings numbered apart (0 and 4 are one core), then 2 E-cores (8, 9).
fn cpu_id(socket: i64, core: i64, thread: i64) -> i64 {
    socket * 2 + core + thread * 4
}

fn cpu_devices() -> Value {
    let mut d = Vec::new();
    for s in 0..2 {
        for c in 0..2 {
            for t in 0..2 {
                let id = cpu_id(s, c, t);
                d.push(json!({"name": format!("cpu{id}"), "attributes": {
                    "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": c},
                    "dra.cpu/socketID": {"int": s}, "dra.cpu/coreType": {"int": 2}}}));
            }
        }
    }
    for (id, core) in [(8, 2), (9, 3)] {
        d.push(json!({"name": format!("cpu{id}"), "attributes": {
            "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": core},
            "dra.cpu/socketID": {"int": 0}, "dra.cpu/coreType": {"int": 3}}}));
    }
    json!(d)
}

/// Machine CPUs of abstract core `i` (cores sorted by socket, then core).
fn machine_cpus(i: usize) -> [i64; 2] {
    let (s, c) = ((i / 2) as i64, (i % 2) as i64);
    [cpu_id(s, c, 0), cpu_id(s, c, 1)]
}

async fn setup_devices(env: &Env) {
    let classes: Api<DeviceClass> = Api::all(env.kube.clone());
    for class in ["dra.cpu", "gpu.example.com"] {
        let dc: DeviceClass = serde_json::from_value(json!({
            "metadata": {"name": class},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{class}\"")}}]},
        }))
        .unwrap();
        classes.create(&PostParams::default(), &dc).await.unwrap();
    }
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    let gpus: Vec<Value> = (0..4)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
        .collect();
    for (name, driver, pool, devices) in [
        ("dra-1-cpu", "dra.cpu", DRA_NODE, cpu_devices()),
        ("dra-1-gpu", "gpu.example.com", "pool-numa0", json!(gpus)),
    ] {
        let s: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": DRA_NODE,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }))
        .unwrap();
        slices.create(&PostParams::default(), &s).await.unwrap();
    }
}

async fn start() -> (Env, Controllers) {
    let mut env = Env::start_configured(0, |o| {
        let mut dra = kube_testenv::NodeSpec::standard(DRA_NODE);
        let mut plugin = kube_testenv::NodeSpec::standard(PLUGIN_NODE);
        plugin.capacity.insert("nvidia.com/gpu".into(), "2".into());
        for n in [&mut dra, &mut plugin] {
            n.labels.insert(
                slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
                "true".into(),
            );
            // In the test partition (its node set selects the feature slurm-bridge).
            n.annotations.insert(
                slurm_bridge::wellknown::ANNOTATION_EXTERNAL_NODE_PARTITIONS.into(),
                "slurm-bridge".into(),
            );
        }
        o.nodes = vec![dra, plugin];
    })
    .await;
    setup_devices(&env).await;
    let controllers = Controllers::start(&env, |_| {}).await;
    env.start_scheduler().await;
    (env, controllers)
}

fn scontrol(env: &Env, args: &[&str]) -> String {
    env.slurm.run(args).unwrap_or_default()
}

/// Waits until `scontrol show node <node>` contains every one of `want`.
async fn wait_node(env: &Env, node: &str, want: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = scontrol(env, &["scontrol", "show", "node", node]);
        if want.iter().all(|w| out.contains(w)) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "node {node}: want {want:?}; scontrol shows:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The CPU DRA and GPU DRA resources of the pods below.
const DRA_CPU: &str = "deviceclass.resource.kubernetes.io/dra.cpu";
const DRA_GPU: &str = "deviceclass.resource.kubernetes.io/gpu.example.com";

fn dra_pod(name: &str, resource: &str, n: &str, command: &[&str]) -> Value {
    e2e::pod(
        name,
        json!({}),
        json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": command,
            "resources": {"requests": {resource: n, "memory": "100Mi"}, "limits": {resource: n}}}]}),
    )
}

/// The GRES indices `scontrol show job -d` lists, e.g. `GRES=gpu:gpu.example.com:2(IDX:0-1)`.
fn job_gres_indices(detail: &str) -> Vec<u32> {
    let at = detail.find("(IDX:").expect("IDX in scontrol show job -d");
    let rest = &detail[at + 5..];
    let list = &rest[..rest.find(')').expect("closing parenthesis")];
    slurm_bridge::dra::parse_gres_index(list).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dra_registration_claims_and_cleanup() {
    let (env, controllers) = start().await;

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

/// Every ResourceClaim in the test namespace.
async fn all_claims(env: &Env) -> Vec<ResourceClaim> {
    Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
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

/// One injected failure per step of making a pod's claim, each by a ValidatingAdmissionPolicy
/// that refuses one pod's write: creating the claim, allocating it in its status, pointing the
/// pod's `extendedResourceClaimStatus` at it, and binding the pod. Each pod shows the failure, and
/// with the scheduler stopped no claim is left and no pod names one. Without the policies, each
/// pod is bound with exactly one claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_at_each_step_of_a_claim_leaves_no_claim() {
    let (mut env, controllers) = start().await;
    wait_node(&env, DRA_NODE, &["Gres=gpu:gpu.example.com:4"]).await;
    let steps = [
        (
            "fail-create",
            "resourceclaims",
            "CREATE",
            "!(has(object.metadata.generateName) && object.metadata.generateName.startsWith('fail-create-'))",
            reason_claim(),
        ),
        (
            "fail-allocate",
            "resourceclaims/status",
            "UPDATE",
            "!(has(object.metadata.generateName) && object.metadata.generateName.startsWith('fail-allocate-'))",
            reason_claim(),
        ),
        (
            "fail-status",
            "pods/status",
            "UPDATE",
            "!(object.metadata.name == 'fail-status' && has(object.status.extendedResourceClaimStatus))",
            reason_claim(),
        ),
        (
            "fail-bind",
            "pods/binding",
            "CREATE",
            "object.metadata.name != 'fail-bind'",
            "BindingFailed",
        ),
    ];
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.kube.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.kube.clone());
    // The claim-creation policy last: once it refuses a dry run, the others are in force too.
    for (pod, resource, op, expression, _) in steps.iter().rev() {
        let group = if resource.starts_with("pods") {
            ""
        } else {
            "resource.k8s.io"
        };
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": pod},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                    "operations": [op], "resources": [resource]}]},
                "validations": [{"expression": expression,
                    "message": format!("injected failure for {pod}")}]},
        }))
        .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": pod},
            "spec": {"policyName": pod, "validationActions": ["Deny"]},
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    let probe: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"generateName": "fail-create-probe-"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }))
    .unwrap();
    wait_policies(&claims, &probe, true).await;

    // One GPU each, on a shared node, so the four jobs run side by side.
    for (pod, ..) in &steps {
        let mut p = dra_pod(pod, DRA_GPU, "1", &["sleep", "infinity"]);
        p["metadata"]["annotations"] = json!({"slurmjob.slinky.slurm.net/exclusive": "false"});
        env.create_pod(p).await;
    }
    for (pod, _, _, _, reason) in &steps {
        let message = env
            .wait_condition(pod, reason, Duration::from_secs(60))
            .await;
        assert!(
            message.contains(&format!("injected failure for {pod}")),
            "{pod}: {message}"
        );
        println!("{pod}: {reason}: {message}");
    }
    env.stop_scheduler().await;
    let left = all_claims(&env).await;
    assert!(
        left.is_empty(),
        "claims left behind: {:?}",
        left.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    for (pod, ..) in &steps {
        let p = env.pods().get(pod).await.unwrap();
        assert_eq!(claim_name(&p), None, "{pod} names a claim");
        assert!(!e2e::node_name_is_set(&p), "{pod} is bound");
    }

    // The policies go: every pod is bound with exactly one claim, and no GPU is in two.
    for (pod, ..) in &steps {
        bindings
            .delete(pod, &DeleteParams::default())
            .await
            .unwrap();
        policies
            .delete(pod, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_policies(&claims, &probe, false).await;
    env.start_scheduler().await;
    let names: Vec<String> = steps.iter().map(|s| s.0.to_string()).collect();
    let pods = env.wait_bound(&names, Duration::from_secs(90)).await;
    let all = all_claims(&env).await;
    assert_eq!(all.len(), steps.len(), "one claim per pod");
    let mut gpus = BTreeSet::new();
    for p in &pods {
        let name = claim_name(p).expect("a claim");
        let claim = all
            .iter()
            .find(|c| c.name_any() == name)
            .expect("the named claim exists");
        for (_, _, device) in allocated(claim) {
            assert!(gpus.insert(device.clone()), "{device} in two claims");
        }
    }
    assert_eq!(gpus.len(), steps.len());
    env.assert_invariants().await;
    controllers.stop().await;
}

/// Waits until a dry run creating `probe` is refused (`in_force`) or accepted: the policies are
/// in force, or gone. The API server picks policy changes up a moment after they are written.
async fn wait_policies(claims: &Api<ResourceClaim>, probe: &ResourceClaim, in_force: bool) {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.create(&dry_run, probe).await.is_ok() == in_force {
        assert!(
            Instant::now() < deadline,
            "the policies are {} after 30 s",
            if in_force {
                "not in force"
            } else {
                "still in force"
            }
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn reason_claim() -> &'static str {
    slurm_bridge::dra::claims::REASON_CLAIM_FAILED
}

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
