//! Leader election on a `coordination.k8s.io` Lease, so two replicas never act twice.
//!
//! kube-lease-manager acquires and renews the Lease. It notices that it lost the Lease only at its
//! next renewal, and while the API server cannot be reached it keeps saying "leader" past the
//! Lease's expiry, when another replica may already lead. So this replica also watches the Lease
//! and counts as leader only while the Lease, as last seen, names it and has not come within
//! [`STAND_DOWN_BEFORE_EXPIRY`] of its expiry: a Lease taken by another replica ends leadership
//! as soon as the change is seen, and unconfirmed renewals end it before anyone else can take
//! over (as client-go's renew deadline does).

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::LeaseManagerBuilder;
use std::time::{Duration, SystemTime};
use tokio::sync::{oneshot, watch};

/// Lease duration: another replica may take over this long after the last renewal.
pub const LEASE_SECONDS: u64 = 15;
/// The holder renews this long before the Lease would expire (every 8 s).
pub const RENEW_BEFORE_EXPIRY_SECONDS: u64 = 7;
/// Leadership ends this long before the expiry of the last renewal seen, unless a newer one is
/// seen by then: 4 s for a renewal to land, 3 s for in-flight work to be stopped (and for clock
/// skew) before another replica may take the Lease.
pub const STAND_DOWN_BEFORE_EXPIRY: Duration = Duration::from_secs(3);

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaderError {
    namespace: String,
    name: String,
    #[source]
    source: kube_lease_manager::LeaseManagerError,
}

/// Which Lease to compete for, and as whom.
#[derive(Clone, Debug)]
pub struct LeaseSpec {
    pub namespace: String,
    pub name: String,
    pub identity: String,
}

/// This replica's leadership: [`Leadership::receiver`] is true while it leads.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    release: Option<oneshot::Sender<()>>,
    elector: Option<tokio::task::JoinHandle<()>>,
    /// Without leader election: keeps the constant `true` channel open.
    _always: Option<watch::Sender<bool>>,
}

impl Leadership {
    /// Leader election turned off: this replica leads from the start and for ever.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        Leadership {
            leading: rx,
            release: None,
            elector: None,
            _always: Some(tx),
        }
    }

    /// True while this replica leads.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Stops competing and gives the Lease up, so a standby takes over at once instead of after
    /// the Lease expires. Call it only once nothing acts on this replica's leadership any more.
    /// Dropping a `Leadership` releases the Lease too, without waiting for it.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(elector) = self.elector.take()
            && tokio::time::timeout(Duration::from_secs(5), elector)
                .await
                .is_err()
        {
            tracing::warn!("the leader Lease was not released within 5 s; it expires on its own");
        }
    }
}

/// Starts competing for the Lease `namespace/name` as `identity` (see the module documentation).
/// Needs get, create, patch, list and watch on Leases in `namespace`.
pub async fn elect(
    client: kube::Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> Result<Leadership, LeaderError> {
    let manager = LeaseManagerBuilder::new(client.clone(), name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(RENEW_BEFORE_EXPIRY_SECONDS)
        .build()
        .await
        .map_err(|source| LeaderError {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
    let (held, manager_task) = manager.watch().await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(client, namespace);
    let lease_events = watcher(
        leases,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff();
    let (tx, rx) = watch::channel(false);
    let (release_tx, release_rx) = oneshot::channel();
    let identity = identity.to_string();
    let elector = tokio::spawn(async move {
        follow(held, lease_events, &identity, &tx, release_rx).await;
        tx.send_replace(false);
        // Nothing reads the manager's channel any more: it releases the Lease (if held) and ends.
        match manager_task.await {
            Ok(Ok(_)) => tracing::info!("leader Lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader Lease failed"),
            Err(e) => tracing::error!(error = %e, "leader election task failed"),
        }
    });
    Ok(Leadership {
        leading: rx,
        release: Some(release_tx),
        elector: Some(elector),
        _always: None,
    })
}

/// Publishes on `tx` whether this replica leads, from the manager's view (`held`) and the Lease
/// as watched, until a release is asked for (or the [`Leadership`] dropped) or the manager stops.
async fn follow(
    mut held: watch::Receiver<bool>,
    lease_events: impl futures::Stream<Item = Result<watcher::Event<Lease>, watcher::Error>>,
    identity: &str,
    tx: &watch::Sender<bool>,
    mut release: oneshot::Receiver<()>,
) {
    let mut lease_events = std::pin::pin!(lease_events);
    // Until when the Lease, as last seen, is ours.
    let mut ours_until: Option<SystemTime> = None;
    loop {
        let now = SystemTime::now();
        let leading = leads(*held.borrow_and_update(), ours_until, now);
        tx.send_if_modified(|l| {
            let changed = *l != leading;
            if changed {
                *l = leading;
                tracing::info!(leader = leading, "leadership changed");
            }
            changed
        });
        // While leading: look again when leadership would end without a newer renewal.
        let stand_down = ours_until
            .filter(|_| leading)
            .and_then(|until| until.duration_since(now).ok())
            .map(|d| d.saturating_sub(STAND_DOWN_BEFORE_EXPIRY));
        tokio::select! {
            _ = &mut release => return,
            changed = held.changed() => if changed.is_err() {
                tracing::error!("leader election stopped: this replica no longer competes");
                return;
            },
            event = lease_events.next() => match event {
                Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                    ours_until = held_until(&lease, identity);
                }
                Some(Ok(watcher::Event::Delete(_))) => ours_until = None,
                Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "watching the leader Lease failed; retrying"),
                None => return,
            },
            _ = tokio::time::sleep(stand_down.unwrap_or_default()), if stand_down.is_some() => {
                tracing::warn!("the leader Lease was not renewed in time; standing down");
            }
        }
    }
}

/// Until when `lease` is held by `identity`: its last renewal plus its duration (`None` when
/// another identity or nobody holds it).
pub fn held_until(lease: &Lease, identity: &str) -> Option<SystemTime> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = SystemTime::from(spec.renew_time.as_ref()?.0);
    let seconds = u64::try_from(spec.lease_duration_seconds?).ok()?;
    renewed.checked_add(Duration::from_secs(seconds))
}

/// Whether this replica leads at `now`: the manager says it holds the Lease, and the Lease as last
/// seen names it and is not within [`STAND_DOWN_BEFORE_EXPIRY`] of expiring.
pub fn leads(manager_holds: bool, ours_until: Option<SystemTime>, now: SystemTime) -> bool {
    manager_holds
        && ours_until
            .and_then(|until| until.checked_sub(STAND_DOWN_BEFORE_EXPIRY))
            .is_some_and(|deadline| now < deadline)
}

/// Waits until `leader` (a [`Leadership::receiver`]) reads `want`; never returns if it cannot
/// change any more. The scheduler's and the controllers' leadership loops wait with it.
pub async fn until_leadership(leader: &mut watch::Receiver<bool>, want: bool) {
    if leader.wait_for(|l| *l == want).await.is_err() {
        std::future::pending::<()>().await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: SystemTime, seconds: i32) -> Lease {
        let renew = k8s_openapi::jiff::Timestamp::try_from(renewed).expect("timestamp");
        Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    renew,
                )),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_ours_until_its_last_renewal_plus_its_duration() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            held_until(&lease(Some("me"), t, 15), "me"),
            Some(t + Duration::from_secs(15))
        );
        assert_eq!(held_until(&lease(Some("other"), t, 15), "me"), None);
        assert_eq!(held_until(&lease(None, t, 15), "me"), None);
        assert_eq!(held_until(&Lease::default(), "me"), None);
    }

    #[test]
    fn leadership_needs_the_manager_and_a_lease_not_about_to_expire() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let until = Some(t + Duration::from_secs(15));
        assert!(leads(true, until, t));
        assert!(leads(true, until, t + Duration::from_secs(11)));
        // Renewals not seen: leadership ends before the Lease expires, so before anyone else
        // may take it.
        assert!(!leads(true, until, t + Duration::from_secs(12)));
        assert!(!leads(true, until, t + Duration::from_secs(20)));
        // The manager lost the Lease, or the Lease names someone else.
        assert!(!leads(false, until, t));
        assert!(!leads(true, None, t));
    }
}
