//! Helpers for e2e tests of real third-party clients (Kubeflow Trainer, Kueue): objects of any
//! kind and scope, polling for an observable state, and the bridge's pod admission webhook
//! serving a managed namespace.

use super::{Env, SCHEDULER};
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;
use slurm_bridge::config::Config;
use std::time::{Duration, Instant};

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

/// True when the object's `status.conditions` has `type_` with status True.
pub fn has_condition(o: &DynamicObject, type_: &str) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// The bridge's pod admission webhook, serving `managed` namespaces, registered with the API
/// server (see [`super::admission::start`]); dropping it stops the webhook.
pub struct Admission(super::admission::Webhooks);

impl Admission {
    /// Starts the webhook for `managed` and registers it (failurePolicy Fail) for pods outside
    /// kube-system, as the chart does.
    pub async fn start(env: &Env, managed: &[&str]) -> Admission {
        let cfg = Config {
            scheduler_name: SCHEDULER.into(),
            managed_namespaces: managed.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        Admission(super::admission::start(&env.kube, cfg, "slurm-bridge-admission").await)
    }
}

/// GET `url` (plain HTTP) with hyper's client: the body of a 2xx answer, else the status or the
/// connection error as text.
pub async fn http_get(url: &str) -> Result<String, String> {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let resp = client.get(uri).await.map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("{url}: HTTP {status}: {text}"))
    }
}
