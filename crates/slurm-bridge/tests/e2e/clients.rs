//! Helpers for e2e tests of real third-party clients (Kubeflow Trainer, Kueue): objects of any
//! kind and scope, polling for an observable state, and the bridge's pod admission webhook
//! serving a managed namespace.

use super::{Env, SCHEDULER};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use slurm_bridge::admission::{self, AdmissionOptions, certs::SelfManaged};
use slurm_bridge::config::Config;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// The API of `manifest`'s kind, in its namespace when it is namespaced.
pub async fn api_for(
    kube: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(kube, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{api_version} {kind} is not served: {e}"));
    match (caps.scope, ns) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(kube.clone(), ns, &ar)
        }
        _ => Api::all_with(kube.clone(), &ar),
    }
}

/// Creates `manifest` (cluster-scoped or in its `metadata.namespace`), retrying for up to 30 s
/// while a controller's webhook is not serving yet (the API server answers with a webhook call
/// failure until then).
pub async fn create_object(kube: &kube::Client, manifest: Value) -> DynamicObject {
    let api = api_for(
        kube,
        manifest["apiVersion"].as_str().unwrap(),
        manifest["kind"].as_str().unwrap(),
        manifest["metadata"]["namespace"].as_str(),
    )
    .await;
    let obj: DynamicObject = serde_json::from_value(manifest).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(o) => return o,
            Err(e) if Instant::now() < deadline && e.to_string().contains("webhook") => {
                eprintln!(
                    "create {}: {e}; retrying",
                    obj.metadata.name.as_deref().unwrap_or("")
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("create {:?}: {e}", obj.metadata.name),
        }
    }
}

/// Polls `check` every 100 ms until it returns `Some`; panics naming `what` and the last state
/// (`describe`) after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(state) => assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; last seen: {state}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// True when the object's `status.conditions` has `type_` with status True.
pub fn has_condition(o: &DynamicObject, type_: &str) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// The bridge's pod admission webhook, serving `managed` namespaces, registered with the API
/// server; dropping it stops the webhook.
pub struct Admission {
    _handle: admission::AdmissionHandle,
    _stop: watch::Sender<bool>,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A folder removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Admission {
    /// Starts the webhook with certificates made by the bridge's own generator and registers
    /// it (failurePolicy Fail) for pods outside kube-system, as the chart does.
    pub async fn start(env: &Env, managed: &[&str]) -> Admission {
        let dir = std::env::temp_dir().join(format!(
            "sb-clients-e2e-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let sm = SelfManaged::new(dir.clone(), vec!["127.0.0.1".into()], vec![]);
        sm.ensure_files(SystemTime::now()).unwrap();
        let ca = sm.ca_bundle().unwrap();
        let cfg = Config {
            scheduler_name: SCHEDULER.into(),
            managed_namespaces: managed.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let mut opts = AdmissionOptions::new(cfg);
        opts.listen = "127.0.0.1:0".parse().unwrap();
        opts.cert_dir = dir.clone();
        let mut registry = Registry::default();
        let (stop, mut stop_rx) = watch::channel(false);
        let handle = admission::start(
            env.kube.clone(),
            opts,
            &mut registry,
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
        register(&env.kube, handle.local_addr, &ca).await;
        Admission {
            _handle: handle,
            _stop: stop,
            _dir: tempdir::Dir(dir),
        }
    }
}

async fn register(kube: &kube::Client, addr: std::net::SocketAddr, ca: &str) {
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
    let name = "slurm-bridge-admission";
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
    Api::<MutatingWebhookConfiguration>::all(kube.clone())
        .create(&PostParams::default(), &mc)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(kube.clone())
        .create(&PostParams::default(), &vc)
        .await
        .unwrap();
}
