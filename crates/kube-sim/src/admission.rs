//! Dynamic admission: calls the mutating, then the validating webhooks configured in the store,
//! as kube-apiserver does (AdmissionReview v1 over HTTPS verified with the caBundle; rules,
//! namespaceSelector, objectSelector, failurePolicy, timeoutSeconds; JSON patches applied).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::meta;
use crate::selector::LabelSelector;
use crate::store::Store;

/// The operation under admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Create.
    Create,
    /// Update or patch.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        }
    }
}

/// One request under admission.
pub struct AdmissionRequest<'a> {
    /// Operation.
    pub op: Operation,
    /// Type id.
    pub tid: usize,
    /// Subresource, if any.
    pub sub: Option<&'a str>,
    /// Namespace ("" when cluster scoped).
    pub ns: &'a str,
    /// Object name.
    pub name: &'a str,
    /// The object as it would be stored.
    pub obj: Value,
    /// The object before the change (updates).
    pub old: Option<Value>,
    /// Whether the request is a dry run.
    pub dry_run: bool,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Webhook caller; clients are cached per caBundle.
#[derive(Default)]
pub struct Admission {
    clients: Mutex<HashMap<String, HttpsClient>>,
}

#[derive(Debug)]
enum CallError {
    Denied(ApiError),
    Failed(String),
}

impl Admission {
    /// Run admission for `req`; returns the object, mutated by mutating webhooks.
    pub async fn admit(
        &self,
        store: &Store,
        mut req: AdmissionRequest<'_>,
    ) -> Result<Value, ApiError> {
        let rt = store.rt(req.tid).clone();
        if rt.group == "admissionregistration.k8s.io" {
            return Ok(req.obj);
        }
        let (Some(mtid), Some(vtid)) = (
            store.tid(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
            ),
            store.tid(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
            ),
        ) else {
            return Ok(req.obj);
        };
        let (mutating, validating, ns_labels) = {
            let r = store.read();
            let collect = |tid: usize| -> Vec<Value> {
                r.iter(tid, None, None)
                    .flat_map(|(_, o)| {
                        o.value
                            .get("webhooks")
                            .and_then(|w| w.as_array())
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect()
            };
            let m = collect(mtid);
            let v = collect(vtid);
            if m.is_empty() && v.is_empty() {
                return Ok(req.obj);
            }
            let ns_labels = store
                .tid("", "namespaces")
                .and_then(|t| r.get(t, "", req.ns))
                .and_then(|n| meta::labels(&n.value).cloned());
            (m, v, ns_labels)
        };
        let mut obj = std::mem::take(&mut req.obj);
        for (hooks, mutate) in [(mutating, true), (validating, false)] {
            for hook in hooks {
                if !matches(&hook, &rt, &req, &obj, ns_labels.as_ref()) {
                    continue;
                }
                let name = hook
                    .get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("")
                    .to_string();
                let fail = hook.get("failurePolicy").and_then(|f| f.as_str()) != Some("Ignore");
                match self.call(store, &hook, &rt, &req, &obj).await {
                    Ok(patch) => {
                        if mutate && let Some(p) = patch {
                            let ops: json_patch::Patch = match serde_json::from_slice(&p) {
                                Ok(ops) => ops,
                                Err(e) => {
                                    if fail {
                                        return Err(internal(
                                            &name,
                                            &format!("invalid patch: {e}"),
                                        ));
                                    }
                                    continue;
                                }
                            };
                            let mut next = obj.clone();
                            match json_patch::patch(&mut next, &ops) {
                                Ok(()) => obj = next,
                                Err(e) if fail => {
                                    return Err(internal(&name, &format!("applying patch: {e}")));
                                }
                                Err(_) => {}
                            }
                        }
                    }
                    Err(CallError::Denied(e)) => return Err(e),
                    Err(CallError::Failed(msg)) => {
                        tracing::warn!(webhook = %name, error = %msg, "admission webhook call failed");
                        if fail {
                            return Err(internal(&name, &msg));
                        }
                    }
                }
            }
        }
        Ok(obj)
    }

    fn client(&self, ca: &str) -> Result<HttpsClient, String> {
        let mut cache = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(ca) {
            return Ok(c.clone());
        }
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca.trim())
            .map_err(|e| format!("caBundle is not base64: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
            roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let conn = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(cfg)
            .https_only()
            .enable_http1()
            .build();
        let client: HttpsClient = Client::builder(TokioExecutor::new()).build(conn);
        cache.insert(ca.to_string(), client.clone());
        Ok(client)
    }

    async fn call(
        &self,
        store: &Store,
        hook: &Value,
        rt: &crate::registry::ResourceType,
        req: &AdmissionRequest<'_>,
        obj: &Value,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let name = hook.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let cc = hook.get("clientConfig").cloned().unwrap_or(json!({}));
        let url = resolve_url(store, &cc).map_err(CallError::Failed)?;
        let ca = cc.get("caBundle").and_then(|c| c.as_str()).unwrap_or("");
        let client = self.client(ca).map_err(CallError::Failed)?;
        let uid = meta::new_uid();
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let gvr = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
        let mut request = json!({
            "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": req.name, "namespace": req.ns, "operation": req.op.as_str(),
            "userInfo": {"username": "kube-sim-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj, "oldObject": req.old, "dryRun": req.dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1",
                        "kind": if req.op == Operation::Create { "CreateOptions" } else { "UpdateOptions" }},
        });
        if let Some(s) = req.sub {
            request["subResource"] = json!(s);
        }
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let timeout = hook
            .get("timeoutSeconds")
            .and_then(|t| t.as_u64())
            .unwrap_or(10)
            .clamp(1, 30);
        let http_req = http::Request::post(url.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Full::new(Bytes::from(review.to_string())))
            .map_err(|e| CallError::Failed(e.to_string()))?;
        let fut = async {
            let resp = client
                .request(http_req)
                .await
                .map_err(|e| format!("failed to call webhook: {e:?}"))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("received invalid webhook response: HTTP {status}"));
            }
            serde_json::from_slice::<Value>(&body)
                .map_err(|e| format!("invalid AdmissionReview response: {e}"))
        };
        let resp = tokio::time::timeout(Duration::from_secs(timeout), fut)
            .await
            .map_err(|_| {
                CallError::Failed(format!("failed to call webhook: timeout after {timeout}s"))
            })?
            .map_err(CallError::Failed)?;
        let r = resp.get("response").cloned().unwrap_or(Value::Null);
        if r.get("uid").and_then(|u| u.as_str()) != Some(uid.as_str()) {
            return Err(CallError::Failed(format!(
                "expected response.uid={uid:?}, got {:?}",
                r.get("uid")
            )));
        }
        if r.get("allowed").and_then(|a| a.as_bool()) != Some(true) {
            let st = r.get("status").cloned().unwrap_or(json!({}));
            let msg = st.get("message").and_then(|m| m.as_str()).unwrap_or("");
            let code = st.get("code").and_then(|c| c.as_u64()).unwrap_or(0) as u16;
            let code = if code < 400 { 400 } else { code };
            let message = if msg.is_empty() {
                format!("admission webhook \"{name}\" denied the request without explanation")
            } else {
                format!("admission webhook \"{name}\" denied the request: {msg}")
            };
            let reason = match st.get("reason").and_then(|r| r.as_str()).unwrap_or("") {
                "Forbidden" => "Forbidden",
                "Invalid" => "Invalid",
                "Conflict" => "Conflict",
                "NotFound" => "NotFound",
                "Unauthorized" => "Unauthorized",
                "TooManyRequests" => "TooManyRequests",
                "" if code == 403 => "Forbidden",
                _ => "BadRequest",
            };
            return Err(CallError::Denied(ApiError::new(code, reason, message)));
        }
        match (
            r.get("patch").and_then(|p| p.as_str()),
            r.get("patchType").and_then(|p| p.as_str()),
        ) {
            (Some(p), Some("JSONPatch")) => base64::engine::general_purpose::STANDARD
                .decode(p)
                .map(Some)
                .map_err(|e| CallError::Failed(format!("patch is not base64: {e}"))),
            (Some(_), t) => Err(CallError::Failed(format!("unsupported patchType {t:?}"))),
            (None, _) => Ok(None),
        }
    }
}

fn internal(name: &str, msg: &str) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: failed calling webhook \"{name}\": {msg}"),
    )
}

/// The URL to call: `clientConfig.url`, or a Service reference resolved to a loopback
/// clusterIP or an ExternalName.
fn resolve_url(store: &Store, cc: &Value) -> Result<String, String> {
    if let Some(u) = cc.get("url").and_then(|u| u.as_str()) {
        return Ok(u.to_string());
    }
    let svc = cc
        .get("service")
        .ok_or("webhook clientConfig has neither url nor service")?;
    let ns = svc.get("namespace").and_then(|v| v.as_str()).unwrap_or("");
    let name = svc.get("name").and_then(|v| v.as_str()).unwrap_or("");
    let port = svc.get("port").and_then(|v| v.as_u64()).unwrap_or(443);
    let path = svc.get("path").and_then(|v| v.as_str()).unwrap_or("/");
    let tid = store.tid("", "services").ok_or("no services type")?;
    let s = store
        .read()
        .get(tid, ns, name)
        .cloned()
        .ok_or_else(|| format!("service \"{ns}/{name}\" not found"))?;
    let spec = s.value.get("spec").cloned().unwrap_or(json!({}));
    let host = match spec.get("type").and_then(|t| t.as_str()) {
        Some("ExternalName") => spec
            .get("externalName")
            .and_then(|e| e.as_str())
            .unwrap_or("")
            .to_string(),
        _ => spec
            .get("clusterIP")
            .and_then(|e| e.as_str())
            .unwrap_or("")
            .to_string(),
    };
    if host.is_empty() || host == "None" {
        return Err(format!(
            "service \"{ns}/{name}\" has no address kube-sim can reach"
        ));
    }
    let target = spec
        .get("ports")
        .and_then(|p| p.as_array())
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("port").and_then(|x| x.as_u64()) == Some(port))
        })
        .and_then(|p| p.get("targetPort"))
        .and_then(|t| t.as_u64())
        .unwrap_or(port);
    Ok(format!("https://{host}:{target}{path}"))
}

fn rule_matches(list: Option<&Value>, want: &str) -> bool {
    list.and_then(|l| l.as_array()).is_some_and(|a| {
        a.iter()
            .any(|x| x.as_str() == Some("*") || x.as_str() == Some(want))
    })
}

fn resource_matches(list: Option<&Value>, plural: &str, sub: Option<&str>) -> bool {
    list.and_then(|l| l.as_array()).is_some_and(|a| {
        a.iter().filter_map(|x| x.as_str()).any(|r| {
            let (rr, rs) = r
                .split_once('/')
                .map(|(a, b)| (a, Some(b)))
                .unwrap_or((r, None));
            (rr == "*" || rr == plural)
                && match (rs, sub) {
                    (None, None) => true,
                    (Some("*"), Some(_)) => true,
                    (Some(x), Some(s)) => x == s,
                    _ => false,
                }
        })
    })
}

fn matches(
    hook: &Value,
    rt: &crate::registry::ResourceType,
    req: &AdmissionRequest<'_>,
    obj: &Value,
    ns_labels: Option<&serde_json::Map<String, Value>>,
) -> bool {
    let rules = hook
        .get("rules")
        .and_then(|r| r.as_array())
        .cloned()
        .unwrap_or_default();
    let rule_ok = rules.iter().any(|r| {
        let scope = r.get("scope").and_then(|s| s.as_str()).unwrap_or("*");
        rule_matches(r.get("operations"), req.op.as_str())
            && rule_matches(r.get("apiGroups"), &rt.group)
            && rule_matches(r.get("apiVersions"), &rt.version)
            && resource_matches(r.get("resources"), &rt.plural, req.sub)
            && match scope {
                "Namespaced" => rt.namespaced,
                "Cluster" => !rt.namespaced,
                _ => true,
            }
    });
    if !rule_ok {
        return false;
    }
    if let Some(sel) = hook.get("namespaceSelector")
        && rt.namespaced
    {
        match LabelSelector::from_object(sel) {
            Ok(s) if s.is_empty() || s.matches_labels(ns_labels) => {}
            _ => return false,
        }
    }
    if let Some(sel) = hook.get("objectSelector") {
        match LabelSelector::from_object(sel) {
            Ok(s)
                if s.is_empty()
                    || s.matches(obj)
                    || req.old.as_ref().is_some_and(|o| s.matches(o)) => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_rules() {
        let r = json!(["pods", "*/status"]);
        assert!(resource_matches(Some(&r), "pods", None));
        assert!(!resource_matches(Some(&r), "pods", Some("binding")));
        assert!(resource_matches(Some(&r), "jobs", Some("status")));
        assert!(resource_matches(Some(&json!(["*"])), "jobs", None));
        assert!(!resource_matches(
            Some(&json!(["*"])),
            "jobs",
            Some("status")
        ));
        assert!(resource_matches(
            Some(&json!(["*/*"])),
            "jobs",
            Some("status")
        ));
    }
}
