//! Self-managed certificates: the bridge fills the caBundle (in-process, with 1,000 creations
//! timed, and in `slurm-bridge run`) and the API server calls the webhooks with it.

use crate::e2e::admission::{Certs, register, start_with};
use crate::e2e::{self, Env, SCHEDULER, create_retrying, percentile, temp_dir};
use crate::support::{
    MANAGED_NS, RETRY, create_namespace, fast_cert_poll, plain_pod, scheduler_of,
};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use slurm_bridge::admission::validate;
use slurm_bridge::config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
