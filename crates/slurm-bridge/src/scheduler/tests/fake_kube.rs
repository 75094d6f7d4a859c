//! An in-memory Kubernetes API server for one-pass tests: an axum `Router` served to
//! `kube::Client::new` as its tower service, so no socket is opened.
//!
//! It serves GET (and LIST, with an equality `labelSelector`) of the objects a test seeds,
//! applies PATCH (merge; strategic merge for the fields the scheduler sends: finalizers as a set,
//! pod conditions by type), POST `pods/{name}/binding` (sets `spec.nodeName` and copies the
//! Binding's annotations, 409 when already bound), POST of Events (201), and records every
//! request that is not a GET: [`FakeKube::writes`] describes them as table rows name them.

use crate::sync::MutexExt;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A request that writes, as received.
#[derive(Clone, Debug)]
pub struct KubeWrite {
    pub method: String,
    pub path: String,
    pub content_type: String,
    pub body: Value,
}

impl KubeWrite {
    /// The write as table rows name it:
    /// - `label ns/a 7`: pod patch setting the job id label (with finalizer and toleration)
    /// - `unlabel ns/a`: pod patch removing the job id label
    /// - `finalizer- ns/a`: pod patch of the finalizers only (the bridge's removed)
    /// - `bind ns/a n1`: pods/binding (`bind ns/a n1 label=7` carrying the job id label)
    /// - `condition ns/a Reason`: pods/status patch of PodScheduled
    /// - `event ns/a Reason` (Normal) or `warning ns/a Reason` (Warning)
    /// - `podgroup ns/pg Type=Status,...`: PodGroup status patch
    /// - anything else: `METHOD /path`
    pub fn describe(&self) -> String {
        let Some((_, rest)) = self.path.split_once("/namespaces/") else {
            return format!("{} {}", self.method, self.path);
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let (ns, plural, name, sub) = match parts.as_slice() {
            [ns, plural] => (*ns, *plural, "", None),
            [ns, plural, name] => (*ns, *plural, *name, None),
            [ns, plural, name, sub] => (*ns, *plural, *name, Some(*sub)),
            _ => return format!("{} {}", self.method, self.path),
        };
        let b = &self.body;
        let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
        match (self.method.as_str(), plural, sub) {
            ("POST", "pods", Some("binding")) => {
                let label = &b["metadata"]["labels"][crate::wellknown::LABEL_SLURM_JOBID];
                let node = text(&b["target"]["name"]);
                if label.is_string() {
                    format!("bind {ns}/{name} {node} label={}", text(label))
                } else {
                    format!("bind {ns}/{name} {node}")
                }
            }
            ("POST", "events", None) => format!(
                "{} {ns}/{} {}",
                if b["type"] == "Warning" {
                    "warning"
                } else {
                    "event"
                },
                text(&b["regarding"]["name"]),
                text(&b["reason"])
            ),
            ("PATCH", "pods", Some("status")) => {
                let reasons: Vec<String> = b["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| text(&c["reason"]))
                    .collect();
                format!("condition {ns}/{name} {}", reasons.join(","))
            }
            ("PATCH", "pods", None) => {
                let label = &b["metadata"]["labels"][crate::wellknown::LABEL_SLURM_JOBID];
                if label.is_string() {
                    format!("label {ns}/{name} {}", text(label))
                } else if label.is_null() && b["metadata"]["labels"].is_object() {
                    format!("unlabel {ns}/{name}")
                } else if b["metadata"]["finalizers"].is_array() {
                    format!("finalizer- {ns}/{name}")
                } else {
                    format!("patch {ns}/{name} {b}")
                }
            }
            ("PATCH", "podgroups", Some("status")) => {
                let conditions: Vec<String> = b["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| format!("{}={}", text(&c["type"]), text(&c["status"])))
                    .collect();
                format!("podgroup {ns}/{name} {}", conditions.join(","))
            }
            _ => format!("{} {}", self.method, self.path),
        }
    }
}

/// An injected failure: requests with this method whose path contains `path` get `code`.
#[derive(Clone, Debug)]
struct Failure {
    method: Method,
    path: String,
    code: u16,
}

#[derive(Default)]
struct State_ {
    /// Objects by their API path.
    objects: BTreeMap<String, Value>,
    writes: Vec<KubeWrite>,
    resource_version: u64,
    failures: Vec<Failure>,
    /// Requests whose path ends so wait for a permit of the semaphore before they are answered.
    held: Vec<(String, Arc<tokio::sync::Semaphore>)>,
    /// A Binding's labels are copied onto the pod (Kubernetes 1.35 and later, by default).
    copies_binding_labels: bool,
}

/// The fake API server.
#[derive(Default)]
pub struct FakeKube {
    state: Mutex<State_>,
}

/// The API path of an object with this apiVersion, kind, namespace and name.
pub fn object_path(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let prefix = if api_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{api_version}")
    };
    let plural = format!("{}s", kind.to_ascii_lowercase());
    match namespace {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{prefix}/{plural}/{name}"),
    }
}

fn path_of(obj: &Value) -> String {
    object_path(
        obj["apiVersion"].as_str().unwrap_or("v1"),
        obj["kind"].as_str().unwrap_or("Pod"),
        obj["metadata"]["namespace"].as_str(),
        obj["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 400 { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code,
    });
    respond(code, &body)
}

fn respond(code: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// RFC 7386 merge, with the strategic-merge rules the scheduler relies on when `strategic`:
/// `metadata.finalizers` merge as a set, `conditions` merge by `type`.
fn merge(target: &mut Value, patch: &Value, strategic: bool, key: &str) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    let slot = t.entry(k.clone()).or_insert(Value::Null);
                    merge(slot, v, strategic, k);
                }
            }
        }
        (_, Some(_)) => {
            *target = json!({});
            merge(target, patch, strategic, key);
        }
        _ if strategic && key == "finalizers" => {
            let mut items: Vec<Value> = target.as_array().cloned().unwrap_or_default();
            for v in patch.as_array().into_iter().flatten() {
                if !items.contains(v) {
                    items.push(v.clone());
                }
            }
            *target = Value::Array(items);
        }
        _ if strategic && key == "conditions" => {
            let mut items: Vec<Value> = target.as_array().cloned().unwrap_or_default();
            for v in patch.as_array().into_iter().flatten() {
                match items.iter_mut().find(|c| c["type"] == v["type"]) {
                    Some(c) => merge(c, v, true, ""),
                    None => items.push(v.clone()),
                }
            }
            *target = Value::Array(items);
        }
        _ => *target = patch.clone(),
    }
}

/// True for `/api/v1/pods`, `/api/v1/namespaces/ns/pods`, `/apis/g/v/namespaces/ns/podgroups`.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => &segments[2.min(segments.len())..],
        Some(&"apis") => &segments[3.min(segments.len())..],
        _ => return false,
    };
    rest.len() == 1 || (rest.len() == 3 && rest[0] == "namespaces")
}

/// `%xx` and `+` decoding of a query value.
fn decode_query(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| decode_query(v))
}

/// Equality-based selector (`a=b,c==d`), as the scheduler sends.
fn selected(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .unwrap_or((term, ""));
        obj["metadata"]["labels"][k.trim()].as_str() == Some(v.trim())
    })
}

impl FakeKube {
    pub fn new() -> Arc<Self> {
        Arc::new(FakeKube::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State_> {
        self.state.locked()
    }

    /// A client whose requests this fake answers, in process.
    pub fn client(self: &Arc<Self>) -> kube::Client {
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(self.clone());
        kube::Client::new(router, "default")
    }

    /// Seeds (or replaces) an object; gives it a uid and a resourceVersion when it has none.
    pub fn put(&self, mut obj: Value) {
        assert!(obj["metadata"]["name"].is_string(), "no name: {obj}");
        let mut s = self.state();
        s.resource_version += 1;
        let rv = s.resource_version.to_string();
        let meta = &mut obj["metadata"];
        if meta["uid"].is_null() {
            meta["uid"] = json!(format!("uid-{}", meta["name"].as_str().unwrap_or_default()));
        }
        if meta["resourceVersion"].is_null() {
            meta["resourceVersion"] = json!(rv);
        }
        s.objects.insert(path_of(&obj), obj);
    }

    /// Answers `GET /version` with Kubernetes 1.`minor`, whose Bindings' labels reach the pod
    /// when `copies_binding_labels` (without a version, none is served: an old server).
    pub fn serve_version(&self, minor: u32, copies_binding_labels: bool) {
        let mut s = self.state();
        let version = json!({"major": "1", "minor": minor.to_string(),
                             "gitVersion": format!("v1.{minor}.0")});
        s.objects.insert("/version".into(), version);
        s.copies_binding_labels = copies_binding_labels;
    }

    /// The object at `path`, as the fake holds it now.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// Every pod the fake holds.
    pub fn pods(&self) -> Vec<crate::k8s::slim_pod::Pod> {
        self.state()
            .objects
            .values()
            .filter(|o| o["kind"] == "Pod")
            .map(|o| serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("{e}: {o}")))
            .collect()
    }

    /// Requests with `method` whose path contains `path` fail with `code` from now on.
    pub fn fail(&self, method: Method, path: &str, code: u16) {
        self.state().failures.push(Failure {
            method,
            path: path.to_string(),
            code,
        });
    }

    /// Requests whose path ends with `path_end` wait, from now on, until the returned semaphore
    /// gives a permit (one per request): a write held in flight while others go ahead.
    pub fn hold(&self, path_end: &str) -> Arc<tokio::sync::Semaphore> {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        self.state().held.push((path_end.to_string(), gate.clone()));
        gate
    }

    /// No more injected failures.
    pub fn heal(&self) {
        self.state().failures.clear();
    }

    /// Every write so far, described ([`KubeWrite::describe`]).
    pub fn writes(&self) -> Vec<String> {
        self.state()
            .writes
            .iter()
            .map(KubeWrite::describe)
            .collect()
    }

    /// The writes so far whose description ([`KubeWrite::describe`]) starts with one of
    /// `kinds` (`"bind "`, `"label "`, `"event "`...), in order.
    pub fn writes_of(&self, kinds: &[&str]) -> Vec<String> {
        self.writes()
            .into_iter()
            .filter(|w| kinds.iter().any(|k| w.starts_with(k)))
            .collect()
    }

    /// Every write so far, as received.
    pub fn raw_writes(&self) -> Vec<KubeWrite> {
        self.state().writes.clone()
    }

    pub fn clear_writes(&self) {
        self.state().writes.clear();
    }

    /// The status code and the answer to one request.
    fn answer(&self, method: &Method, path: &str, query: &str, body: &Value) -> (u16, Response) {
        let mut s = self.state();
        if let Some(f) = s
            .failures
            .iter()
            .find(|f| f.method == method && path.contains(&f.path))
        {
            let code = f.code;
            return (code, status(code, "InternalError", "injected failure"));
        }
        if *method == Method::GET {
            if let Some(obj) = s.objects.get(path) {
                return (200, respond(200, obj));
            }
            if is_collection(path) {
                let selector = query_param(query, "labelSelector").unwrap_or_default();
                let items: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|(p, _)| p.rsplit_once('/').map(|(parent, _)| parent) == Some(path))
                    .map(|(_, o)| o)
                    .filter(|o| selected(o, &selector))
                    .cloned()
                    .collect();
                let list = json!({
                    "kind": "List", "apiVersion": "v1",
                    "metadata": {"resourceVersion": s.resource_version.to_string()},
                    "items": items,
                });
                return (200, respond(200, &list));
            }
            return (404, status(404, "NotFound", &format!("{path} not found")));
        }
        s.resource_version += 1;
        let rv = s.resource_version.to_string();
        if *method == Method::PATCH {
            let object_path = path.strip_suffix("/status").unwrap_or(path);
            let Some(current) = s.objects.get_mut(object_path) else {
                return (404, status(404, "NotFound", &format!("{path} not found")));
            };
            let wanted_rv = &body["metadata"]["resourceVersion"];
            if wanted_rv.is_string() && *wanted_rv != current["metadata"]["resourceVersion"] {
                return (409, status(409, "Conflict", "the object has been modified"));
            }
            let mut patch = body.clone();
            if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            // The caller tells merge from strategic merge by the content type (see `handle`).
            let strategic = query.contains("strategic=1");
            merge(current, &patch, strategic, "");
            current["metadata"]["resourceVersion"] = json!(rv);
            return (200, respond(200, current));
        }
        if *method == Method::POST {
            if let Some(pod_path) = path.strip_suffix("/binding") {
                let copies_labels = s.copies_binding_labels;
                let Some(pod) = s.objects.get_mut(pod_path) else {
                    return (
                        404,
                        status(404, "NotFound", &format!("{pod_path} not found")),
                    );
                };
                if pod["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
                {
                    return (
                        409,
                        status(409, "Conflict", "pod is already assigned to a node"),
                    );
                }
                pod["spec"]["nodeName"] = body["target"]["name"].clone();
                if let Some(ann) = body["metadata"]["annotations"].as_object() {
                    for (k, v) in ann {
                        pod["metadata"]["annotations"][k] = v.clone();
                    }
                }
                if let Some(labels) = body["metadata"]["labels"].as_object()
                    && copies_labels
                {
                    for (k, v) in labels {
                        pod["metadata"]["labels"][k] = v.clone();
                    }
                }
                merge(
                    &mut pod["status"],
                    &json!({"conditions": [{"type": "PodScheduled", "status": "True"}]}),
                    true,
                    "",
                );
                pod["metadata"]["resourceVersion"] = json!(rv);
                return (201, status(201, "", ""));
            }
            let mut created = body.clone();
            created["metadata"]["resourceVersion"] = json!(rv);
            if !path.ends_with("/events") {
                let name = created["metadata"]["name"].as_str().unwrap_or_default();
                s.objects.insert(format!("{path}/{name}"), created.clone());
            }
            return (201, respond(201, &created));
        }
        if *method == Method::DELETE {
            return match s.objects.remove(path) {
                Some(o) => (200, respond(200, &o)),
                None => (404, status(404, "NotFound", &format!("{path} not found"))),
            };
        }
        (405, status(405, "MethodNotAllowed", "not supported"))
    }
}

async fn handle(State(kube): State<Arc<FakeKube>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut query = req.uri().query().unwrap_or_default().to_string();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    // Server-side apply merges lists by their keys too (conditions by type).
    if content_type.contains("strategic-merge-patch") || content_type.contains("apply-patch") {
        query.push_str("&strategic=1");
    }
    let bytes = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let gate = kube
        .state()
        .held
        .iter()
        .find(|(end, _)| path.ends_with(end.as_str()))
        .map(|(_, gate)| gate.clone());
    if let Some(gate) = gate {
        gate.acquire().await.expect("never closed").forget();
    }
    let (_, response) = kube.answer(&method, &path, &query, &body);
    if method != Method::GET {
        kube.state().writes.push(KubeWrite {
            method: method.to_string(),
            path,
            content_type,
            body,
        });
    }
    response
}
