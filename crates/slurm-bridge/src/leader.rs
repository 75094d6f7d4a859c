//! Leader election on a `coordination.k8s.io` Lease, so two replicas never act twice.
//!
//! kube-lease-manager acquires and renews the Lease. It notices that it lost the Lease only at its
//! next renewal, and while the API server cannot be reached it keeps saying "leader" past the
//! Lease's expiry, when another replica may already lead. So this replica also watches the Lease
//! and counts as leader only while the Lease, as last seen, names it and has not come within
//! [`STAND_DOWN_BEFORE_EXPIRY`] of its expiry: a Lease taken by another replica ends leadership
//! as soon as the change is seen, and unconfirmed renewals end it before anyone else can take
//! over (as client-go's renew deadline does).
//!
//! Our own deadline is kept on the monotonic clock ([`Instant`]): each renewal seen is turned
//! into "this long from now" once, when it is seen, so a later step of the wall clock neither
//! stretches nor shortens it. The Lease's renewTime stays wall-clock, as other replicas read it.
//! [`Fence`] carries that deadline to every write path: a write is sent only while it holds.

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::LeaseManagerBuilder;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
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
    fence: Fence,
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
            fence: Fence::open(),
            release: None,
            elector: None,
            _always: Some(tx),
        }
    }

    /// True while this replica leads.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// The write fence of this leadership: open only while this replica leads and its
    /// monotonic deadline holds (always open without leader election).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
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
    let fence = Fence::closed();
    let (release_tx, release_rx) = oneshot::channel();
    let identity = identity.to_string();
    let follow_fence = fence.clone();
    let elector = tokio::spawn(async move {
        follow(
            held,
            lease_events,
            &identity,
            &tx,
            &follow_fence,
            release_rx,
        )
        .await;
        follow_fence.close();
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
        fence,
        release: Some(release_tx),
        elector: Some(elector),
        _always: None,
    })
}

/// Publishes on `tx` (and in `fence`) whether this replica leads, from the manager's view
/// (`held`) and the Lease as watched, until a release is asked for (or the [`Leadership`]
/// dropped) or the manager stops.
async fn follow(
    mut held: watch::Receiver<bool>,
    lease_events: impl futures::Stream<Item = Result<watcher::Event<Lease>, watcher::Error>>,
    identity: &str,
    tx: &watch::Sender<bool>,
    fence: &Fence,
    mut release: oneshot::Receiver<()>,
) {
    let mut lease_events = std::pin::pin!(lease_events);
    // The last renewal of ours seen, and the monotonic instant leadership ends without a newer one.
    let mut seen: Option<Renewal> = None;
    let mut deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let leading = leads(*held.borrow_and_update(), deadline, now);
        fence.set(deadline.filter(|_| leading));
        tx.send_if_modified(|l| {
            let changed = *l != leading;
            if changed {
                *l = leading;
                tracing::info!(leader = leading, "leadership changed");
            }
            changed
        });
        // While leading: look again when leadership would end without a newer renewal.
        let stand_down = deadline
            .filter(|_| leading)
            .map(|d| d.saturating_duration_since(now));
        tokio::select! {
            _ = &mut release => return,
            changed = held.changed() => if changed.is_err() {
                tracing::error!("leader election stopped: this replica no longer competes");
                return;
            },
            event = lease_events.next() => match event {
                Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                    let renewal = held_until(&lease, identity);
                    // The same renewal seen again (a relist) keeps its deadline: only a newer
                    // renewal moves it, so a wall clock stepped back cannot stretch it.
                    if renewal != seen {
                        deadline = renewal.map(|r| r.deadline(SystemTime::now(), Instant::now()));
                        seen = renewal;
                    }
                }
                Some(Ok(watcher::Event::Delete(_))) => (seen, deadline) = (None, None),
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

/// A renewal of the Lease by this replica, as the Lease records it (wall clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The Lease's renewTime.
    pub renewed: SystemTime,
    /// The Lease's leaseDurationSeconds.
    pub duration: Duration,
}

impl Renewal {
    /// The monotonic instant this replica stops leading unless a newer renewal is seen: the
    /// time left until the Lease expires by the wall clock (`wall_now`), counted from
    /// `mono_now`, at most the Lease duration (a wall clock behind renewTime grants no more),
    /// less [`STAND_DOWN_BEFORE_EXPIRY`]. Computed once per renewal, when it is seen.
    pub fn deadline(&self, wall_now: SystemTime, mono_now: Instant) -> Instant {
        let expires = self.renewed + self.duration;
        let left = expires
            .duration_since(wall_now)
            .unwrap_or_default()
            .min(self.duration);
        match left.checked_sub(STAND_DOWN_BEFORE_EXPIRY) {
            Some(d) => mono_now + d,
            None => mono_now,
        }
    }
}

/// The renewal of `lease` by `identity` (`None` when another identity or nobody holds it, or it
/// has no renewTime or duration).
pub fn held_until(lease: &Lease, identity: &str) -> Option<Renewal> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = SystemTime::from(spec.renew_time.as_ref()?.0);
    let seconds = u64::try_from(spec.lease_duration_seconds?).ok()?;
    Some(Renewal {
        renewed,
        duration: Duration::from_secs(seconds),
    })
}

/// Whether this replica leads at `now`: the manager says it holds the Lease, and the monotonic
/// `deadline` of the last renewal seen ([`Renewal::deadline`]) has not passed.
pub fn leads(manager_holds: bool, deadline: Option<Instant>, now: Instant) -> bool {
    manager_holds && deadline.is_some_and(|d| now < d)
}

/// Labels of the write counter: `target` (`kubernetes` or `slurm`) and `outcome` (`sent`:
/// passed the fence, `fenced`: refused, never sent).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FenceLabels {
    pub target: &'static str,
    pub outcome: &'static str,
}

/// A write refused by the [`Fence`]: it was never sent.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "not sent: this replica no longer holds the leader Lease (fenced {target} write; another replica may lead)"
)]
pub struct Fenced {
    /// `kubernetes` or `slurm`.
    pub target: &'static str,
}

/// The write fence: every Kubernetes and Slurm write of the scheduler and the controllers checks
/// it right before it is sent. It is open only until the monotonic deadline of the last renewal
/// of the Lease seen, so a replica resumed after a pause past its Lease (SIGSTOP, a stalled VM)
/// sends nothing on what it believed before, even before its tasks notice the loss.
#[derive(Clone, Debug)]
pub struct Fence {
    state: Arc<Mutex<FenceState>>,
    writes: Family<FenceLabels, Counter>,
}

#[derive(Debug)]
enum FenceState {
    /// Without leader election: always open.
    Open,
    /// Open until this instant; `None`: closed.
    Until(Option<Instant>),
}

impl Fence {
    /// A fence that is always open (no leader election).
    pub fn open() -> Fence {
        Fence::with(FenceState::Open)
    }

    /// A fence that is closed until [`Fence::set`] opens it.
    pub fn closed() -> Fence {
        Fence::with(FenceState::Until(None))
    }

    fn with(state: FenceState) -> Fence {
        Fence {
            state: Arc::new(Mutex::new(state)),
            writes: Family::default(),
        }
    }

    /// Opens the fence until `deadline` (monotonic), or closes it (`None`). A fence made by
    /// [`Fence::open`] stays open.
    pub fn set(&self, deadline: Option<Instant>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let FenceState::Until(d) = &mut *s {
            *d = deadline;
        }
    }

    /// Closes the fence for good (leader election stopped).
    pub fn close(&self) {
        self.set(None);
    }

    /// True when a write may be sent at `now`.
    pub fn is_open_at(&self, now: Instant) -> bool {
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            FenceState::Open => true,
            FenceState::Until(d) => d.is_some_and(|d| now < d),
        }
    }

    /// Call right before sending a write to `target` (`kubernetes` or `slurm`): `Ok` while the
    /// fence is open; else the refusal, logged. Both are counted.
    pub fn check(&self, target: &'static str) -> Result<(), Fenced> {
        let open = self.is_open_at(Instant::now());
        let outcome = if open { "sent" } else { "fenced" };
        self.writes
            .get_or_create(&FenceLabels { target, outcome })
            .inc();
        if open {
            return Ok(());
        }
        tracing::warn!(
            target_system = target,
            "write not sent: this replica no longer holds the leader Lease"
        );
        Err(Fenced { target })
    }

    /// Writes to `target` refused so far.
    pub fn refused(&self, target: &'static str) -> u64 {
        self.count(target, "fenced")
    }

    /// Writes to `target` that passed the fence so far.
    pub fn sent(&self, target: &'static str) -> u64 {
        self.count(target, "sent")
    }

    fn count(&self, target: &'static str, outcome: &'static str) -> u64 {
        self.writes
            .get_or_create(&FenceLabels { target, outcome })
            .get()
    }

    /// Registers `slurm_bridge_leader_writes_total{target,outcome}` in `registry`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.sub_registry_with_prefix("slurm_bridge").register(
            "leader_writes",
            "Writes of the scheduler and the controllers: sent (the leader fence was open) or fenced (not sent: the leader Lease was lost)",
            self.writes.clone(),
        );
    }
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
    fn a_lease_is_ours_from_its_last_renewal_for_its_duration() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            held_until(&lease(Some("me"), t, 15), "me"),
            Some(Renewal {
                renewed: t,
                duration: Duration::from_secs(15)
            })
        );
        assert_eq!(held_until(&lease(Some("other"), t, 15), "me"), None);
        assert_eq!(held_until(&lease(None, t, 15), "me"), None);
        assert_eq!(held_until(&Lease::default(), "me"), None);
    }

    #[test]
    fn the_deadline_is_the_time_left_on_the_lease_counted_on_the_monotonic_clock() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let m = Instant::now();
        let r = Renewal {
            renewed: t,
            duration: Duration::from_secs(15),
        };
        let s = |secs: u64| Duration::from_secs(secs);
        // (wall clock when the renewal is seen, deadline after the monotonic instant it is seen)
        let table = [
            // Seen at once: 15 s left, less the 3 s stand-down.
            (t, s(12)),
            // Seen 2 s late (slow watch): 13 s left.
            (t + s(2), s(10)),
            // Seen within the stand-down margin or after expiry: already over.
            (t + s(13), s(0)),
            (t + s(60), s(0)),
            // Our wall clock behind renewTime (skew, or a step back before it was seen): never
            // more than the Lease duration.
            (t - s(3600), s(12)),
        ];
        for (wall, after) in table {
            assert_eq!(r.deadline(wall, m), m + after, "seen at {wall:?}");
        }
    }

    #[test]
    fn a_wall_clock_step_after_a_renewal_is_seen_neither_stretches_nor_shortens_leadership() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let m = Instant::now();
        let deadline = Some(
            Renewal {
                renewed: t,
                duration: Duration::from_secs(15),
            }
            .deadline(t, m),
        );
        // `leads` reads the monotonic clock only: whatever the wall clock does later, leadership
        // ends 12 s (monotonic) after the renewal was seen.
        for (after, want) in [(0, true), (11, true), (12, false), (3600, false)] {
            assert_eq!(
                leads(true, deadline, m + Duration::from_secs(after)),
                want,
                "{after} s after the renewal"
            );
        }
    }

    #[test]
    fn leadership_needs_the_manager_and_a_deadline_not_passed() {
        let m = Instant::now();
        let d = Some(m + Duration::from_secs(12));
        assert!(leads(true, d, m));
        assert!(!leads(false, d, m));
        assert!(!leads(true, None, m));
    }

    #[test]
    fn a_fence_is_open_only_until_its_deadline() {
        let m = Instant::now();
        let f = Fence::closed();
        assert!(!f.is_open_at(m), "closed until leadership is gained");
        f.set(Some(m + Duration::from_secs(12)));
        let table = [(0, true), (11, true), (12, false), (100, false)];
        for (after, open) in table {
            assert_eq!(
                f.is_open_at(m + Duration::from_secs(after)),
                open,
                "{after} s"
            );
        }
        f.close();
        assert!(!f.is_open_at(m));
        assert!(Fence::open().is_open_at(m + Duration::from_secs(1_000_000)));
        let always = Fence::open();
        always.close();
        assert!(
            always.is_open_at(m),
            "without leader election it never closes"
        );
    }

    #[test]
    fn a_refused_write_is_counted_and_names_what_was_refused() {
        let f = Fence::closed();
        let e = f.check("slurm").unwrap_err();
        assert!(e.to_string().contains("leader Lease"), "{e}");
        assert_eq!(f.refused("slurm"), 1);
        assert_eq!(f.refused("kubernetes"), 0);
        assert_eq!(f.sent("slurm"), 0);
        f.set(Some(Instant::now() + Duration::from_secs(60)));
        assert!(f.check("kubernetes").is_ok());
        assert_eq!(f.sent("kubernetes"), 1);
    }
}
