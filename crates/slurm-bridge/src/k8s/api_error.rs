//! Short text for Kubernetes API errors. kube's own `Display` of an API error repeats the whole
//! `Status` in debug form, which is noise in a pod condition, an Event or a log line.

use std::fmt;

/// Displays a [`kube::Error`] briefly: an API error as its message, reason and HTTP code.
pub struct Brief<'a>(pub &'a kube::Error);

impl fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            kube::Error::Api(s) if !s.message.is_empty() => {
                write!(f, "{} ({}, HTTP {})", s.message, s.reason, s.code)
            }
            e => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_show_message_reason_and_code_once() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "pods \"p\" is forbidden: denied",
        }))
        .unwrap();
        let e = kube::Error::Api(Box::new(status));
        assert_eq!(
            Brief(&e).to_string(),
            "pods \"p\" is forbidden: denied (Invalid, HTTP 422)"
        );
    }
}
