//! Small helpers of the agent: the field manager, timestamps, a SHA-1 for fake IDs,
//! API-error classification and a bounded retry for writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{PatchParams, PostParams};

/// Field manager of every write the agent makes.
pub const FIELD_MANAGER: &str = "kube-testenv-agent";

/// Patch parameters with the agent's field manager.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Create parameters with the agent's field manager.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The current wall-clock time as a Kubernetes `Time` (whole seconds on the wire).
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The current wall-clock time as a Kubernetes `MicroTime` (six fractional digits).
pub fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Lower-case hex SHA-1 of `input`, for container and image IDs (fake IDs, never security).
pub fn sha1_hex(input: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, input.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// True when the error is the API server's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// True when the error is the API server's 409 AlreadyExists (not a resourceVersion conflict).
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// True for errors a retry cannot fix (4xx other than 409 conflict and 429).
pub fn is_permanent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// Evaluate the API call `$call` (a future expression, re-created per attempt) up to 5 times
/// with a short exponential backoff while it fails with a retriable error.
macro_rules! retry {
    ($call:expr) => {{
        let mut delay = std::time::Duration::from_millis(50);
        let mut attempt = 0u32;
        loop {
            match $call.await {
                Ok(v) => break Ok(v),
                Err(e) if attempt >= 4 || $crate::agent::util::is_permanent(&e) => break Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
    }};
}
pub(crate) use retry;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_known_vectors() {
        assert_eq!(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    #[test]
    fn timestamps_have_the_wire_formats_go_parses() {
        // metav1.Time: RFC 3339 in seconds; metav1.MicroTime: exactly six fractional digits.
        let t = serde_json::to_value(now()).unwrap();
        let t = t.as_str().unwrap();
        assert_eq!(t.len(), "2024-01-02T03:04:05Z".len(), "{t}");
        assert!(t.ends_with('Z'));
        let m = serde_json::to_value(now_micro()).unwrap();
        let m = m.as_str().unwrap();
        assert_eq!(m.len(), "2024-01-02T03:04:05.123456Z".len(), "{m}");
        assert_eq!(&m[19..20], ".");
    }
}
