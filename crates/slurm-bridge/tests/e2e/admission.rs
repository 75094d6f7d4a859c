//! The admission webhooks served in-process and registered with the real API server
//! (failurePolicy Fail, TLS with certificates from the bridge's own generator).

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use slurm_bridge::admission::{self, AdmissionOptions, certs::SelfManaged};
use slurm_bridge::config::Config;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Running webhooks; stopped when dropped.
pub struct Webhooks {
    pub handle: admission::AdmissionHandle,
    stop: watch::Sender<bool>,
    cert_dir: std::path::PathBuf,
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = std::fs::remove_dir_all(&self.cert_dir);
    }
}

/// Starts both webhooks with `cfg` on 127.0.0.1 and registers them with the API server under the
/// name `tag`.
pub async fn start(client: &kube::Client, cfg: Config, tag: &str) -> Webhooks {
    let dir = std::env::temp_dir().join(format!(
        "sb-e2e-admission-{tag}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let certs = SelfManaged::new(dir.clone(), vec!["127.0.0.1".into()], vec![]);
    certs.ensure_files(SystemTime::now()).unwrap();
    let ca = certs.ca_bundle().unwrap();
    let mut opts = AdmissionOptions::new(cfg);
    opts.listen = "127.0.0.1:0".parse().unwrap();
    opts.cert_dir = dir.clone();
    let (stop, mut stop_rx) = watch::channel(false);
    let handle = admission::start(
        client.clone(),
        opts,
        &mut Registry::default(),
        watch::channel(true).1,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    )
    .await
    .expect("start the webhooks");
    let mut ready = handle.ready.clone();
    tokio::time::timeout(Duration::from_secs(30), ready.wait_for(|r| *r))
        .await
        .expect("webhooks ready")
        .unwrap();
    register(client, tag, handle.local_addr, &ca).await;
    Webhooks {
        handle,
        stop,
        cert_dir: dir,
    }
}

async fn register(client: &kube::Client, name: &str, addr: SocketAddr, ca: &str) {
    use base64::Engine;
    let hook = |resources: Value, path: &str| {
        json!({
            "name": "pods.slinky.slurm.net",
            "clientConfig": {"url": format!("https://{addr}{path}"),
                             "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": resources, "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        })
    };
    let mc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": [hook(json!(["pods"]), "/mutate--v1-pod")],
    }))
    .unwrap();
    let vc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": [hook(json!(["pods", "pods/resize"]), "/validate--v1-pod")],
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mc)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &vc)
        .await
        .unwrap();
}

/// Creates `pod` once the mutating webhook is in effect: the API server picks a new webhook
/// configuration up a moment after it is created, and until then creates pods unmutated. Dry
/// runs (webhooks with `sideEffects: None` are called on them) until `mutated` holds for the
/// answer, then the real create; panics after 30 s.
pub async fn create_mutated(
    api: &Api<k8s_openapi::api::core::v1::Pod>,
    pod: &k8s_openapi::api::core::v1::Pod,
    mutated: impl Fn(&k8s_openapi::api::core::v1::Pod) -> bool,
) -> k8s_openapi::api::core::v1::Pod {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    loop {
        match api.create(&dry, pod).await {
            Ok(p) if mutated(&p) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the mutating webhook is not in effect after 30 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.create(&PostParams::default(), pod)
        .await
        .expect("create pod")
}
