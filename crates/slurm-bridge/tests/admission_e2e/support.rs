//! What the admission tests share: the managed namespace, the creation retry, webhooks polling
//! their certificate files quickly, namespaces and plain pods, and one HTTPS POST to the webhook.

use crate::e2e::admission::{Certs, WebhookOptions, served_leaf, tls_connect};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

/// The namespace the webhooks manage.
pub const MANAGED_NS: &str = "hpc";

/// How long a creation is retried while the API server cannot call the webhooks yet.
pub const RETRY: Duration = Duration::from_secs(30);

/// The webhooks with `certs`, looking for new certificate files every 200 ms (the rotation
/// in `managed_pods` is seen quickly).
pub fn fast_cert_poll(certs: Certs) -> WebhookOptions {
    WebhookOptions {
        certs,
        cert_poll_interval: Some(Duration::from_millis(200)),
    }
}

/// Creates namespace `name` with `labels`.
pub async fn create_namespace(client: &kube::Client, name: &str, labels: Value) {
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
pub fn plain_pod(name: &str, ns: &str, extra: Value) -> Pod {
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

/// The scheduler the pod names, empty if none.
pub fn scheduler_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or_default()
}

/// One HTTPS POST on a fresh connection: (status, body, leaf certificate DER).
pub async fn https_post(
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
