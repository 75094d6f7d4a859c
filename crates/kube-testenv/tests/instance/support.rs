//! What the instance tests share: a polling wait, an instance started or the test failed, test
//! objects from JSON, readers of node and pod fields, and a watch log of the phases pods go
//! through.

use crate::common::TIMEOUT;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::Api;
use kube::runtime::watcher;
use kube_testenv::{Instance, InstanceOptions};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Polls `check` every 200 ms until it returns `Some`, for at most [`TIMEOUT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {} s waiting for {what}",
            TIMEOUT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts an instance with `opts`; panics with the reason if it does not start.
pub async fn start(opts: InstanceOptions) -> Instance {
    Instance::start(opts)
        .await
        .unwrap_or_else(|e| panic!("start a kube-testenv instance: {e}"))
}

/// A Kubernetes object from its JSON.
pub fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("test object deserializes")
}

/// The HTTP status of a refused API call.
pub fn refused<T: std::fmt::Debug>(what: &str, r: kube::Result<T>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("{what}: expected the API server to refuse, got {other:?}"),
    }
}

/// Resource quantities as their text, by resource name.
pub fn quantities(
    m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, String> {
    m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

/// String pairs as a map (labels, capacities).
pub fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whether the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node's taints (none if unset).
pub fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The pod's phase, empty if it has none yet.
pub fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Exit code, reason, startedAt and finishedAt of the first container's termination.
pub fn termination(pod: &Pod) -> Option<(i32, String, Duration)> {
    let t = kube_testenv::pod_state::first_termination(pod)?.clone();
    let ran = match (&t.started_at, &t.finished_at) {
        (Some(s), Some(f)) => Duration::from_secs((f.0 - s.0).get_seconds().max(0) as u64),
        _ => Duration::ZERO,
    };
    Some((t.exit_code, t.reason.unwrap_or_default(), ran))
}

/// Whether a JSON condition list has `type_` with status True.
pub fn has_condition(conds: Option<&Vec<serde_json::Value>>, type_: &str) -> bool {
    conds.is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// A pod running `command`, bound to `node` at creation (or left to kube-scheduler).
pub fn pod(
    name: &str,
    node: Option<&str>,
    command: &[&str],
    annotations: serde_json::Value,
) -> Pod {
    object(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
        },
    }))
}

/// Every distinct phase each pod of a namespace went through, as a watch saw them.
pub struct PhaseLog {
    seen: Arc<Mutex<HashMap<String, Vec<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PhaseLog {
    /// Returns once the watch has listed the namespace, so every later change is seen.
    pub async fn start(api: Api<Pod>) -> PhaseLog {
        let seen: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let mut log = log.lock().unwrap();
                        let phases = log.entry(name).or_default();
                        let ph = phase(&p);
                        if phases.last() != Some(&ph) {
                            phases.push(ph);
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(TIMEOUT, listed)
            .await
            .expect("the pod watch lists within the timeout")
            .expect("the pod watch task runs");
        PhaseLog { seen, task }
    }

    /// The phases `pod` went through, in order.
    pub fn phases(&self, pod: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for PhaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
