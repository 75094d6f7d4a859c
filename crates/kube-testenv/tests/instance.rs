//! kube-testenv against the control plane it builds and runs: these tests need root and the
//! cached (or buildable) Kubernetes binaries. Each test starts its own instance; independent
//! checks share one to keep the run short.

mod common;

use common::{TIMEOUT, assert_all_gone, daemon_pgid, processes_naming, watchdog_of};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount, Taint};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::runtime::watcher;
use kube_testenv::{Instance, InstanceOptions, NodeSpec};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Polls `check` every 200 ms until it returns `Some`, for at most [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {} s waiting for {what}",
            TIMEOUT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(opts: InstanceOptions) -> Instance {
    Instance::start(opts)
        .await
        .unwrap_or_else(|e| panic!("start a kube-testenv instance: {e}"))
}

fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("test object deserializes")
}

/// The HTTP status of a refused API call.
fn refused<T: std::fmt::Debug>(what: &str, r: kube::Result<T>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("{what}: expected the API server to refuse, got {other:?}"),
    }
}

fn quantities(
    m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, String> {
    m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Exit code, reason, startedAt and finishedAt of the first container's termination.
fn termination(pod: &Pod) -> Option<(i32, String, Duration)> {
    let t = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()?;
    let ran = match (&t.started_at, &t.finished_at) {
        (Some(s), Some(f)) => Duration::from_secs((f.0 - s.0).get_seconds().max(0) as u64),
        _ => Duration::ZERO,
    };
    Some((t.exit_code, t.reason.unwrap_or_default(), ran))
}

fn has_condition(conds: Option<&Vec<serde_json::Value>>, type_: &str) -> bool {
    conds.is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// A pod running `command`, bound to `node` at creation (or left to kube-scheduler).
fn pod(name: &str, node: Option<&str>, command: &[&str], annotations: serde_json::Value) -> Pod {
    object(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
        },
    }))
}

/// Every distinct phase each pod of a namespace went through, as a watch saw them.
struct PhaseLog {
    seen: Arc<Mutex<HashMap<String, Vec<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PhaseLog {
    /// Returns once the watch has listed the namespace, so every later change is seen.
    async fn start(api: Api<Pod>) -> PhaseLog {
        let seen: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let mut log = log.lock().unwrap();
                        let phases = log.entry(name).or_default();
                        let ph = phase(&p);
                        if phases.last() != Some(&ph) {
                            phases.push(ph);
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(TIMEOUT, listed)
            .await
            .expect("the pod watch lists within the timeout")
            .expect("the pod watch task runs");
        PhaseLog { seen, task }
    }

    fn phases(&self, pod: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for PhaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Nodes, Leases, kubectl, API discovery and the CRDs of a plain instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_serves_nodes_leases_apis_and_crds() {
    let inst = start(InstanceOptions::with_nodes(2)).await;
    let client = inst.client();

    // Leases first: their renewal is checked last, after the other checks had time to pass.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut first_renewal = BTreeMap::new();
    for name in ["node-1", "node-2"] {
        let lease = eventually(&format!("the Lease of {name}"), || {
            let leases = leases.clone();
            async move { leases.get_opt(name).await.ok().flatten() }
        })
        .await;
        let spec = lease.spec.clone().expect("lease spec");
        assert_eq!(spec.holder_identity.as_deref(), Some(name));
        let owner = &lease.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", name));
        first_renewal.insert(name, spec.renew_time.expect("renewTime").0);
    }

    // Nodes: the standard capacity, Ready, and the not-ready taint lifted.
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["node-1", "node-2"]);
    let standard = strings(&[("cpu", "8"), ("memory", "16000Mi"), ("pods", "110")]);
    for n in &list.items {
        let st = n.status.as_ref().expect("node status");
        assert_eq!(
            quantities(st.capacity.as_ref()),
            standard,
            "{:?}",
            n.metadata.name
        );
        assert_eq!(
            quantities(st.allocatable.as_ref()),
            standard,
            "{:?}",
            n.metadata.name
        );
        assert!(is_ready(n), "{:?} not Ready", n.metadata.name);
        assert!(
            taints(n)
                .iter()
                .all(|t| t.key != "node.kubernetes.io/not-ready"),
            "{:?} still tainted: {:?}",
            n.metadata.name,
            taints(n)
        );
    }

    // kubectl (protobuf, unlike kube-rs) and the versions the binaries were stamped with.
    let out = inst
        .kubectl(&["create", "namespace", "x"])
        .expect("kubectl create namespace");
    assert!(out.contains("namespace/x created"), "{out}");
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(ns.get_opt("x").await.expect("get namespace x").is_some());
    let version = inst.kubectl(&["version"]).expect("kubectl version");
    assert!(version.contains("Client Version: v1.36.3"), "{version}");
    assert!(version.contains("Server Version: v1.36.3"), "{version}");
    let info = client.apiserver_version().await.expect("/version");
    assert_eq!(info.git_version, "v1.36.3");

    // API discovery: the alpha Workload API (runtime config + feature gate) and DRA.
    for (group_version, kinds) in [
        ("scheduling.k8s.io/v1alpha2", ["Workload", "PodGroup"]),
        ("resource.k8s.io/v1", ["ResourceClaim", "DeviceClass"]),
    ] {
        let resources = client
            .list_api_group_resources(group_version)
            .await
            .unwrap_or_else(|e| panic!("discovery of {group_version}: {e}"));
        let served: Vec<&str> = resources
            .resources
            .iter()
            .map(|r| r.kind.as_str())
            .collect();
        for kind in kinds {
            assert!(
                served.contains(&kind),
                "{group_version} lacks {kind}: {served:?}"
            );
        }
    }

    // The CRDs every instance has, Established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "podgroups.scheduling.x-k8s.io",
        "jobsets.jobset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
    ] {
        let crd = crds
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let conds = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} not Established: {conds:?}"
        );
    }

    // The CRD schema is enforced: a coscheduling PodGroup needs an integer minMember ≥ 1.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "PodGroup",
    ));
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let group = |name: &str, min: serde_json::Value| -> DynamicObject {
        object(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": min},
        }))
    };
    groups
        .create(&PostParams::default(), &group("valid", json!(2)))
        .await
        .expect("a valid PodGroup is accepted");
    for (name, min) in [("text", json!("abc")), ("zero", json!(0))] {
        let r = groups
            .create(&PostParams::default(), &group(name, min.clone()))
            .await;
        match r {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "minMember {min}: {s:?}");
                assert!(
                    s.message.contains("minMember"),
                    "minMember {min}: {}",
                    s.message
                );
            }
            other => panic!("minMember {min} accepted: {other:?}"),
        }
    }

    // Each node's Lease is renewed (every 10 s, as a kubelet does).
    for (name, first) in first_renewal {
        eventually(&format!("a renewal of the Lease of {name}"), || {
            let leases = leases.clone();
            async move {
                let lease = leases.get(name).await.ok()?;
                let renewed = lease.spec?.renew_time?.0;
                (renewed > first).then_some(())
            }
        })
        .await;
    }
}

/// A ServiceAccount token carries exactly the rights of its Role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_limits_a_service_account_token_to_its_role() {
    let inst = start(InstanceOptions::default()).await;
    let admin = inst.client();
    let pp = PostParams::default();
    for ns in ["team-a", "team-b"] {
        let obj: Namespace = object(json!({"metadata": {"name": ns}}));
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &obj)
            .await
            .expect("create namespace");
    }
    let sa: ServiceAccount = object(json!({"metadata": {"name": "reader"}}));
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team-a");
    sas.create(&pp, &sa).await.expect("create ServiceAccount");
    let role: Role = object(json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), "team-a")
        .create(&pp, &role)
        .await
        .expect("create Role");
    let binding: RoleBinding = object(json!({
        "metadata": {"name": "reader-reads-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team-a"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), "team-a")
        .create(&pp, &binding)
        .await
        .expect("create RoleBinding");
    // A pod for the reader to see (no node and no scheduler: it stays Pending). It runs as
    // `reader`: the namespace's `default` ServiceAccount may not exist yet.
    let mut visible = pod("visible", None, &["sleep", "1"], json!({}));
    visible.spec.as_mut().unwrap().service_account_name = Some("reader".into());
    Api::<Pod>::namespaced(admin.clone(), "team-a")
        .create(&pp, &visible)
        .await
        .expect("create a pod as admin");

    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sas
        .create_token_request("reader", &pp, &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token");

    // A client with only the token and the cluster CA from the instance's kubeconfig.
    let client_with = |token: &str| {
        let admin_kc = kube::config::Kubeconfig::read_from(inst.kubeconfig()).expect("kubeconfig");
        let cluster = admin_kc.clusters[0].cluster.clone().expect("cluster");
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            cluster.server.expect("server"),
            cluster.certificate_authority_data.expect("CA data"),
        );
        kube::config::Kubeconfig::from_yaml(&yaml).expect("token kubeconfig")
    };
    let reader = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(client_with(&token), &Default::default())
            .await
            .expect("token config"),
    )
    .expect("token client");

    let pods_a: Api<Pod> = Api::namespaced(reader.clone(), "team-a");
    // The RBAC authorizer learns of new bindings through its informers: allow it a moment.
    let listed = eventually("the reader to list pods in team-a", || {
        let pods_a = pods_a.clone();
        async move { pods_a.list(&ListParams::default()).await.ok() }
    })
    .await;
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["visible"]);
    pods_a.get("visible").await.expect("get is granted");

    let intruder = pod("intruder", None, &["sleep", "1"], json!({}));
    assert_eq!(
        refused("create a pod", pods_a.create(&pp, &intruder).await),
        403
    );
    let pods_b: Api<Pod> = Api::namespaced(reader.clone(), "team-b");
    assert_eq!(
        refused(
            "list pods in team-b",
            pods_b.list(&ListParams::default()).await
        ),
        403
    );
    let nodes: Api<Node> = Api::all(reader.clone());
    assert_eq!(
        refused("list nodes", nodes.list(&ListParams::default()).await),
        403
    );
    // A token the API server did not sign authenticates nobody.
    let forged = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(client_with("not-a-token"), &Default::default())
            .await
            .expect("forged config"),
    )
    .expect("forged client");
    assert_eq!(
        refused(
            "list pods with a forged token",
            Api::<Pod>::namespaced(forged, "team-a")
                .list(&ListParams::default())
                .await
        ),
        401
    );
}

/// Pods bound at creation run, end, fail and go away as the agent plays their kubelet; a Job's
/// pods are bound by kube-scheduler and the Job controller completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_pods_through_their_lifecycle() {
    let inst = start(InstanceOptions {
        kube_scheduler: true,
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let client = inst.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let log = PhaseLog::start(pods.clone()).await;
    let pp = PostParams::default();
    let exit_code = json!({"kube-testenv/exit-code": "3"});
    for p in [
        pod("two-seconds", Some("node-1"), &["sleep", "2"], json!({})),
        pod("exit-three", Some("node-2"), &["sleep", "1"], exit_code),
        pod("forever", Some("node-1"), &["sleep", "infinity"], json!({})),
    ] {
        pods.create(&pp, &p).await.expect("create pod");
    }
    let job: Job = object(json!({
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"]}],
            }},
        },
    }));
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&pp, &job).await.expect("create Job");

    let ended = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("pod {name} to end"), || {
                let pods = pods.clone();
                async move {
                    let p = pods.get(name).await.ok()?;
                    matches!(phase(&p).as_str(), "Succeeded" | "Failed").then_some(p)
                }
            })
            .await
        }
    };

    // sleep 2: Running, then Succeeded no sooner than 2 s later.
    let p = ended("two-seconds").await;
    assert_eq!(phase(&p), "Succeeded");
    let (code, reason, ran) = termination(&p).expect("container terminated");
    assert_eq!((code, reason.as_str()), (0, "Completed"));
    assert!(ran >= Duration::from_secs(2), "sleep 2 ended after {ran:?}");
    let status = p.status.as_ref().unwrap();
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.")),
        "{status:?}"
    );
    assert_eq!(
        log.phases("two-seconds"),
        ["Pending", "Running", "Succeeded"]
    );

    // The exit-code annotation: Failed with exit code 3.
    let p = ended("exit-three").await;
    assert_eq!(phase(&p), "Failed");
    let (code, reason, _) = termination(&p).expect("container terminated");
    assert_eq!((code, reason.as_str()), (3, "Error"));
    assert_eq!(log.phases("exit-three"), ["Pending", "Running", "Failed"]);

    // Deletion with a grace period: the API server marks the pod, the agent kills it (137)
    // when the grace period is over and removes it.
    eventually("pod forever to run", || {
        let pods = pods.clone();
        async move { (phase(&pods.get("forever").await.ok()?) == "Running").then_some(()) }
    })
    .await;
    let dp = DeleteParams {
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    let marked = pods
        .delete("forever", &dp)
        .await
        .expect("delete pod")
        .left()
        .expect("a pod on a node is deleted gracefully, by its kubelet");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(1));
    eventually("pod forever to be gone", || {
        let pods = pods.clone();
        async move { pods.get_opt("forever").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert_eq!(log.phases("forever"), ["Pending", "Running", "Failed"]);

    // The Job: pods created without a node, bound by kube-scheduler, completed.
    let job = eventually("Job batch to complete", || {
        let jobs = jobs.clone();
        async move {
            let j = jobs.get("batch").await.ok()?;
            let done = j
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            done.then_some(j)
        }
    })
    .await;
    assert_eq!(job.status.as_ref().unwrap().succeeded, Some(2));
    let job_pods = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=batch"))
        .await
        .expect("list the Job's pods");
    assert_eq!(job_pods.items.len(), 2);
    for p in &job_pods.items {
        assert_eq!(phase(p), "Succeeded");
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            matches!(node.as_deref(), Some("node-1" | "node-2")),
            "{:?} bound to {node:?}",
            p.metadata.name
        );
    }
}

/// Nodes added later get exactly their capacity, labels and taints, and adopt the pods bound
/// to them before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_nodes_registers_custom_nodes() {
    let inst = start(InstanceOptions::default()).await;
    let gpu = NodeSpec {
        name: "gpu-1".into(),
        labels: strings(&[
            ("topology.kubernetes.io/zone", "a"),
            ("example.com/pool", "gpu"),
        ]),
        capacity: strings(&[("cpu", "32"), ("memory", "128Gi"), ("nvidia.com/gpu", "4")]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    // The nodes-file format of `--nodes-file`: allocatable below capacity, an annotation.
    let from_yaml = kube_testenv::agent::parse_nodes_yaml(
        "nodes:\n- name: big-mem\n  annotations: {example.com/owner: team-a}\n  capacity: {memory: 1Ti}\n  allocatable: {memory: 1000Gi, cpu: 7500m}\n",
    )
    .expect("nodes file");
    let mut specs = vec![gpu];
    specs.extend(from_yaml);

    // Pods bound to big-mem before it registers: one not started yet, and two that (as their
    // status says) started 150 s ago on a kubelet before this one, as after an agent restart.
    // The agent adopts them with the time they already ran: 2 minutes of run time, and an
    // active deadline of 2 minutes, are over.
    let pods: Api<Pod> = Api::namespaced(inst.client(), "default");
    let pp = PostParams::default();
    let mut overdue = pod(
        "overdue",
        Some("big-mem"),
        &["sleep", "infinity"],
        json!({}),
    );
    overdue.spec.as_mut().unwrap().active_deadline_seconds = Some(120);
    for p in [
        pod("fresh", Some("big-mem"), &["sleep", "infinity"], json!({})),
        pod(
            "resumed",
            Some("big-mem"),
            &["sleep", "infinity"],
            json!({"kube-testenv/duration": "2m"}),
        ),
        overdue,
    ] {
        pods.create(&pp, &p).await.expect("create pod");
    }
    let started =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(150);
    let running = json!({"status": {
        "phase": "Running",
        "startTime": started.to_string(),
        "containerStatuses": [{
            "name": "main", "image": "busybox:1.36", "imageID": "", "ready": true,
            "restartCount": 0, "started": true, "state": {"running": {"startedAt": started.to_string()}},
        }],
    }});
    for name in ["resumed", "overdue"] {
        pods.patch_status(
            name,
            &Default::default(),
            &kube::api::Patch::Merge(&running),
        )
        .await
        .expect("write the status of an earlier kubelet");
    }
    // Let the agent's pod watch deliver those statuses before the node appears.
    tokio::time::sleep(Duration::from_secs(2)).await;
    inst.add_nodes(specs).await.expect("add nodes");

    let nodes: Api<Node> = Api::all(inst.client());
    let well_known = [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ];

    let gpu = nodes.get("gpu-1").await.expect("node gpu-1");
    let st = gpu.status.as_ref().expect("status");
    let want = strings(&[
        ("cpu", "32"),
        ("memory", "128Gi"),
        ("nvidia.com/gpu", "4"),
        ("pods", "110"),
    ]);
    assert_eq!(quantities(st.capacity.as_ref()), want);
    assert_eq!(quantities(st.allocatable.as_ref()), want);
    let mut labels = strings(&well_known);
    labels.extend(strings(&[
        ("kubernetes.io/hostname", "gpu-1"),
        ("topology.kubernetes.io/zone", "a"),
        ("example.com/pool", "gpu"),
    ]));
    assert_eq!(gpu.metadata.labels.clone().unwrap_or_default(), labels);
    let t = taints(&gpu);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(
        (
            t[0].key.as_str(),
            t[0].value.as_deref(),
            t[0].effect.as_str()
        ),
        ("dedicated", Some("gpu"), "NoSchedule")
    );
    assert!(is_ready(&gpu));

    let big = nodes.get("big-mem").await.expect("node big-mem");
    let st = big.status.as_ref().expect("status");
    assert_eq!(
        quantities(st.capacity.as_ref()),
        strings(&[("cpu", "8"), ("memory", "1Ti"), ("pods", "110")])
    );
    assert_eq!(
        quantities(st.allocatable.as_ref()),
        strings(&[("cpu", "7500m"), ("memory", "1000Gi"), ("pods", "110")])
    );
    assert_eq!(
        big.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/owner"))
            .map(String::as_str),
        Some("team-a")
    );
    assert!(taints(&big).is_empty(), "{:?}", taints(&big));
    assert!(is_ready(&big));

    let ended = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("pod {name} to end"), || {
                let pods = pods.clone();
                async move {
                    let p = pods.get(name).await.ok()?;
                    matches!(phase(&p).as_str(), "Succeeded" | "Failed").then_some(p)
                }
            })
            .await
        }
    };
    let resumed = ended("resumed").await;
    assert_eq!(phase(&resumed), "Succeeded");
    let overdue = ended("overdue").await;
    assert_eq!(phase(&overdue), "Failed");
    let status = overdue.status.as_ref().unwrap();
    assert_eq!(
        status.reason.as_deref(),
        Some("DeadlineExceeded"),
        "{status:?}"
    );
    eventually("pod fresh to run", || {
        let pods = pods.clone();
        async move { (phase(&pods.get("fresh").await.ok()?) == "Running").then_some(()) }
    })
    .await;

    let all = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    assert_eq!(all.items.len(), 2);
    // An invalid spec is refused before it reaches the API server.
    let err = inst
        .add_nodes(vec![NodeSpec::standard("Not_A_DNS_Name")])
        .await
        .expect_err("an invalid node name is refused");
    assert!(err.to_string().contains("DNS"), "{err}");
}

/// Two instances side by side are separate clusters; dropping one stops all its processes
/// and removes its folder, and leaves the other running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_isolated_and_dropping_one_stops_everything() {
    let (a, b) = tokio::join!(
        start(InstanceOptions::default()),
        start(InstanceOptions::with_nodes(1))
    );
    assert_ne!(a.name(), b.name());
    assert_ne!(a.server(), b.server());
    assert_ne!(a.dir(), b.dir());
    assert!(a.kubeconfig().is_file() && b.kubeconfig().is_file());

    let ns: Namespace = object(json!({"metadata": {"name": "only-in-a"}}));
    Api::<Namespace>::all(a.client())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace in a");
    let in_b = Api::<Namespace>::all(b.client())
        .get_opt("only-in-a")
        .await
        .expect("get namespace in b");
    assert!(in_b.is_none(), "the instances share state");
    let count = |inst: &Instance| {
        let nodes: Api<Node> = Api::all(inst.client());
        async move {
            nodes
                .list(&ListParams::default())
                .await
                .expect("list nodes")
                .items
                .len()
        }
    };
    assert_eq!((count(&a).await, count(&b).await), (0, 1));

    let procs = processes_naming(a.dir());
    for daemon in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        assert!(
            procs
                .iter()
                .any(|p| p.args[0].ends_with(&format!("/{daemon}"))),
            "{daemon} of {} not found: {procs:?}",
            a.dir().display()
        );
    }
    let (dir_a, pgid_a, watchdog_a) = (
        a.dir().to_path_buf(),
        daemon_pgid(a.dir()),
        watchdog_of(a.dir()),
    );
    assert!(pgid_a > 0);
    drop(a);
    tokio::task::spawn_blocking(move || assert_all_gone(&dir_a, pgid_a, watchdog_a.pgid))
        .await
        .expect("check instance a is gone");

    // b is untouched.
    assert_eq!(count(&b).await, 1);
    let out = b
        .kubectl(&["get", "nodes", "-o", "name"])
        .expect("kubectl on b");
    assert_eq!(out.trim(), "node/node-1");
    let (dir_b, pgid_b, watchdog_b) = (
        b.dir().to_path_buf(),
        daemon_pgid(b.dir()),
        watchdog_of(b.dir()),
    );
    assert!(!processes_naming(&dir_b).is_empty());
    drop(b);
    tokio::task::spawn_blocking(move || assert_all_gone(&dir_b, pgid_b, watchdog_b.pgid))
        .await
        .expect("check instance b is gone");
}

/// The JobSet and LeaderWorkerSet controllers (with their webhooks) drive their workloads to
/// completion and readiness on the agent's nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_controllers_run_jobsets_and_leaderworkersets() {
    let inst = start(InstanceOptions {
        workload_controllers: true,
        kube_scheduler: true,
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let client = inst.client();
    let pp = PostParams::default();
    let container = json!([{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"]}]);

    let jobset_ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
    ));
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &jobset_ar);
    let jobset: DynamicObject = object(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pair"},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": 2,
            "template": {"spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": container}},
            }},
        }]},
    }));
    jobsets.create(&pp, &jobset).await.expect("create JobSet");

    let lws_ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
    ));
    let lwss: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &lws_ar);
    let lws: DynamicObject = object(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "server"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [
                    {"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
                ]}},
            },
        },
    }));
    lwss.create(&pp, &lws)
        .await
        .expect("create LeaderWorkerSet");

    eventually("JobSet pair to complete", || {
        let jobsets = jobsets.clone();
        async move {
            let js = jobsets.get("pair").await.ok()?;
            has_condition(js.data["status"]["conditions"].as_array(), "Completed").then_some(())
        }
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let jobs = jobs
        .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=pair"))
        .await
        .expect("list the JobSet's Jobs");
    assert_eq!(jobs.items.len(), 2);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = eventually("the 2 pods of LeaderWorkerSet server to run", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=server"))
                .await
                .ok()?;
            (list.items.len() == 2 && list.items.iter().all(|p| phase(p) == "Running"))
                .then_some(list.items)
        }
    })
    .await;
    let mut roles: Vec<String> = running
        .iter()
        .map(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("leaderworkerset.sigs.k8s.io/worker-index"))
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    roles.sort();
    assert_eq!(roles, ["0", "1"], "a leader and a worker");
    // Ready pods make the group, and so the LeaderWorkerSet, available.
    eventually("LeaderWorkerSet server to be Available", || {
        let lwss = lwss.clone();
        async move {
            let lws = lwss.get("server").await.ok()?;
            let status = &lws.data["status"];
            (has_condition(status["conditions"].as_array(), "Available")
                && status["readyReplicas"] == 1)
                .then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_kubelet_makes_its_node_not_ready_and_add_nodes_brings_it_back() {
    let inst = start(InstanceOptions {
        node_monitor_grace_period: Some(Duration::from_secs(20)),
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let nodes: Api<Node> = Api::all(inst.client());
    let running = nodes.clone();
    inst.lose_kubelet("node-1").unwrap();
    let lost = eventually("node-1 marked not Ready with the unreachable taint", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get("node-1").await.ok()?;
            let unreachable = taints(&n)
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable");
            (!is_ready(&n) && unreachable).then_some(n)
        }
    })
    .await;
    let ready = lost
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .expect("Ready condition");
    assert_eq!(ready.status, "Unknown", "{ready:?}");
    assert!(
        is_ready(&running.get("node-2").await.unwrap()),
        "the other node keeps its kubelet"
    );
    inst.add_nodes(vec![kube_testenv::NodeSpec::standard("node-1")])
        .await
        .unwrap();
    let back = nodes.get("node-1").await.unwrap();
    assert!(is_ready(&back), "node-1 served again");
    assert!(
        !taints(&back)
            .iter()
            .any(|t| t.key.starts_with("node.kubernetes.io/")),
        "{:?}",
        taints(&back)
    );
}
