//! The admission webhooks served in-process and registered with the real API server
//! (failurePolicy Fail, TLS with certificates from the bridge's own generator, or self-managed
//! by the bridge), and a TLS client that checks what they serve.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use slurm_bridge::admission::{self, AdmissionOptions, certs::SelfManaged};
use slurm_bridge::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Where the webhooks' certificates come from.
#[derive(Clone, Debug, Default)]
pub enum Certs {
    /// Made in the cert dir before the start with the bridge's generator; the configurations
    /// are registered with its CA as caBundle.
    #[default]
    Provided,
    /// Made and kept by the bridge (`AdmissionOptions::self_managed`), which fills the caBundle
    /// of `configurations`; registered without one (creations fail until it is filled).
    SelfManaged {
        configurations: Vec<String>,
        check_interval: Duration,
    },
}

/// How [`start_with`] runs the webhooks.
#[derive(Clone, Debug, Default)]
pub struct WebhookOptions {
    pub certs: Certs,
    /// How often the webhooks look for new certificate files (None: the bridge's default).
    pub cert_poll_interval: Option<Duration>,
}

/// Running webhooks; stopped (and their cert dir removed) when dropped.
pub struct Webhooks {
    pub handle: admission::AdmissionHandle,
    pub stop: watch::Sender<bool>,
    /// The cert dir (the test may put its own files there too).
    pub cert_dir: PathBuf,
    /// The certificates of the cert dir: `ca_bundle()` is the CA, `ensure_files` rotates.
    pub certs: SelfManaged,
    /// The webhooks' metrics.
    pub registry: Registry,
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = std::fs::remove_dir_all(&self.cert_dir);
    }
}

/// Starts both webhooks with `cfg` on 127.0.0.1 with provided certificates and registers them
/// with the API server under the name `tag`.
pub async fn start(client: &kube::Client, cfg: Config, tag: &str) -> Webhooks {
    start_with(client, cfg, tag, WebhookOptions::default()).await
}

/// As [`start`], with the certificates and the certificate poll of `opts`.
pub async fn start_with(
    client: &kube::Client,
    cfg: Config,
    tag: &str,
    opts: WebhookOptions,
) -> Webhooks {
    let dir = super::temp_dir(&format!("sb-e2e-admission-{tag}"));
    let ips = vec!["127.0.0.1".to_string()];
    let mut admission_opts = AdmissionOptions::new(cfg);
    let (certs, ca) = match opts.certs {
        Certs::Provided => {
            let certs = SelfManaged::new(dir.clone(), ips, vec![]);
            certs.ensure_files(SystemTime::now()).unwrap();
            let ca = certs.ca_bundle().unwrap();
            (certs, Some(ca))
        }
        Certs::SelfManaged {
            configurations,
            check_interval,
        } => {
            let mut certs = SelfManaged::new(dir.clone(), ips, configurations);
            certs.check_interval = check_interval;
            admission_opts.self_managed = Some(certs.clone());
            (certs, None)
        }
    };
    admission_opts.listen = "127.0.0.1:0".parse().unwrap();
    admission_opts.cert_dir = dir.clone();
    if let Some(every) = opts.cert_poll_interval {
        admission_opts.cert_poll_interval = every;
    }
    let mut registry = Registry::default();
    let (stop, mut stop_rx) = watch::channel(false);
    let handle = admission::start(
        client.clone(),
        admission_opts,
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
    register(client, tag, handle.local_addr, ca.as_deref()).await;
    Webhooks {
        handle,
        stop,
        cert_dir: dir,
        certs,
        registry,
    }
}

/// Registers both webhooks at `addr` under `name` (failurePolicy Fail, pods outside
/// kube-system), with `ca` as caBundle (None: left for the bridge to fill).
pub async fn register(client: &kube::Client, name: &str, addr: SocketAddr, ca: Option<&str>) {
    use base64::Engine;
    let hook = |resources: Value, path: &str| {
        let mut client_config = json!({"url": format!("https://{addr}{path}")});
        if let Some(ca) = ca {
            client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        json!({
            "name": "pods.slinky.slurm.net",
            "clientConfig": client_config,
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

/// A TLS connection to `addr` (the bridge's TLS provider), the server's certificate verified
/// against `ca_pem` for the address's IP; the error's text says which step failed.
pub async fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| format!("CA PEM: {e}"))?)
            .map_err(|e| format!("CA: {e}"))?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(admission::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let name = rustls::pki_types::ServerName::try_from(addr.ip().to_string()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))
}

/// The leaf certificate (DER) the server of `s` presented.
pub fn served_leaf(s: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
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
