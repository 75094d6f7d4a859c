//! Admission webhooks called during create: a small axum + rustls HTTPS webhook with a
//! self-signed CA; mutation by JSON patch, denial with the webhook's message, selectors, CA
//! verification and failurePolicy.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::{Json, Router, routing::post};
use base64::Engine;
use common::{code, pod_json, server};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(params, key),
    }
}

async fn start_webhook(ca: &Ca, calls: Arc<AtomicUsize>) -> SocketAddr {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let c1 = calls.clone();
    let c2 = calls;
    let app = Router::new()
        .route(
            "/mutate",
            post(move |Json(review): Json<Value>| {
                let calls = c1.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let req = &review["request"];
                    let patch = json!([{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes", "op": req["operation"]}}]);
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                        "uid": req["uid"], "allowed": true, "patchType": "JSONPatch",
                        "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
                    }}))
                }
            }),
        )
        .route(
            "/validate",
            post(move |Json(review): Json<Value>| {
                let calls = c2.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let req = &review["request"];
                    let deny = req["object"]["metadata"]["labels"]["deny"] == "true";
                    let mut resp = json!({"uid": req["uid"], "allowed": !deny});
                    if deny {
                        resp["status"] = json!({"code": 403, "reason": "Forbidden", "message": "no thanks"});
                    }
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
                }
            }),
        );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = axum_server::from_tcp_rustls(
        listener,
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg)),
    )
    .unwrap();
    tokio::spawn(async move {
        server.serve(app.into_make_service()).await.ok();
    });
    addr
}

fn hook(name: &str, url: String, ca_pem: &str, extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    });
    json_patch::merge(&mut h, &extra);
    h
}

fn api(sim: &kube_sim::KubeSim, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        ),
    )
}

#[tokio::test]
async fn webhooks_mutate_validate_and_fail_closed() {
    let sim = server().await;
    let ca1 = ca("test-ca");
    let other_ca = ca("other-ca");
    let calls = Arc::new(AtomicUsize::new(0));
    let addr = start_webhook(&ca1, calls.clone()).await;

    let mutating = api(
        &sim,
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    );
    let m: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "m"},
        "webhooks": [hook("mutate.example.com", format!("https://{addr}/mutate"), &ca1.pem, json!({}))],
    }))
    .unwrap();
    mutating.create(&PostParams::default(), &m).await.unwrap();
    let validating = api(
        &sim,
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    let v: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v"},
        "webhooks": [
            hook("deny.example.com", format!("https://{addr}/validate"), &ca1.pem, json!({})),
            // Wrong CA: the TLS handshake fails; Fail closes, Ignore lets the request through.
            hook("strict.example.com", format!("https://{addr}/validate"), &other_ca.pem,
                 json!({"failurePolicy": "Fail", "objectSelector": {"matchLabels": {"strict": "yes"}}})),
            hook("lenient.example.com", format!("https://{addr}/validate"), &other_ca.pem,
                 json!({"failurePolicy": "Ignore", "objectSelector": {"matchLabels": {"lenient": "yes"}}})),
        ],
    }))
    .unwrap();
    validating.create(&PostParams::default(), &v).await.unwrap();

    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod_json("ok")).unwrap(),
        )
        .await
        .unwrap();
    let ann = p.metadata.annotations.unwrap();
    assert_eq!(ann["mutated"], "yes");
    assert_eq!(ann["op"], "CREATE");
    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "mutating and validating webhooks called"
    );

    let mut denied = pod_json("denied");
    denied["metadata"]["labels"] = json!({"deny": "true"});
    match pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(denied).unwrap(),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "admission webhook \"deny.example.com\" denied the request: no thanks"
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    let mut strict = pod_json("strict");
    strict["metadata"]["labels"] = json!({"strict": "yes"});
    let r = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(strict).unwrap(),
        )
        .await;
    assert_eq!(code(r), 500);
    let mut lenient = pod_json("lenient");
    lenient["metadata"]["labels"] = json!({"lenient": "yes"});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(lenient).unwrap(),
    )
    .await
    .unwrap();

    // namespaceSelector: pods elsewhere are not sent to the webhooks.
    let nss: Api<Namespace> = Api::all(sim.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
    )
    .await
    .unwrap();
    let before = calls.load(Ordering::SeqCst);
    let other: Api<Pod> = Api::namespaced(sim.client(), "other");
    let p = other
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod_json("x")).unwrap(),
        )
        .await
        .unwrap();
    assert!(p.metadata.annotations.is_none());
    assert_eq!(calls.load(Ordering::SeqCst), before);
}
