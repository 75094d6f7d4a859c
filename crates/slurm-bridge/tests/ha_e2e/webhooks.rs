//! Admission under HA: two replicas serve the webhooks with certificates of one CA shared through
//! a Secret, and the API server calls both with the one caBundle.

use crate::e2e::prometheus::sample;
use crate::e2e::{self, Env, NS, free_port, write_config};
use crate::replicas::{log_of, scrape, spawn, temp_dir, terminate_all};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Two `run` replicas with self-managed certificates and the CA in one Secret: the first
/// creates it, the second takes it; both serve certificates the one caBundle verifies, and the
/// API server calls both (a webhook configuration with one webhook per replica, failurePolicy
/// Fail) while only one of them leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_admission_with_one_shared_ca() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let env = Env::start(2).await;
    let client = env.kube.clone();
    let managed = "hpc";
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": managed}}),
    )
    .unwrap();
    Api::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .unwrap();
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap())
        .collect();
    // One webhook per replica in each configuration; the caBundle is left for the bridge.
    let hooks = |path: &str, resources: serde_json::Value| -> Vec<serde_json::Value> {
        addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                json!({
                    "name": format!("replica{i}.pods.slinky.slurm.net"),
                    "clientConfig": {"url": format!("https://{a}{path}")},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": resources, "scope": "Namespaced"}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": managed}},
                    "failurePolicy": "Fail", "sideEffects": "None",
                    "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
                })
            })
            .collect()
    };
    let name = "ha-admission";
    let mc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": hooks("/mutate--v1-pod", json!(["pods"])),
    }))
    .unwrap();
    let vc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": hooks("/validate--v1-pod", json!(["pods"])),
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&Default::default(), &mc)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&Default::default(), &vc)
        .await
        .unwrap();

    let dir = temp_dir("admission");
    let config = write_config(&env, &dir, &format!("managedNamespaces: [{managed}]\n"));
    let webhook_args = |i: usize| -> Vec<String> {
        let certs = dir.join(format!("certs-{i}"));
        [
            "--listen",
            &addrs[i].to_string(),
            "--cert-dir",
            certs.to_str().unwrap(),
            "--self-signed-names",
            "127.0.0.1",
            "--webhook-configurations",
            name,
            "--self-signed-ca-secret",
            "ha-admission-ca",
            "--self-signed-ca-secret-namespace",
            NS,
            "--self-signed-check-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Both start at once: they race to create the Secret; one wins, the other takes its CA.
    let mut replicas = vec![
        spawn(
            &env,
            &dir,
            &config,
            "run",
            "adm-a",
            "ha-adm",
            &webhook_args(0),
        ),
        spawn(
            &env,
            &dir,
            &config,
            "run",
            "adm-b",
            "ha-adm",
            &webhook_args(1),
        ),
    ];
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ca_pem = loop {
        if let Some(s) = secrets.get_opt("ha-admission-ca").await.unwrap()
            && let Some(crt) = s.data.as_ref().and_then(|d| d.get("ca.crt"))
        {
            break String::from_utf8(crt.0.clone()).unwrap();
        }
        assert!(Instant::now() < deadline, "no CA Secret");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Both replicas serve a certificate the shared CA verifies.
    for (i, a) in addrs.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match e2e::admission::tls_connect(*a, &ca_pem).await {
                Ok(_) => break,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "replica {i} serves no certificate of the shared CA: {e}; log:\n{}",
                        log_of(&replicas[i])
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    // The leader fills every webhook's caBundle with that CA.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get(name)
            .await
            .unwrap();
        let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get(name)
            .await
            .unwrap();
        let bundles: Vec<Option<Vec<u8>>> = m
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0))
            .chain(
                v.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.client_config.ca_bundle.map(|b| b.0)),
            )
            .collect();
        if bundles.len() == 4
            && bundles
                .iter()
                .all(|b| b.as_deref() == Some(ca_pem.as_bytes()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "caBundles not all the shared CA");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The API server calls both replicas for each pod (each webhook once): pods are created.
    let pods: Api<Pod> = Api::namespaced(client.clone(), managed);
    for i in 0..3 {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("admitted-{i}"), "namespace": managed},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                     "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
        }))
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let created = loop {
            match pods.create(&Default::default(), &p).await {
                Ok(p) => break p,
                Err(e) => {
                    assert!(Instant::now() < deadline, "pod refused: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        assert_eq!(
            created
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref()),
            Some(e2e::SCHEDULER),
            "mutated by the webhooks"
        );
    }
    for r in &replicas {
        let text = scrape(r.probe).await.expect("metrics");
        let served = sample(&text, "slurm_bridge_admission_requests_total", &[]);
        assert!(
            served >= 6.0,
            "{} answered {served} admission requests",
            r.identity
        );
    }
    // Each replica's cert dir holds the shared CA: one CA, whichever replica made it.
    for i in 0..2 {
        let crt = std::fs::read_to_string(dir.join(format!("certs-{i}/ca.crt"))).unwrap();
        assert_eq!(crt, ca_pem, "replica {i} keeps another CA");
    }
    terminate_all(&mut replicas).await;
    env.assert_invariants().await;
    let _ = std::fs::remove_dir_all(&dir);
}
