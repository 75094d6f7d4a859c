//! Helpers shared by the conformance tests.
#![allow(dead_code)]

use kube_sim::{KubeSim, Options};
use serde_json::{Value, json};

/// A bare API server (no simulated cluster) for conformance tests.
pub async fn server() -> KubeSim {
    KubeSim::start(Options {
        simulate: false,
        bookmark_interval: std::time::Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .expect("kube-sim starts")
}

/// A minimal valid pod.
pub fn pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(pod_json(name)).expect("pod")
}

/// A minimal valid pod as JSON.
pub fn pod_json(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    })
}

/// Status code of a kube API error, or panic with the unexpected result.
pub fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Reason of a kube API error.
pub fn reason<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.reason.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}
