//! `AdmissionReview` (`admission.k8s.io/v1`) decoding and answers, on kube-core's
//! [`admission`](kube::core::admission) types.
//!
//! A body is decoded straight into `AdmissionReview<Pod>`; on failure it is decoded again
//! loosely (`AdmissionReview<DynamicObject>`) only to say what was wrong. A body that is not
//! JSON, is not an `admission.k8s.io/v1` `AdmissionReview`, has no `request`, lacks a field the
//! API server always sends (`uid`, `kind`, `resource`, `operation`, `userInfo`), is about
//! something other than a v1 Pod, or lacks the pod(s) the operation needs is a [`ReviewError`],
//! which the server answers with HTTP 400 and the error text. Unknown fields are ignored.

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};

pub use kube::core::admission::{AdmissionRequest, Operation};

/// The `apiVersion` of the reviews the webhook accepts and answers.
pub const API_VERSION: &str = META_API_VERSION_V1;
/// The `kind` of the reviews.
pub const KIND: &str = META_KIND;

/// Why an admission review could not be read (answered with HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReviewError {
    /// The body is not JSON, or not shaped as an `AdmissionReview` (a required field missing or
    /// of the wrong type; serde's text names it).
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
    /// A field the webhook needs is missing or empty.
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

/// A request for tests and callers that build one by hand: `operation` on `pod`, in the pod's
/// namespace, with an empty uid.
pub fn request(operation: Operation, pod: Pod) -> AdmissionRequest<Pod> {
    AdmissionRequest {
        types: TypeMeta {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
        },
        uid: String::new(),
        kind: GroupVersionKind::gvk("", "v1", "Pod"),
        resource: GroupVersionResource::gvr("", "v1", "pods"),
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone(),
        operation,
        user_info: Default::default(),
        object: Some(pod),
        old_object: None,
        dry_run: false,
        options: None,
    }
}

/// The pod's namespace: `request.namespace`, else the object's.
pub fn namespace<T: kube::Resource>(req: &AdmissionRequest<T>) -> &str {
    match req.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => req
            .object
            .as_ref()
            .and_then(|o| o.meta().namespace.as_deref())
            .unwrap_or_default(),
    }
}

/// `request.subResource` (`""` for the pod itself, `resize` for `pods/resize`).
pub fn sub_resource<T: kube::Resource>(req: &AdmissionRequest<T>) -> &str {
    req.sub_resource.as_deref().unwrap_or_default()
}

/// Reads an `AdmissionReview` body.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest<Pod>, ReviewError> {
    match serde_json::from_slice::<AdmissionReview<Pod>>(body) {
        Ok(review) => {
            let req = check(review)?;
            match req.operation {
                Operation::Create if req.object.is_none() => {
                    Err(ReviewError::MissingField("object"))
                }
                Operation::Update if req.object.is_none() => {
                    Err(ReviewError::MissingField("object"))
                }
                Operation::Update if req.old_object.is_none() => {
                    Err(ReviewError::MissingField("oldObject"))
                }
                _ => Ok(req),
            }
        }
        Err(typed) => Err(diagnose(body, typed)),
    }
}

/// The checks serde does not make: the review's type, a request with a uid, about v1 Pods.
fn check<T: kube::Resource>(
    review: AdmissionReview<T>,
) -> Result<AdmissionRequest<T>, ReviewError> {
    if review.types.api_version != API_VERSION || review.types.kind != KIND {
        return Err(ReviewError::WrongKind {
            api_version: review.types.api_version,
            kind: review.types.kind,
        });
    }
    let req: AdmissionRequest<T> = review.try_into().map_err(|_| ReviewError::MissingRequest)?;
    if req.uid.is_empty() {
        return Err(ReviewError::MissingField("uid"));
    }
    let k = &req.kind;
    if !(k.group.is_empty() && k.version == "v1" && k.kind == "Pod") {
        let gv = if k.group.is_empty() {
            k.version.clone()
        } else {
            format!("{}/{}", k.group, k.version)
        };
        return Err(ReviewError::WrongResource(format!("{gv} {}", k.kind)));
    }
    Ok(req)
}

/// Why a body did not decode as `AdmissionReview<Pod>`: decoded loosely, the first check that
/// fails, or the object that is not a Pod (named); else serde's own text of the typed decode
/// (which names the missing field or the bad value, and where).
fn diagnose(body: &[u8], typed: serde_json::Error) -> ReviewError {
    let review = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(r) => r,
        Err(_) => return ReviewError::Json(typed.to_string()),
    };
    let req = match check(review) {
        Ok(r) => r,
        Err(e) => return e,
    };
    for (field, object) in [("object", req.object), ("oldObject", req.old_object)] {
        if let Some(o) = object
            && let Err(e) = o.try_parse::<Pod>()
        {
            let message = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
            return ReviewError::BadObject { field, message };
        }
    }
    ReviewError::Json(typed.to_string())
}

/// The webhook's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Allowed, with a JSON patch (empty: unchanged).
    Allow(json_patch::Patch),
    /// Refused (HTTP-style code 403) with this message.
    Deny(String),
    /// The webhook could not decide (code 500), e.g. a namespace lookup failed.
    Error(String),
}

impl Verdict {
    /// Allowed, unchanged.
    pub fn allow() -> Verdict {
        Verdict::Allow(json_patch::Patch(Vec::new()))
    }
}

/// The `AdmissionReview` answering `req` with `verdict`: kube-core's `AdmissionResponse`, with
/// the code and reason of a refusal (403 Forbidden) or an error (500 InternalError) set as the
/// API server shows them.
pub fn response<T: kube::Resource>(
    req: &AdmissionRequest<T>,
    verdict: &Verdict,
) -> AdmissionReview<DynamicObject> {
    let allowed = AdmissionResponse::from(req);
    let refused = |code: u16, reason: &str, message: &str| {
        let mut r = AdmissionResponse::from(req).deny(message);
        r.result.code = code;
        r.result.reason = reason.into();
        r
    };
    match verdict {
        Verdict::Allow(patch) if patch.0.is_empty() => allowed,
        Verdict::Allow(patch) => match allowed.with_patch(patch.clone()) {
            Ok(r) => r,
            Err(e) => refused(500, "InternalError", &e.to_string()),
        },
        Verdict::Deny(message) => refused(403, "Forbidden", message),
        Verdict::Error(message) => refused(500, "InternalError", message),
    }
    .into_review()
}
