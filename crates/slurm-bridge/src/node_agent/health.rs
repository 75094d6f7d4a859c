//! What the node agent's `/readyz` and `/metrics` say (docs/hybrid.md, "The node agent").
//!
//! Ready means the agent is doing its job on this node right now:
//!
//! - it is registered with containerd's NRI and has answered that connection's Synchronize
//!   (re-pinned the running containers), until that connection ends (containerd restarted, or
//!   dropped the plugin after a late answer); containerd passes container creations to the
//!   agent only once it has synchronized, and not at all between connections, so the agent is
//!   not ready until it has reconnected, registered and synchronized again;
//! - with `--dra-cpu`, also: the kubelet registered its `dra.cpu` plugin (NotifyRegistrationStatus
//!   said registered; the kubelet does not say when it forgets a plugin, so this stays true
//!   once seen), and the last check of the node's `dra.cpu` ResourceSlices succeeded (published
//!   or already up to date).
//!
//! `/readyz` answers 503 with the first reason that holds.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Why the agent is not ready before it has connected to containerd.
const NOT_REGISTERED: &str = "not registered with containerd's NRI yet";
/// Why after a registered connection ended.
const DISCONNECTED: &str =
    "the NRI connection to containerd ended (containerd restarted?); reconnecting";
/// Why between registration and the answer to the runtime's Synchronize.
const SYNCHRONIZING: &str =
    "registered with containerd's NRI, still synchronizing its running containers";

/// Where the agent's connection to containerd's NRI stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Nri {
    /// No registered connection.
    #[default]
    Down,
    /// Registered; the runtime's Synchronize not answered yet.
    Registered,
    /// Registered and synchronized: the runtime passes container events to the agent.
    Synchronized,
}

impl Nri {
    /// The connection's state from the runtime handle's two watches.
    pub fn of(registered: bool, synchronized: bool) -> Nri {
        match (registered, synchronized) {
            (true, true) => Nri::Synchronized,
            (true, false) => Nri::Registered,
            (false, _) => Nri::Down,
        }
    }
}

/// The parts of readiness, as the agent last saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    /// The NRI connection now.
    nri: Nri,
    /// Registered at least once before (so not registered now means disconnected).
    nri_was: bool,
    /// `Some` with `--dra-cpu`.
    dra: Option<DraState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DraState {
    kubelet_registered: bool,
    /// `None` before the first check of the slices; the error of the last check otherwise.
    slices: Option<Result<(), String>>,
}

impl State {
    fn not_ready(&self) -> Option<String> {
        match self.nri {
            Nri::Down if self.nri_was => return Some(DISCONNECTED.into()),
            Nri::Down => return Some(NOT_REGISTERED.into()),
            Nri::Registered => return Some(SYNCHRONIZING.into()),
            Nri::Synchronized => {}
        }
        let dra = self.dra.as_ref()?;
        if !dra.kubelet_registered {
            return Some("the kubelet has not registered the dra.cpu plugin yet".into());
        }
        match &dra.slices {
            None => Some("the dra.cpu ResourceSlices are not published yet".into()),
            Some(Err(e)) => Some(format!("the dra.cpu ResourceSlices: {e}")),
            Some(Ok(())) => None,
        }
    }
}

/// The agent's readiness: fed by the NRI connection and the `dra.cpu` plugin, read by the
/// probe server ([`Health::not_ready`]). Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Health {
    state: Arc<Mutex<State>>,
    reason: Arc<watch::Sender<Option<String>>>,
}

impl Health {
    /// Not ready until registered with NRI and synchronized; with `dra_cpu`, also until the
    /// kubelet registered the plugin and the slices are published.
    pub fn new(dra_cpu: bool) -> Health {
        let state = State {
            dra: dra_cpu.then(DraState::default),
            ..State::default()
        };
        Health {
            reason: Arc::new(watch::Sender::new(state.not_ready())),
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// `None` while ready, else why not: what `/readyz` serves.
    pub fn not_ready(&self) -> watch::Receiver<Option<String>> {
        self.reason.subscribe()
    }

    /// True while ready.
    pub fn is_ready(&self) -> bool {
        self.reason.borrow().is_none()
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut state);
        let reason = state.not_ready();
        self.reason.send_if_modified(|r| {
            if *r == reason {
                return false;
            }
            match &reason {
                None => tracing::info!("node agent ready"),
                Some(why) => tracing::info!(%why, "node agent not ready"),
            }
            *r = reason;
            true
        });
    }

    /// Where the connection to containerd's NRI stands now.
    pub fn set_nri(&self, nri: Nri) {
        self.update(|s| {
            s.nri = nri;
            s.nri_was |= nri != Nri::Down;
        });
    }

    /// The kubelet registered the `dra.cpu` plugin.
    pub fn set_kubelet_registered(&self) {
        self.update(|s| {
            if let Some(d) = s.dra.as_mut() {
                d.kubelet_registered = true;
            }
        });
    }

    /// The outcome of the last check of the `dra.cpu` ResourceSlices.
    pub fn set_slices(&self, outcome: Result<(), String>) {
        self.update(|s| {
            if let Some(d) = s.dra.as_mut() {
                d.slices = Some(outcome);
            }
        });
    }
}

/// The node agent's metrics (`slurm_bridge_node_agent_*`).
#[derive(Clone, Default)]
pub struct Metrics {
    /// Containers pinned at creation to a job's (or claim's, or the unmanaged) CPUs.
    pub containers_pinned: Counter,
    /// Containers whose creation the agent refused (their job could not be confirmed).
    pub containers_refused: Counter,
    /// Running containers re-pinned when the runtime (re)connected (synchronization).
    pub containers_repinned: Counter,
    /// Pins that fell back on a pod's last pin (its job could not be confirmed then).
    pub last_pins_kept: Counter,
    /// Registrations with containerd's NRI (the first, then one per reconnection).
    pub nri_registrations: Counter,
    /// 1 while registered with containerd's NRI, 0 otherwise.
    pub nri_registered: Gauge,
}

impl Metrics {
    pub const PREFIX: &'static str = "slurm_bridge_node_agent";

    /// The metrics, registered in `registry` under [`Metrics::PREFIX`].
    pub fn new(registry: &mut Registry) -> Arc<Metrics> {
        let r = registry.sub_registry_with_prefix(Self::PREFIX);
        let m = Metrics::default();
        r.register(
            "containers_pinned",
            "Containers pinned at creation to their Slurm job's, claim's or the unmanaged CPUs",
            m.containers_pinned.clone(),
        );
        r.register(
            "containers_refused",
            "Containers whose creation the agent refused (their Slurm job could not be confirmed)",
            m.containers_refused.clone(),
        );
        r.register(
            "containers_repinned",
            "Running containers re-pinned when containerd (re)connected the agent",
            m.containers_repinned.clone(),
        );
        r.register(
            "last_pins_kept",
            "Pins that kept a pod's last CPUs because its Slurm job could not be confirmed",
            m.last_pins_kept.clone(),
        );
        r.register(
            "nri_registrations",
            "Registrations with containerd's NRI (one per connection)",
            m.nri_registrations.clone(),
        );
        r.register(
            "nri_registered",
            "1 while the agent is registered with containerd's NRI",
            m.nri_registered.clone(),
        );
        Arc::new(m)
    }
}

/// Follows the NRI connection (`registered`, `synchronized`: the runtime handle's watches) into
/// `health` and `metrics` until either watch's sender is gone.
pub async fn follow_nri(
    mut registered: watch::Receiver<bool>,
    mut synchronized: watch::Receiver<bool>,
    health: Health,
    metrics: Arc<Metrics>,
) {
    let mut was = false;
    loop {
        let now = *registered.borrow_and_update();
        let synced = *synchronized.borrow_and_update();
        if now && !was {
            metrics.nri_registrations.inc();
        }
        metrics.nri_registered.set(i64::from(now));
        health.set_nri(Nri::of(now, synced));
        was = now;
        let changed = tokio::select! {
            r = registered.changed() => r,
            s = synchronized.changed() => s,
        };
        if changed.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ready_only_while_registered_with_nri_and_synchronized() {
        let h = Health::new(false);
        let reason = h.not_ready();
        assert_eq!(reason.borrow().as_deref(), Some(NOT_REGISTERED));
        h.set_nri(Nri::Registered);
        assert_eq!(reason.borrow().as_deref(), Some(SYNCHRONIZING));
        h.set_nri(Nri::Synchronized);
        assert!(h.is_ready());
        assert_eq!(*reason.borrow(), None);
        // containerd restarted: not ready, saying so, until registered and synchronized again.
        h.set_nri(Nri::Down);
        assert_eq!(reason.borrow().as_deref(), Some(DISCONNECTED));
        h.set_nri(Nri::Registered);
        assert_eq!(reason.borrow().as_deref(), Some(SYNCHRONIZING));
        h.set_nri(Nri::Synchronized);
        assert!(h.is_ready());
    }

    #[test]
    fn with_dra_cpu_ready_needs_the_kubelet_and_the_slices_too() {
        let h = Health::new(true);
        h.set_nri(Nri::Synchronized);
        assert!(h.not_ready().borrow().as_ref().unwrap().contains("kubelet"));
        h.set_kubelet_registered();
        assert!(
            h.not_ready()
                .borrow()
                .as_ref()
                .unwrap()
                .contains("not published")
        );
        h.set_slices(Ok(()));
        assert!(h.is_ready());
        // A failed check of the slices: not ready, with the error.
        h.set_slices(Err("forbidden".into()));
        assert_eq!(
            h.not_ready().borrow().as_deref(),
            Some("the dra.cpu ResourceSlices: forbidden")
        );
        h.set_slices(Ok(()));
        assert!(h.is_ready());
        // NRI comes first.
        h.set_nri(Nri::Down);
        assert_eq!(h.not_ready().borrow().as_deref(), Some(DISCONNECTED));
        // Without --dra-cpu, the DRA parts are ignored.
        let plain = Health::new(false);
        plain.set_slices(Err("x".into()));
        plain.set_nri(Nri::Synchronized);
        assert!(plain.is_ready());
    }

    /// The NRI connection followed: ready once registered and synchronized, not after a
    /// disconnect until both again; registrations counted.
    #[tokio::test]
    async fn following_the_nri_connection() {
        let (tx, rx) = watch::channel(false);
        let (sync_tx, sync_rx) = watch::channel(false);
        let h = Health::new(false);
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let follow = tokio::spawn(follow_nri(rx, sync_rx, h.clone(), m.clone()));
        let mut reason = h.not_ready();
        let wait = async |reason: &mut watch::Receiver<Option<String>>, ready: bool| {
            tokio::time::timeout(
                Duration::from_secs(5),
                reason.wait_for(|r| r.is_none() == ready),
            )
            .await
            .expect("readiness changed")
            .unwrap()
            .clone()
        };
        assert_eq!(
            wait(&mut reason, false).await.as_deref(),
            Some(NOT_REGISTERED)
        );
        tx.send_replace(true);
        tokio::time::timeout(
            Duration::from_secs(5),
            reason.wait_for(|r| r.as_deref() == Some(SYNCHRONIZING)),
        )
        .await
        .expect("registered, synchronizing")
        .unwrap();
        assert_eq!(m.nri_registered.get(), 1);
        sync_tx.send_replace(true);
        wait(&mut reason, true).await;
        // The runtime handle clears both when the connection ends.
        tx.send_replace(false);
        sync_tx.send_replace(false);
        assert_eq!(
            wait(&mut reason, false).await.as_deref(),
            Some(DISCONNECTED)
        );
        assert_eq!(m.nri_registered.get(), 0);
        tx.send_replace(true);
        sync_tx.send_replace(true);
        wait(&mut reason, true).await;
        assert_eq!(m.nri_registrations.get(), 2);
        drop(tx);
        follow.await.unwrap();
    }
}
