//! Whether the job id label can ride on the Binding: since Kubernetes 1.35 kube-apiserver
//! copies a Binding's labels onto the pod as it binds it (feature gate
//! `PodTopologyLabelsAdmission`, beta and on by default; `setPodNodeAndMetadata` in the pod
//! registry), so a pod whose label patch has not gone out yet when its job is allocated gets
//! label and node in one write instead of two. Learned from the server's version on the first
//! bind, and turned off for good the first time the pod cache shows a pod this writer bound
//! with the label without it (the gate turned off, or an older API server behind the address):
//! that pod is labelled by a patch, as every pod after it.

use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::OnceCell;

/// The first Kubernetes minor version whose API server copies Binding labels by default.
const FIRST_MINOR: u32 = 35;

/// What this writer knows of the API server's handling of Binding labels.
#[derive(Default)]
pub(super) struct BindingLabels {
    /// From the server's version, asked once.
    by_version: OnceCell<bool>,
    /// A pod bound with the label showed up without it.
    dropped: AtomicBool,
}

impl BindingLabels {
    /// Whether a Binding may carry the job id label in place of a patch.
    pub(super) async fn carried(&self, client: &Client) -> bool {
        if self.dropped.load(Ordering::Relaxed) {
            return false;
        }
        let asked = self
            .by_version
            .get_or_try_init(|| async {
                let info = client.apiserver_version().await?;
                let copies = copies_labels(&info);
                tracing::info!(
                    version = %info.git_version,
                    binding_labels = copies,
                    "API server version: the job id label {} on the Binding",
                    if copies { "rides" } else { "is patched before binding, never" }
                );
                Ok::<_, kube::Error>(copies)
            })
            .await;
        match asked {
            Ok(copies) => *copies,
            // Not remembered: asked again on the next bind.
            Err(e) => {
                tracing::debug!(error = %super::super::api_error::Brief(&e),
                    "API server version unknown; labelling before binding");
                false
            }
        }
    }

    /// A pod bound with the label showed up without it: labels are patched from now on.
    /// Returns true the first time.
    pub(super) fn dropped(&self) -> bool {
        !self.dropped.swap(true, Ordering::Relaxed)
    }

    /// As if the server had answered with `minor` (tests).
    #[cfg(test)]
    pub(super) fn assume(minor: u32) -> Self {
        BindingLabels {
            by_version: OnceCell::new_with(Some(minor >= FIRST_MINOR)),
            dropped: AtomicBool::new(false),
        }
    }
}

/// True for Kubernetes 1.35 and later. Providers suffix the minor ("35+"); an unreadable
/// version counts as an old one.
fn copies_labels(info: &Info) -> bool {
    let minor: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    info.major == "1" && minor.parse::<u32>().is_ok_and(|m| m >= FIRST_MINOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            ..Default::default()
        }
    }

    #[test]
    fn from_kubernetes_1_35_on() {
        for (major, minor, copies) in [
            ("1", "36", true),
            ("1", "35", true),
            ("1", "35+", true),
            ("1", "34", false),
            ("1", "9", false),
            ("1", "", false),
            ("", "", false),
            ("2", "0", false),
        ] {
            assert_eq!(
                copies_labels(&info(major, minor)),
                copies,
                "{major}.{minor}"
            );
        }
    }

    #[tokio::test]
    async fn dropped_once_off_for_good() {
        let client = Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("URL"),
        ))
        .expect("client");
        let b = BindingLabels::assume(36);
        assert!(b.carried(&client).await);
        assert!(b.dropped(), "the first drop is news");
        assert!(!b.dropped());
        assert!(!b.carried(&client).await);
        // No server at that address: the version is unknown, so no label rides.
        assert!(!BindingLabels::default().carried(&client).await);
    }
}
