//! `AdmissionReview` (`admission.k8s.io/v1`) decoding and responses.
//!
//! Decoding is strict about what the webhook needs and lenient about the rest: a body that is
//! not JSON, is not an `admission.k8s.io/v1` `AdmissionReview`, has no `request`, or lacks the
//! pod(s) the operation needs is a [`ReviewError`], which the server answers with HTTP 400 and
//! the error text. Unknown fields are ignored.

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The `apiVersion` of the reviews the webhook accepts and answers.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The `kind` of the reviews.
pub const KIND: &str = "AdmissionReview";

/// Why an admission review could not be read (answered with HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReviewError {
    /// The body is not JSON.
    #[error("the body is not a JSON AdmissionReview: {0}")]
    Json(String),
    /// The body is JSON but not an `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion {api_version:?} and kind {kind:?}"
    )]
    WrongKind {
        /// `apiVersion` found.
        api_version: String,
        /// `kind` found.
        kind: String,
    },
    /// There is no `request`.
    #[error("the AdmissionReview has no request")]
    MissingRequest,
    /// A field the webhook needs is missing or has the wrong type.
    #[error("the AdmissionReview request has no {0}")]
    MissingField(&'static str),
    /// The request is about something other than a v1 Pod.
    #[error("this webhook reviews v1 Pods, not {0}")]
    WrongResource(String),
    /// `object` or `oldObject` is not a Pod.
    #[error("request.{field} is not a v1 Pod: {message}")]
    BadObject {
        /// `object` or `oldObject`.
        field: &'static str,
        /// Decoding error.
        message: String,
    },
}

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`
    Create,
    /// `UPDATE`
    Update,
    /// `DELETE`
    Delete,
    /// `CONNECT`
    Connect,
}

/// What the webhooks use of an admission request.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// `request.uid`, echoed in the response.
    pub uid: String,
    /// `request.operation`.
    pub operation: Operation,
    /// `request.subResource` (`""` for the pod itself, `resize` for `pods/resize`).
    pub sub_resource: String,
    /// The pod's namespace: `request.namespace`, else the object's.
    pub namespace: String,
    /// `request.object`; the default pod for DELETE and CONNECT, which carry none.
    pub object: Pod,
    /// `request.oldObject`; present for UPDATE.
    pub old_object: Option<Pod>,
}

impl AdmissionRequest {
    /// A request for tests and callers that build one by hand.
    pub fn new(operation: Operation, pod: Pod) -> AdmissionRequest {
        AdmissionRequest {
            uid: String::new(),
            operation,
            sub_resource: String::new(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            object: pod,
            old_object: None,
        }
    }
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn decode_pod(v: Option<&Value>, field: &'static str) -> Result<Pod, ReviewError> {
    match v {
        None | Some(Value::Null) => Err(ReviewError::MissingField(match field {
            "object" => "object",
            _ => "oldObject",
        })),
        Some(v @ Value::Object(_)) => {
            let kind = str_field(v, "kind");
            if !kind.is_empty() && kind != "Pod" {
                return Err(ReviewError::WrongResource(format!(
                    "{field} of kind {kind}"
                )));
            }
            serde_json::from_value(v.clone()).map_err(|e| ReviewError::BadObject {
                field,
                message: e.to_string(),
            })
        }
        Some(_) => Err(ReviewError::BadObject {
            field,
            message: "not a JSON object".into(),
        }),
    }
}

/// Reads an `AdmissionReview` body.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
    let review: Value =
        serde_json::from_slice(body).map_err(|e| ReviewError::Json(e.to_string()))?;
    if !review.is_object() {
        return Err(ReviewError::Json("not a JSON object".into()));
    }
    let (api_version, kind) = (str_field(&review, "apiVersion"), str_field(&review, "kind"));
    if api_version != API_VERSION || kind != KIND {
        return Err(ReviewError::WrongKind { api_version, kind });
    }
    let req = match review.get("request") {
        Some(r @ Value::Object(_)) => r,
        _ => return Err(ReviewError::MissingRequest),
    };
    let uid = match req.get("uid").and_then(Value::as_str) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => return Err(ReviewError::MissingField("uid")),
    };
    if let Some(k) = req.get("kind") {
        let (group, version, kind) = (
            str_field(k, "group"),
            str_field(k, "version"),
            str_field(k, "kind"),
        );
        if !(group.is_empty() && version == "v1" && kind == "Pod") {
            let gv = if group.is_empty() {
                version
            } else {
                format!("{group}/{version}")
            };
            return Err(ReviewError::WrongResource(format!("{gv} {kind}")));
        }
    }
    let operation = match req.get("operation").and_then(Value::as_str) {
        Some("CREATE") => Operation::Create,
        Some("UPDATE") => Operation::Update,
        Some("DELETE") => Operation::Delete,
        Some("CONNECT") => Operation::Connect,
        _ => {
            return Err(ReviewError::MissingField(
                "operation (CREATE, UPDATE, DELETE or CONNECT)",
            ));
        }
    };
    let (object, old_object) = match operation {
        Operation::Create => (decode_pod(req.get("object"), "object")?, None),
        Operation::Update => (
            decode_pod(req.get("object"), "object")?,
            Some(decode_pod(req.get("oldObject"), "oldObject")?),
        ),
        Operation::Delete | Operation::Connect => (Pod::default(), None),
    };
    let mut namespace = str_field(req, "namespace");
    if namespace.is_empty() {
        namespace = object.metadata.namespace.clone().unwrap_or_default();
    }
    Ok(AdmissionRequest {
        uid,
        operation,
        sub_resource: str_field(req, "subResource"),
        namespace,
        object,
        old_object,
    })
}

/// The webhook's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Allowed, with JSON-patch operations (empty: unchanged).
    Allow(Vec<Value>),
    /// Refused (HTTP-style code 403) with this message.
    Deny(String),
    /// The webhook could not decide (code 500), e.g. a namespace lookup failed.
    Error(String),
}

/// The `AdmissionReview` answering `uid` with `verdict`.
pub fn response(uid: &str, verdict: &Verdict) -> Value {
    let resp = match verdict {
        Verdict::Allow(patch) if patch.is_empty() => json!({"uid": uid, "allowed": true}),
        Verdict::Allow(patch) => {
            let text = Value::Array(patch.clone()).to_string();
            json!({
                "uid": uid,
                "allowed": true,
                "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(text),
            })
        }
        Verdict::Deny(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        }),
        Verdict::Error(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 500, "reason": "InternalError", "message": message},
        }),
    };
    json!({"apiVersion": API_VERSION, "kind": KIND, "response": resp})
}
