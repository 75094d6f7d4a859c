//! Leader election on a Lease (real kube-apiserver from kube-testenv), leader gating of the scheduler on
//! real Slurm, and the /healthz, /readyz and /metrics endpoints.

mod e2e;

use e2e::{Env, pod};
use prometheus_client::registry::Registry;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_candidates_leads() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .unwrap();
    let a = slurm_bridge::leader::elect(env.client(), "default", "sched", "replica-a")
        .await
        .unwrap();
    let b = slurm_bridge::leader::elect(env.client(), "default", "sched", "replica-b")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(*a.borrow() || *b.borrow()) {
        assert!(Instant::now() < deadline, "nobody became leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stable: never both, for a few renewals.
    for _ in 0..30 {
        assert!(!(*a.borrow() && *b.borrow()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = if *a.borrow() {
        "replica-a"
    } else {
        "replica-b"
    };
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    let lease = leases.get("sched").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(holder),
        "the Lease names the leader"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_scheduler_does_not_act_until_it_leads() {
    let mut env = Env::start(1).await;
    let (lead_tx, lead_rx) = watch::channel(false);
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_led(slurm, lead_rx).await;
    env.create_pod(pod("patient", json!({}), json!({}))).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(env.slurm_job_ids().is_empty(), "a standby submitted a job");
    let p = env.pods().get("patient").await.unwrap();
    assert!(!e2e::node_name_is_set(&p));
    lead_tx.send(true).unwrap();
    env.wait_bound(&["patient".into()], Duration::from_secs(60))
        .await;
    env.assert_consistent().await;
}

async fn get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, buf.split_once("\r\n\r\n").unwrap().1.to_string())
}

#[tokio::test]
async fn probes_report_readiness_and_metrics() {
    let mut registry = Registry::default();
    let metrics = slurm_bridge::scheduler::metrics::Metrics::new(&mut registry);
    metrics.pods_bound.inc_by(3);
    let (ready_tx, ready_rx) = watch::channel(false);
    let listener = slurm_bridge::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = tokio::spawn(slurm_bridge::server::serve(
        listener,
        ready_rx,
        Arc::new(registry),
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    assert_eq!(get(port, "/healthz").await.0, 200);
    let (code, body) = get(port, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("not synced"), "{body}");
    ready_tx.send(true).unwrap();
    assert_eq!(get(port, "/readyz").await.0, 200);
    let (code, body) = get(port, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("slurm_bridge_scheduler_pods_bound_total 3"),
        "{body}"
    );
    assert!(
        body.contains("slurm_bridge_scheduler_submit_to_allocation_seconds_bucket"),
        "{body}"
    );
    stop_tx.send(true).unwrap();
    server.await.unwrap().unwrap();
    // The taken port is reported with its address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = slurm_bridge::server::bind(addr)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&addr.to_string()), "{err}");
}
