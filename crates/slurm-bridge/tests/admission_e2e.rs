//! The admission webhooks against a real API server (kube-testenv): registered through
//! Mutating- and ValidatingWebhookConfigurations (failurePolicy Fail) with a caBundle, called
//! over TLS on 127.0.0.1, served in-process.
//!
//! - pods created in a managed namespace (kube client and kubectl) get the bridge scheduler and
//!   are bound through Slurm; a forged jobid label is refused with the reference message; a
//!   running pod's jobid label cannot change; another scheduler's pod is left alone; bad
//!   AdmissionReviews get 400 and the webhook goes on; a certificate rotated while serving;
//! - self-managed certificates: the bridge fills the caBundle and the API server calls it;
//!   then 1,000 pod creations through both webhooks, with the latency figures.

mod e2e;

use e2e::admission::{Certs, WebhookOptions, register, served_leaf, start_with, tls_connect};
use e2e::{Env, SCHEDULER, create_retrying, percentile, temp_dir};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::admission::validate;
use slurm_bridge::config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const MANAGED_NS: &str = "hpc";

/// How long a creation is retried while the API server cannot call the webhooks yet.
const RETRY: Duration = Duration::from_secs(30);

/// The webhooks with `certs`, looking for new certificate files every 200 ms (the rotation
/// below is seen quickly).
fn fast_cert_poll(certs: Certs) -> WebhookOptions {
    WebhookOptions {
        certs,
        cert_poll_interval: Some(Duration::from_millis(200)),
    }
}

async fn create_namespace(client: &kube::Client, name: &str, labels: Value) {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// A pod that names no scheduler.
fn plain_pod(name: &str, ns: &str, extra: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                  "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            match (o.get_mut(k), x) {
                (Some(Value::Object(a)), Value::Object(b)) => {
                    for (k2, x2) in b {
                        a.insert(k2.clone(), x2.clone());
                    }
                }
                _ => {
                    o.insert(k.clone(), x.clone());
                }
            }
        }
    }
    serde_json::from_value(v).unwrap()
}

fn scheduler_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or_default()
}

/// One HTTPS POST on a fresh connection: (status, body, leaf certificate DER).
async fn https_post(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tls_connect(addr, ca_pem).await.unwrap();
    let leaf = served_leaf(&s);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body, leaf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_pods_go_through_slurm_and_forged_labels_are_refused() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    let client = env.kube.clone();
    create_namespace(&client, MANAGED_NS, json!({})).await;

    // Certificates provided in the cert dir (made here with the bridge's own generator).
    let cfg = Config {
        scheduler_name: SCHEDULER.into(),
        managed_namespaces: vec![MANAGED_NS.into()],
        ..Default::default()
    };
    let hook = start_with(
        &client,
        cfg,
        "slurm-bridge-admission",
        fast_cert_poll(Certs::Provided),
    )
    .await;
    let (dir, sm) = (hook.cert_dir.clone(), &hook.certs);
    let ca = sm.ca_bundle().unwrap();
    let addr = hook.handle.local_addr;

    let pods: Api<Pod> = Api::namespaced(client.clone(), MANAGED_NS);
    // Through the kube client, with a nodeName that must be cleared.
    let created = create_retrying(
        &pods,
        &plain_pod(
            "via-api",
            MANAGED_NS,
            json!({"spec": {"nodeName": "node-2"}}),
        ),
        RETRY,
    )
    .await;
    assert_eq!(
        scheduler_of(&created),
        SCHEDULER,
        "mutated to the bridge scheduler"
    );
    assert!(
        created.spec.as_ref().unwrap().node_name.is_none(),
        "nodeName cleared"
    );

    // Through kubectl.
    let manifest = dir.join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: via-kubectl\n  namespace: {MANAGED_NS}\nspec:\n  containers:\n  - name: main\n    image: busybox\n    command: [sleep, infinity]\n    resources:\n      requests: {{cpu: \"1\", memory: 100Mi}}\n"
        ),
    )
    .unwrap();
    env.kube_env
        .kubectl(&["apply", "-f", manifest.to_str().unwrap()])
        .expect("kubectl apply");
    let via_kubectl = pods.get("via-kubectl").await.unwrap();
    assert_eq!(scheduler_of(&via_kubectl), SCHEDULER);

    // Both end up bound through Slurm without naming the scheduler.
    let names = vec!["via-api".to_string(), "via-kubectl".to_string()];
    let bound = env
        .wait_bound_in(MANAGED_NS, &names, Duration::from_secs(60))
        .await;
    for p in &bound {
        assert!(
            p.labels()
                .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID),
            "{} has a Slurm job id",
            p.metadata.name.as_deref().unwrap_or_default()
        );
    }

    // A forged jobid label is refused with the reference message.
    let forged = plain_pod(
        "forged",
        MANAGED_NS,
        json!({"metadata": {"labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: "42"}}}),
    );
    let err = pods
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(validate::MSG_JOBID_LABEL), "{err}");
    // So is the kubectl equivalent.
    let forged_yaml = dir.join("forged.yaml");
    std::fs::write(
        &forged_yaml,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: forged2\n  namespace: {MANAGED_NS}\n  annotations:\n    slinky.slurm.net/slurm-node: node-1\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
        ),
    )
    .unwrap();
    let err = env
        .kube_env
        .kubectl(&["apply", "-f", forged_yaml.to_str().unwrap()])
        .unwrap_err();
    assert!(
        err.to_string().contains(validate::MSG_NODE_ANNOTATION),
        "{err}"
    );

    // A running pod's jobid label cannot change.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = pods.get("via-api").await.unwrap();
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            break;
        }
        assert!(Instant::now() < deadline, "via-api not Running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = pods
        .patch(
            "via-api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: "999999"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(validate::MSG_RUNNING_JOBID),
        "{err}"
    );
    // Other updates of a managed pod go through (no patch of the immutable schedulerName).
    pods.patch(
        "via-api",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("a plain label update is allowed");

    // Another scheduler's pod in a managed namespace is left alone (no rewrite, no checks).
    let custom = pods
        .create(
            &PostParams::default(),
            &plain_pod(
                "custom",
                MANAGED_NS,
                json!({"spec": {"schedulerName": "custom-scheduler", "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}}),
            ),
        )
        .await
        .expect("another scheduler's pod is not validated");
    assert_eq!(scheduler_of(&custom), "custom-scheduler");
    // A pod outside the managed namespaces keeps the default scheduler.
    let outside = Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &plain_pod("outside", "default", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(scheduler_of(&outside), "default-scheduler");

    // Bad AdmissionReviews: 400 with a message; the webhook keeps serving.
    for body in [
        &b"not json"[..],
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        br#"{"kind":"Pod"}"#,
    ] {
        let (status, msg, _) = https_post(addr, &ca, "/validate--v1-pod", body).await;
        assert_eq!(status, 400, "{msg}");
        assert!(!msg.trim().is_empty());
    }

    // A certificate rotated while serving: new files in the cert dir; new connections get the
    // new certificate, and the API server (same CA) goes on calling the webhook.
    let (_, _, before) = https_post(addr, &ca, "/validate--v1-pod", b"x").await;
    std::fs::remove_file(dir.join("tls.crt")).unwrap();
    sm.ensure_files(SystemTime::now()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, now) = https_post(addr, &ca, "/validate--v1-pod", b"x").await;
        if now != before {
            break;
        }
        assert!(Instant::now() < deadline, "new certificate not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = pods
        .create(
            &PostParams::default(),
            &plain_pod("after-rotation", MANAGED_NS, json!({})),
        )
        .await
        .expect("the API server calls the webhook with the rotated certificate");
    assert_eq!(scheduler_of(&after), SCHEDULER);
    env.wait_bound_in(
        MANAGED_NS,
        &["after-rotation".to_string()],
        Duration::from_secs(60),
    )
    .await;

    drop(hook);
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn self_managed_certificates_fill_the_ca_bundle() {
    e2e::init_tracing();
    let kube_env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::with_nodes(0))
        .await
        .expect("start the Kubernetes control plane");
    let client = kube_env.client();
    // Managed by a namespace selector this time (watch cache).
    create_namespace(&client, MANAGED_NS, json!({"slurm-bridge": "managed"})).await;
    create_namespace(&client, "web", json!({"slurm-bridge": "no"})).await;
    // The webhook must be started first to know its port: bind, then register without a
    // caBundle (calls fail, and with failurePolicy Fail so do pod creations, until the bridge
    // has filled it).
    let cfg = Config {
        scheduler_name: SCHEDULER.into(),
        managed_namespace_selector: Some(
            serde_json::from_value(json!({"matchLabels": {"slurm-bridge": "managed"}})).unwrap(),
        ),
        ..Default::default()
    };
    let certs = Certs::SelfManaged {
        configurations: vec!["slurm-bridge-admission".into()],
        check_interval: Duration::from_millis(500),
    };
    let hook = start_with(
        &client,
        cfg,
        "slurm-bridge-admission",
        fast_cert_poll(certs),
    )
    .await;

    // The bridge fills both configurations' caBundle with its CA.
    let ca = hook.certs.ca_bundle().expect("CA written");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get("slurm-bridge-admission")
            .await
            .unwrap();
        let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get("slurm-bridge-admission")
            .await
            .unwrap();
        let bundle = |b: Option<&k8s_openapi::ByteString>| b.map(|b| b.0.clone());
        let mb = bundle(
            m.webhooks.as_ref().unwrap()[0]
                .client_config
                .ca_bundle
                .as_ref(),
        );
        let vb = bundle(
            v.webhooks.as_ref().unwrap()[0]
                .client_config
                .ca_bundle
                .as_ref(),
        );
        if mb.as_deref() == Some(ca.as_bytes()) && vb.as_deref() == Some(ca.as_bytes()) {
            break;
        }
        assert!(Instant::now() < deadline, "caBundle not synced");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The API server calls the webhook successfully.
    let pods: Api<Pod> = Api::namespaced(client.clone(), MANAGED_NS);
    let p = create_retrying(&pods, &plain_pod("first", MANAGED_NS, json!({})), RETRY).await;
    assert_eq!(scheduler_of(&p), SCHEDULER);
    let web = Api::<Pod>::namespaced(client.clone(), "web")
        .create(&PostParams::default(), &plain_pod("w", "web", json!({})))
        .await
        .unwrap();
    assert_eq!(
        scheduler_of(&web),
        "default-scheduler",
        "selector does not match"
    );
    // A namespace created just now (maybe not in the watch cache yet) is handled too.
    create_namespace(&client, "fresh", json!({"slurm-bridge": "managed"})).await;
    let fresh = Api::<Pod>::namespaced(client.clone(), "fresh")
        .create(&PostParams::default(), &plain_pod("f", "fresh", json!({})))
        .await
        .unwrap();
    assert_eq!(scheduler_of(&fresh), SCHEDULER);

    // Someone (a Helm upgrade) resets the caBundle: the bridge puts it back.
    let mut m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("slurm-bridge-admission")
        .await
        .unwrap();
    m.webhooks.as_mut().unwrap()[0].client_config.ca_bundle = None;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .replace("slurm-bridge-admission", &PostParams::default(), &m)
        .await
        .unwrap();
    let p = create_retrying(&pods, &plain_pod("second", MANAGED_NS, json!({})), RETRY).await;
    assert_eq!(scheduler_of(&p), SCHEDULER);

    // Benchmark: 1,000 pod creations through both webhooks (16 at a time).
    let n = 1000;
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for i in 0..n {
        let pods = pods.clone();
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            let t = Instant::now();
            let p = pods
                .create(
                    &PostParams::default(),
                    &plain_pod(&format!("bench-{i}"), MANAGED_NS, json!({})),
                )
                .await
                .expect("create");
            assert_eq!(scheduler_of(&p), SCHEDULER);
            t.elapsed()
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.push(t.await.unwrap());
    }
    let wall = started.elapsed();
    lat.sort();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &hook.registry).unwrap();
    let server_side: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("slurm_bridge_admission_duration_seconds_sum")
                || l.starts_with("slurm_bridge_admission_duration_seconds_count")
        })
        .collect();
    eprintln!(
        "BENCH admission: {n} pod creations through both webhooks, 16 concurrent, in {wall:?}: create latency p50 {:?}, p99 {:?}, max {:?}; webhook server side: {server_side:?}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
    );
    drop(hook);
}

/// `slurm-bridge run` serves the webhooks too: self-managed certificates, the caBundle filled
/// by the process, pods in the managed namespace scheduled through Slurm, a clean SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_serves_the_webhooks_with_self_managed_certificates() {
    let env = Env::start(2).await;
    let client = env.kube.clone();
    create_namespace(&client, MANAGED_NS, json!({})).await;
    let dir = temp_dir("sb-admission-e2e-run");
    let addr: SocketAddr = format!("127.0.0.1:{}", e2e::free_port()).parse().unwrap();
    register(&client, "slurm-bridge-admission", addr, None).await;
    let certs = dir.join("certs");
    let (mut child, _config) = e2e::spawn_run(
        &env,
        &dir,
        &format!("managedNamespaces: [{MANAGED_NS}]\n"),
        [
            std::ffi::OsStr::new("--listen"),
            addr.to_string().as_ref(),
            "--cert-dir".as_ref(),
            certs.as_os_str(),
            "--self-signed-names".as_ref(),
            "127.0.0.1".as_ref(),
            "--webhook-configurations".as_ref(),
            "slurm-bridge-admission".as_ref(),
            "--self-signed-check-interval".as_ref(),
            "1s".as_ref(),
        ],
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), MANAGED_NS);
    let p = create_retrying(&pods, &plain_pod("by-run", MANAGED_NS, json!({})), RETRY).await;
    assert_eq!(scheduler_of(&p), SCHEDULER);
    env.wait_bound_in(MANAGED_NS, &["by-run".to_string()], Duration::from_secs(90))
        .await;
    let err = pods
        .create(
            &PostParams::default(),
            &plain_pod(
                "forged",
                MANAGED_NS,
                json!({"metadata": {"labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: "1"}}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains(validate::MSG_JOBID_LABEL), "{err}");

    let status = e2e::terminate(&mut child).await;
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(log.contains("caBundle updated"), "log:\n{log}");
    env.assert_invariants().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fields `manager` set on `p`, as the API server tracks them (managedFields, all
/// subresources), as JSON text.
fn fields_of(p: &Pod, manager: &str) -> String {
    p.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.fields_v1.as_ref().map(|f| f.0.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Issue 22: the mutating webhook gives a pod the bridge finalizer and the managed-node
/// toleration at creation, so the scheduler's bind-time write is a label patch only; a pod
/// created before the webhook ran still gets both from the scheduler. Each ends bound with the
/// label, the finalizer and the toleration exactly once; managedFields show which writer set
/// the finalizer and the toleration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_adds_finalizer_and_toleration_so_binding_writes_the_label_only() {
    use slurm_bridge::wellknown::{FINALIZER, LABEL_SLURM_JOBID, managed_node_toleration};
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let pods = env.pods();
    let toleration = managed_node_toleration(SCHEDULER);
    let count = |p: &Pod| {
        let fins = p.finalizers().iter().filter(|f| *f == FINALIZER).count();
        let tols = p
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .map_or(0, |t| t.iter().filter(|t| **t == toleration).count());
        (fins, tols)
    };
    let prepared = |p: &Pod| count(p) == (1, 1);

    // Created before any webhook runs: the scheduler adds both with its label patch.
    let early: Pod =
        serde_json::from_value(e2e::pod("before-webhook", json!({}), json!({}))).unwrap();
    let early = pods.create(&PostParams::default(), &early).await.unwrap();
    assert_eq!(count(&early), (0, 0), "no webhook yet");
    env.wait_bound(&["before-webhook".to_string()], Duration::from_secs(60))
        .await;

    let cfg = Config {
        scheduler_name: SCHEDULER.into(),
        ..Default::default()
    };
    let _hooks = e2e::admission::start(&env.kube, cfg, "bind-ready").await;
    let pod: Pod =
        serde_json::from_value(e2e::pod("through-webhook", json!({}), json!({}))).unwrap();
    let created = e2e::admission::create_mutated(&pods, &pod, prepared).await;
    assert_eq!(
        count(&created),
        (1, 1),
        "finalizer and toleration at creation"
    );
    assert!(!created.labels().contains_key(LABEL_SLURM_JOBID));

    let names = ["before-webhook".to_string(), "through-webhook".to_string()];
    let bound = env.wait_bound(&names, Duration::from_secs(60)).await;
    for p in &bound {
        let name = p.name_any();
        assert_eq!(
            count(p),
            (1, 1),
            "{name}: finalizer and toleration exactly once"
        );
        assert!(
            p.labels().contains_key(LABEL_SLURM_JOBID),
            "{name}: job id label"
        );
        let by_scheduler = fields_of(p, SCHEDULER);
        assert!(
            by_scheduler.contains(&format!("\"f:{LABEL_SLURM_JOBID}\"")),
            "{name}: the scheduler set the label: {by_scheduler}"
        );
        let scheduler_set_both =
            by_scheduler.contains("\"f:finalizers\"") && by_scheduler.contains("\"f:tolerations\"");
        let want = name == "before-webhook";
        assert_eq!(
            scheduler_set_both, want,
            "{name}: finalizer and toleration set by the scheduler: {by_scheduler}"
        );
        if !want {
            assert!(
                !by_scheduler.contains("\"f:finalizers\"")
                    && !by_scheduler.contains("\"f:tolerations\""),
                "{name}: the scheduler set neither: {by_scheduler}"
            );
        }
    }
    env.assert_consistent().await;
}
