//! One typed error for every client call. It keeps Slurm's own `errors[]` and `warnings[]`,
//! the HTTP status, and a [`ErrorKind`] derived from Slurm's error numbers (and the status
//! where Slurm gave none).

use crate::models::{ResponseStatus, SlurmErrorEntry, SlurmWarning};
use std::fmt::Write as _;

/// Slurm error numbers (`slurm/slurm_errno.h`) the client classifies, checked against a real
/// slurmrestd 26.05.
pub mod errno {
    /// `SLURM_PROTOCOL_AUTHENTICATION_ERROR`: "Protocol authentication error" (bad token).
    pub const PROTOCOL_AUTHENTICATION_ERROR: i32 = 1007;
    /// `SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR`: slurmctld unreachable.
    pub const SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR: i32 = 1800;
    /// `SLURMCTLD_COMMUNICATIONS_HARD_DROP`: last of the slurmctld communication errors.
    pub const SLURMCTLD_COMMUNICATIONS_HARD_DROP: i32 = 1805;
    /// `ESLURM_INVALID_PARTITION_NAME`: "Invalid partition name specified".
    pub const INVALID_PARTITION_NAME: i32 = 2000;
    /// `ESLURM_ACCESS_DENIED`: "Access/permission denied".
    pub const ACCESS_DENIED: i32 = 2002;
    /// `ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE`: "Requested node configuration is not available".
    pub const REQUESTED_NODE_CONFIG_UNAVAILABLE: i32 = 2014;
    /// `ESLURM_INVALID_JOB_ID`: "Invalid job id specified".
    pub const INVALID_JOB_ID: i32 = 2017;
    /// `ESLURM_INVALID_NODE_NAME`: "Invalid node name specified".
    pub const INVALID_NODE_NAME: i32 = 2018;
    /// `ESLURM_ALREADY_DONE`: "Job/step already completing or completed".
    pub const ALREADY_DONE: i32 = 2021;
    /// `ESLURM_IN_STANDBY_MODE`: controller in standby mode.
    pub const IN_STANDBY_MODE: i32 = 2027;
    /// `ESLURM_NOT_SUPPORTED`: "Requested operation not supported on this system".
    pub const NOT_SUPPORTED: i32 = 2036;
    /// `ESLURM_RESERVATION_INVALID`: "Invalid reservation name specified".
    pub const RESERVATION_INVALID: i32 = 2053;
    /// `ESLURM_JOB_NOT_PENDING`: "Job is no longer pending execution".
    pub const JOB_NOT_PENDING: i32 = 2073;
    /// `ESLURM_JOB_NOT_RUNNING`: "Job is not running" (e.g. GET /resources/ of a pending job).
    pub const JOB_NOT_RUNNING: i32 = 2085;
    /// "Node already exists in the node table" (POST /new/node/ of an existing node).
    pub const NODE_ALREADY_EXISTS: i32 = 2168;
    /// `SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT`: "Socket timed out on send/recv operation".
    pub const SOCKET_TIMEOUT: i32 = 5004;
    /// `ESLURM_REST_INVALID_QUERY`: "Query empty or incorrect type".
    pub const REST_INVALID_QUERY: i32 = 9000;
    /// `ESLURM_REST_FAIL_PARSING`: "Unable to parse request".
    pub const REST_FAIL_PARSING: i32 = 9001;
    /// `ESLURM_REST_EMPTY_RESULT`: "Nothing found with query".
    pub const REST_EMPTY_RESULT: i32 = 9003;
    /// `ESLURM_REST_AUTH_FAIL`: "Authentication failure".
    pub const REST_AUTH_FAIL: i32 = 9008;
    /// `ESLURM_REST_BAD_REQUEST`.
    pub const REST_BAD_REQUEST: i32 = 9009;
}

/// What kind of failure an [`Error`] is; callers branch on this, users read the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The job, node, partition or resource layout does not exist (HTTP 404, Slurm 2017,
    /// 2018, an empty result for a single object).
    NotFound,
    /// The job is no longer pending, so the update was refused (Slurm 2073).
    JobNotPending,
    /// The token is missing, bad or expired, or the user may not do this
    /// (HTTP 401/403/511, Slurm 1007, 2002, 9008), or the token could not be read.
    Authentication,
    /// Slurm rejected the request as invalid or unsupported (HTTP 400/422, Slurm 2036, ...).
    InvalidRequest,
    /// Worth retrying: connection refused or reset, timeouts, HTTP 502/503/504, slurmctld
    /// unreachable behind slurmrestd.
    Transient,
    /// Anything else (including answers this client could not decode).
    Other,
}

/// Error of a slurm-rest call. Its text carries Slurm's own error messages and the cause
/// chain of transport failures (so it has no separate `source`); it never contains a token.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.inner.message)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    message: String,
    status: Option<u16>,
    errors: Vec<SlurmErrorEntry>,
    warnings: Vec<SlurmWarning>,
    /// True when the request certainly never reached slurmrestd (connect failed).
    not_sent: bool,
}

impl Error {
    fn new(kind: ErrorKind, message: String) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message,
                status: None,
                errors: Vec::new(),
                warnings: Vec::new(),
                not_sent: false,
            }),
        }
    }

    /// An error with Slurm entries, classified as the client classifies slurmrestd's answers;
    /// for fakes of Slurm in tests (e.g. entry 2073 gives [`ErrorKind::JobNotPending`]).
    /// `context` names the call, e.g. `"POST /slurm/v0.0.44/job/5"`.
    pub fn from_slurm(context: &str, http_status: u16, errors: Vec<SlurmErrorEntry>) -> Self {
        let kind = classify(context, Some(http_status), &errors);
        let detail = if errors.is_empty() {
            format!("HTTP {http_status}")
        } else {
            format!("{} (HTTP {http_status})", describe(&errors))
        };
        let mut e = Error::new(kind, format!("{context}: {detail}"));
        e.inner.status = Some(http_status);
        e.inner.errors = errors;
        e
    }

    /// An error of the given kind with a message and nothing else; for fakes in tests
    /// (e.g. a [`ErrorKind::Transient`] "connection refused").
    pub fn synthetic(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error::new(kind, message.into())
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// HTTP status of slurmrestd's answer, when there was one.
    pub fn http_status(&self) -> Option<u16> {
        self.inner.status
    }

    /// Slurm's `errors[]` entries, as slurmrestd sent them.
    pub fn slurm_errors(&self) -> &[SlurmErrorEntry] {
        &self.inner.errors
    }

    /// Slurm's `warnings[]` entries of the failed answer.
    pub fn warnings(&self) -> &[SlurmWarning] {
        &self.inner.warnings
    }

    /// True when retrying may help (see [`ErrorKind::Transient`]).
    pub fn is_transient(&self) -> bool {
        self.inner.kind == ErrorKind::Transient
    }

    /// True for [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.inner.kind == ErrorKind::NotFound
    }

    /// True when one of Slurm's entries has this error number.
    pub fn has_error_number(&self, number: i32) -> bool {
        self.inner
            .errors
            .iter()
            .any(|e| e.error_number == Some(number))
    }

    /// True when the request certainly never reached slurmrestd, so even a
    /// non-idempotent call (submit) may be repeated safely.
    pub fn not_sent(&self) -> bool {
        self.inner.not_sent
    }

    /// This error, marked as one whose request never left (a refused connection); for fakes
    /// of Slurm in tests.
    pub fn never_sent(mut self) -> Self {
        self.inner.not_sent = true;
        self
    }

    /// Error for a non-success HTTP answer; `body` is decoded for `errors[]`/`warnings[]`.
    pub(crate) fn from_response(context: &str, status: u16, body: &[u8]) -> Self {
        let parsed: Option<ResponseStatus> = serde_json::from_slice(body).ok();
        let (errors, warnings) = parsed.map(|p| (p.errors, p.warnings)).unwrap_or_default();
        let detail = if errors.is_empty() {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() || text.starts_with('{') {
                http::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("request failed")
                    .to_string()
            } else {
                truncate(text, 300)
            }
        } else {
            describe(&errors)
        };
        let kind = classify(context, Some(status), &errors);
        let mut e = Error::new(kind, format!("{context}: {detail} (HTTP {status})"));
        e.inner.status = Some(status);
        e.inner.errors = errors;
        e.inner.warnings = warnings;
        e
    }

    /// Error for Slurm entries reported inside a successful HTTP answer (per-job results).
    pub(crate) fn from_entries(context: &str, status: u16, errors: Vec<SlurmErrorEntry>) -> Self {
        let kind = classify(context, None, &errors);
        let mut e = Error::new(kind, format!("{context}: {}", describe(&errors)));
        e.inner.status = Some(status);
        e.inner.errors = errors;
        e
    }

    /// The single object asked for was not in the answer.
    pub(crate) fn not_found(context: &str, status: u16) -> Self {
        let mut e = Error::new(ErrorKind::NotFound, format!("{context}: Not Found"));
        e.inner.status = Some(status);
        e
    }

    /// Transport failure (connection refused, reset, ...).
    pub(crate) fn transport(context: &str, err: hyper_util::client::legacy::Error) -> Self {
        let not_sent = err.is_connect();
        let mut chain = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&err);
        while let Some(s) = src {
            let _ = write!(chain, ": {s}");
            src = s.source();
        }
        let mut e = Error::new(
            ErrorKind::Transient,
            format!("{context}: cannot reach slurmrestd: {err}{chain}"),
        );
        e.inner.not_sent = not_sent;
        e
    }

    /// Failure while reading an answer's body.
    pub(crate) fn body(context: &str, status: u16, err: hyper::Error) -> Self {
        let mut e = Error::new(
            ErrorKind::Transient,
            format!("{context}: reading the answer failed: {err}"),
        );
        e.inner.status = Some(status);
        e
    }

    /// The call took longer than the client's timeout.
    pub(crate) fn timeout(context: &str, after: std::time::Duration) -> Self {
        Error::new(
            ErrorKind::Transient,
            format!("{context}: no answer from slurmrestd within {after:?}"),
        )
    }

    /// A successful answer that does not decode as the documented model.
    pub(crate) fn decode(context: &str, status: u16, err: serde_json::Error) -> Self {
        let mut e = Error::new(
            ErrorKind::Other,
            format!("{context}: cannot decode slurmrestd's answer: {err}"),
        );
        e.inner.status = Some(status);
        e
    }

    /// A request body that does not encode (should not happen with the typed models).
    pub(crate) fn encode(context: &str, err: serde_json::Error) -> Self {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("{context}: cannot encode the request: {err}"),
        )
    }

    /// The token could not be resolved (file missing, unreadable or empty).
    pub(crate) fn token(message: String, source: Option<std::io::Error>) -> Self {
        match source {
            Some(s) => Error::new(ErrorKind::Authentication, format!("{message}: {s}")),
            None => Error::new(ErrorKind::Authentication, message),
        }
    }

    /// Bad client configuration (base URL, TLS).
    pub(crate) fn config(message: String) -> Self {
        Error::new(ErrorKind::InvalidRequest, message)
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Slurm's entries as one line for users: `error: description (error N); ...`.
fn describe(errors: &[SlurmErrorEntry]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        let error = e.error.as_deref().unwrap_or("").trim();
        let desc = e.description.as_deref().unwrap_or("").trim();
        match (error.is_empty(), desc.is_empty() || desc == error) {
            (false, true) => out.push_str(error),
            (false, false) => {
                let _ = write!(out, "{error}: {desc}");
            }
            (true, false) => out.push_str(desc),
            (true, true) => out.push_str("unknown Slurm error"),
        }
        if let Some(n) = e.error_number.filter(|n| *n != 0) {
            let _ = write!(out, " (error {n})");
        }
    }
    out
}

/// Kind of a Slurm error number, where the client knows it. "Invalid node name" means the
/// node does not exist on node endpoints, and a bad node list in a job description.
fn kind_of_number(n: i32, node_call: bool) -> Option<ErrorKind> {
    use errno::*;
    Some(match n {
        JOB_NOT_PENDING => ErrorKind::JobNotPending,
        INVALID_NODE_NAME if node_call => ErrorKind::NotFound,
        INVALID_NODE_NAME => ErrorKind::InvalidRequest,
        INVALID_JOB_ID | REST_EMPTY_RESULT => ErrorKind::NotFound,
        PROTOCOL_AUTHENTICATION_ERROR | ACCESS_DENIED | REST_AUTH_FAIL => ErrorKind::Authentication,
        // ESLURM_AUTH_* (credential invalid, expired, ...).
        6000..=6099 => ErrorKind::Authentication,
        SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR..=SLURMCTLD_COMMUNICATIONS_HARD_DROP
        | IN_STANDBY_MODE
        | SOCKET_TIMEOUT => ErrorKind::Transient,
        NOT_SUPPORTED
        | INVALID_PARTITION_NAME
        | REQUESTED_NODE_CONFIG_UNAVAILABLE
        | RESERVATION_INVALID
        | REST_INVALID_QUERY
        | REST_FAIL_PARSING
        | REST_BAD_REQUEST => ErrorKind::InvalidRequest,
        _ => return None,
    })
}

/// Classify by Slurm's error numbers first (the most specific), then by the HTTP status.
/// `context` is the call (`"GET /slurm/v0.0.44/node/x"`).
pub(crate) fn classify(
    context: &str,
    status: Option<u16>,
    errors: &[SlurmErrorEntry],
) -> ErrorKind {
    let node_call = context.contains("/node/");
    let not_pending = errors.iter().any(|e| {
        e.error_number == Some(errno::JOB_NOT_PENDING)
            || e.error
                .as_deref()
                .is_some_and(|t| t.to_ascii_lowercase().contains("no longer pending"))
    });
    if not_pending {
        return ErrorKind::JobNotPending;
    }
    if let Some(kind) = errors
        .iter()
        .filter_map(|e| e.error_number)
        .find_map(|n| kind_of_number(n, node_call))
    {
        return kind;
    }
    match status {
        Some(404) => ErrorKind::NotFound,
        Some(401 | 403 | 511) => ErrorKind::Authentication,
        Some(400 | 405 | 413 | 415 | 422) => ErrorKind::InvalidRequest,
        Some(408 | 429 | 502 | 503 | 504) => ErrorKind::Transient,
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(number: i32, error: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "errors": [{"error_number": number, "error": error, "description": "", "source": "x"}],
            "warnings": [{"description": "w", "source": "y"}]
        }))
        .unwrap()
    }

    #[test]
    fn classifies_by_slurm_error_number_then_status() {
        let k = |status, n, t: &str| Error::from_response("GET /x", status, &body(n, t)).kind();
        assert_eq!(
            k(404, 2017, "Invalid job id specified"),
            ErrorKind::NotFound
        );
        assert_eq!(
            k(500, 2017, "Invalid job id specified"),
            ErrorKind::NotFound
        );
        assert_eq!(
            k(500, 2073, "Job is no longer pending execution"),
            ErrorKind::JobNotPending
        );
        assert_eq!(
            k(500, 0, "job is no longer pending execution"),
            ErrorKind::JobNotPending
        );
        assert_eq!(
            k(511, 1007, "Protocol authentication error"),
            ErrorKind::Authentication
        );
        assert_eq!(
            k(
                500,
                2036,
                "Requested operation not supported on this system"
            ),
            ErrorKind::InvalidRequest
        );
        assert_eq!(
            k(500, 1800, "Unable to contact slurm controller"),
            ErrorKind::Transient
        );
        assert_eq!(k(502, 0, "bad gateway"), ErrorKind::Transient);
        assert_eq!(k(401, 0, ""), ErrorKind::Authentication);
        assert_eq!(k(500, 4242, "?"), ErrorKind::Other);
    }

    #[test]
    fn keeps_slurm_entries_status_and_text() {
        let e = Error::from_response(
            "GET /slurm/v0.0.44/job/9",
            404,
            &body(2017, "Invalid job id specified"),
        );
        assert_eq!(e.http_status(), Some(404));
        assert_eq!(e.slurm_errors().len(), 1);
        assert_eq!(e.slurm_errors()[0].error_number, Some(2017));
        assert_eq!(e.warnings().len(), 1);
        assert!(e.has_error_number(errno::INVALID_JOB_ID));
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(text.contains("Invalid job id specified"), "{text}");
        assert!(text.contains("HTTP 404"), "{text}");
        assert!(text.contains("2017"), "{text}");
    }

    #[test]
    fn errors_for_fakes_classify_like_real_answers() {
        let entry = SlurmErrorEntry {
            error_number: Some(errno::JOB_NOT_PENDING),
            error: Some("Job is no longer pending execution".into()),
            ..Default::default()
        };
        let e = Error::from_slurm("POST /slurm/v0.0.44/job/5", 422, vec![entry]);
        assert_eq!(e.kind(), ErrorKind::JobNotPending);
        assert_eq!(e.http_status(), Some(422));
        assert!(e.to_string().contains("no longer pending"), "{e}");
        let e = Error::from_slurm("DELETE /slurm/v0.0.44/node/x", 404, vec![]);
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = Error::synthetic(ErrorKind::Transient, "connection refused");
        assert!(e.is_transient());
        assert_eq!(e.to_string(), "connection refused");
        assert_eq!(e.http_status(), None);
    }

    #[test]
    fn invalid_node_name_depends_on_the_call() {
        let b = body(errno::INVALID_NODE_NAME, "Invalid node name specified");
        let node = Error::from_response("DELETE /slurm/v0.0.44/node/x", 422, &b);
        assert_eq!(node.kind(), ErrorKind::NotFound);
        let job = Error::from_response("POST /slurm/v0.0.44/job/5", 422, &b);
        assert_eq!(job.kind(), ErrorKind::InvalidRequest);
    }

    #[test]
    fn non_json_bodies_keep_their_text() {
        let e = Error::from_response("GET /x", 401, b"Authentication failure");
        assert_eq!(e.kind(), ErrorKind::Authentication);
        assert!(e.to_string().contains("Authentication failure"));
        let e = Error::from_response("GET /x", 503, b"");
        assert!(e.is_transient());
        assert!(e.to_string().contains("Service Unavailable"), "{e}");
    }
}
