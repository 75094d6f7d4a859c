//! Leader election on a `coordination.k8s.io` Lease, so two replicas never act twice.

use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaderError {
    namespace: String,
    name: String,
    #[source]
    source: kube_lease_manager::LeaseManagerError,
}

/// Starts competing for the Lease `namespace/name` as `identity`; the receiver is true while this
/// process leads. Lease duration 15 s, renewed well before it ends.
pub async fn elect(
    client: kube::Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> Result<watch::Receiver<bool>, LeaderError> {
    let manager = LeaseManagerBuilder::new(client, name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .map_err(|source| LeaderError {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
    let (rx, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "leader election stopped"),
            Err(e) => tracing::error!(error = %e, "leader election task failed"),
        }
    });
    Ok(rx)
}

/// This process's identity for leader election: the pod name when set, else host name and PID.
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{host}-{}", std::process::id())
}
