//! API errors, answered as `meta/v1 Status` objects with the code and reason the real server uses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::registry::ResourceType;

/// An error answered to the client as a `Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `Status.details`, when any.
    pub details: Option<Value>,
}

fn qualified(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

fn details(rt: &ResourceType, name: &str) -> Value {
    json!({"name": name, "group": rt.group, "kind": rt.plural})
}

impl ApiError {
    /// A plain error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 404 for an object.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", qualified(rt), name),
            )
        }
    }

    /// 409 AlreadyExists for a create of an existing name.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{}\" already exists", qualified(rt), name),
            )
        }
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {}",
                    qualified(rt),
                    name,
                    why
                ),
            )
        }
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per (field, message).
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[(String, String)]) -> Self {
        let msgs: Vec<String> = causes
            .iter()
            .map(|(f, m)| format!("{f}: Invalid value: {m}"))
            .collect();
        let mut d = details(rt, name);
        d["kind"] = json!(rt.kind);
        d["causes"] = causes
            .iter()
            .map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": format!("Invalid value: {m}"), "field": f}))
            .collect();
        ApiError {
            details: Some(d),
            ..Self::new(
                422,
                "Invalid",
                format!("{} \"{}\" is invalid: {}", rt.kind, name, msgs.join(", ")),
            )
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Gone / Expired for a resourceVersion older than the history kept.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 for a patch or content type the server does not support.
    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.status().to_string(),
        )
            .into_response()
    }
}
