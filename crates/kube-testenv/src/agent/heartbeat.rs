//! Node heartbeats and membership: renews each served node's Lease, refreshes its conditions'
//! `lastHeartbeatTime` (both paced by `cadence`: each node once a period, the period's writes
//! spread evenly over it), and watches Nodes so that a node deleted by someone is dropped (not
//! recreated): no more heartbeats, and the kubelet stops serving its pods.
//!
//! This task owns the set of served nodes; the kubelet learns of changes only from it, so
//! additions and removals reach the kubelet in the order they happened.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::Patch;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::AgentOptions;
use super::cadence::{self, Pacer};
use super::kubelet::KubeletCmd;
use super::nodes::{LEASE_NAMESPACE, build_lease, heartbeat_patch, lease_renew_patch};
use super::util;

/// What the heartbeat task is told.
#[derive(Debug)]
pub enum Command {
    /// A node registered through the API, to be served from now on.
    Register(Registered),
    /// Stop serving a node without deleting it, as when its kubelet dies: no more heartbeats,
    /// its pods are left as they are.
    Lose(String),
}

/// A node registered through the API, to be served from now on.
#[derive(Debug)]
pub struct Registered {
    pub name: String,
    pub uid: String,
    pub index: usize,
    /// The registration created the Node: its first Lease write is a create.
    pub created: bool,
}

#[derive(Debug)]
struct Served {
    uid: String,
    /// Which service of the node this is (its entries in the pacers name it).
    generation: u64,
    /// The node watch's list epoch when the node was added: a re-list that began before
    /// cannot tell whether the node exists.
    added_epoch: u64,
    /// Conditions as last seen by the watch.
    conditions: Option<Vec<NodeCondition>>,
    lease_busy: bool,
    status_busy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    Status,
}

struct Done {
    name: String,
    uid: String,
    kind: Kind,
    result: Result<(), kube::Error>,
}

/// The heartbeat task.
pub struct Heartbeat {
    nodes_api: Api<Node>,
    leases_api: Api<Lease>,
    opts: AgentOptions,
    cmds: mpsc::UnboundedReceiver<Command>,
    kubelet: mpsc::UnboundedSender<KubeletCmd>,
    served: HashMap<String, Served>,
    epoch: u64,
    /// Name → UID of the nodes seen since the current re-list began.
    relist: Option<HashMap<String, String>>,
    writes: JoinSet<Done>,
    sem: Arc<Semaphore>,
    leases: Pacer,
    statuses: Pacer,
    next_generation: u64,
}

impl Heartbeat {
    /// A heartbeat task serving no node yet; nodes come through `cmds`.
    pub fn new(
        client: kube::Client,
        opts: AgentOptions,
        cmds: mpsc::UnboundedReceiver<Command>,
        kubelet: mpsc::UnboundedSender<KubeletCmd>,
    ) -> Self {
        Heartbeat {
            nodes_api: Api::all(client.clone()),
            leases_api: Api::namespaced(client, LEASE_NAMESPACE),
            sem: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
            opts,
            cmds,
            kubelet,
            served: HashMap::new(),
            epoch: 0,
            relist: None,
            writes: JoinSet::new(),
            leases: Pacer::default(),
            statuses: Pacer::default(),
            next_generation: 0,
        }
    }

    /// Run until the task is aborted or the command channel closes.
    pub async fn run(mut self) {
        let mut events = std::pin::pin!(
            watcher(self.nodes_api.clone(), watcher::Config::default()).default_backoff()
        );
        let mut tick = tokio::time::interval(cadence::TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => match done {
                    Ok(done) => self.on_done(done),
                    Err(e) => tracing::warn!(error = %e, "kube-testenv agent: heartbeat task failed"),
                },
                cmd = self.cmds.recv() => match cmd {
                    Some(Command::Register(reg)) => self.on_registered(reg),
                    Some(Command::Lose(name)) => self.gone(&name, "lost its kubelet"),
                    None => return,
                },
                ev = events.next() => match ev {
                    Some(Ok(ev)) => self.on_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "kube-testenv agent: node watch error"),
                    None => return,
                },
                _ = tick.tick() => self.on_tick(),
            }
        }
    }

    /// Hand out the Lease renewals and status refreshes due in this tick.
    fn on_tick(&mut self) {
        let n = self.served.len();
        let served = &self.served;
        let live = |name: &str, g: u64| served.get(name).is_some_and(|s| s.generation == g);
        let leases = self
            .leases
            .due(n, cadence::TICK, cadence::lease_period(n, &self.opts), live);
        let statuses = self.statuses.due(
            n,
            cadence::TICK,
            cadence::status_period(n, &self.opts),
            live,
        );
        for name in leases {
            self.renew_lease(&name, false);
        }
        for name in statuses {
            self.refresh_status(&name);
        }
    }
    fn on_registered(&mut self, reg: Registered) {
        let Registered {
            name,
            uid,
            index,
            created,
        } = reg;
        match self.served.get_mut(&name) {
            Some(s) => {
                // Registered again (perhaps recreated before its deletion was seen).
                if s.uid != uid {
                    s.uid = uid;
                    s.conditions = None;
                }
                s.added_epoch = self.epoch;
            }
            None => {
                self.next_generation += 1;
                let generation = self.next_generation;
                self.leases.push(name.clone(), generation);
                self.statuses.push(name.clone(), generation);
                self.served.insert(
                    name.clone(),
                    Served {
                        uid,
                        generation,
                        added_epoch: self.epoch,
                        conditions: None,
                        lease_busy: false,
                        status_busy: false,
                    },
                );
                let _ = self.kubelet.send(KubeletCmd::Add {
                    name: name.clone(),
                    index,
                });
            }
        }
        self.renew_lease(&name, created);
    }

    fn on_event(&mut self, ev: watcher::Event<Node>) {
        match ev {
            watcher::Event::Init => {
                self.epoch += 1;
                self.relist = Some(HashMap::new());
            }
            watcher::Event::InitApply(node) => {
                if let Some(seen) = &mut self.relist {
                    seen.insert(
                        node.name_any(),
                        node.metadata.uid.clone().unwrap_or_default(),
                    );
                }
                self.on_node(node);
            }
            watcher::Event::InitDone => {
                let Some(seen) = self.relist.take() else {
                    return;
                };
                let gone: Vec<String> = self
                    .served
                    .iter()
                    .filter(|(name, s)| {
                        s.added_epoch < self.epoch && seen.get(*name) != Some(&s.uid)
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in gone {
                    self.gone(&name, "not found when re-listing nodes");
                }
            }
            watcher::Event::Apply(node) => self.on_node(node),
            watcher::Event::Delete(node) => {
                let name = node.name_any();
                if self
                    .served
                    .get(&name)
                    .is_some_and(|s| Some(&s.uid) == node.metadata.uid.as_ref())
                {
                    self.gone(&name, "deleted");
                }
            }
        }
    }

    fn on_node(&mut self, node: Node) {
        let Some(s) = self.served.get_mut(&node.name_any()) else {
            return;
        };
        if Some(&s.uid) == node.metadata.uid.as_ref() {
            s.conditions = node.status.and_then(|st| st.conditions);
        }
    }

    /// The node was deleted by someone, or its kubelet is lost: stop heartbeating it and serving
    /// its pods.
    fn gone(&mut self, name: &str, why: &str) {
        if self.served.remove(name).is_some() {
            tracing::info!(node = %name, "kube-testenv agent: node {why}; no longer served");
            let _ = self.kubelet.send(KubeletCmd::Remove { name: name.into() });
        }
    }

    /// Renew the node's Lease, creating it when missing; with `create_first` (a node just
    /// created) try the create first, which saves a 404 per new node.
    fn renew_lease(&mut self, name: &str, create_first: bool) {
        let Some(s) = self.served.get_mut(name) else {
            return;
        };
        if s.lease_busy {
            return;
        }
        s.lease_busy = true;
        let (name, uid) = (name.to_string(), s.uid.clone());
        let api = self.leases_api.clone();
        let sem = self.sem.clone();
        let duration = self.opts.lease_duration_seconds;
        self.writes.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let pp = util::patch_params();
            let renew = || {
                let patch = lease_renew_patch(&name, &uid, duration);
                let api = api.clone();
                let pp = pp.clone();
                let name = name.clone();
                async move { api.patch(&name, &pp, &Patch::Merge(&patch)).await }
            };
            let create = || {
                let lease = build_lease(&name, &uid, duration);
                let api = api.clone();
                async move { api.create(&util::post_params(), &lease).await }
            };
            let result = if create_first {
                match create().await {
                    Err(e) if util::is_already_exists(&e) => renew().await.map(drop),
                    r => r.map(drop),
                }
            } else {
                match renew().await {
                    Err(e) if util::is_not_found(&e) => match create().await {
                        Err(e) if util::is_already_exists(&e) => renew().await.map(drop),
                        r => r.map(drop),
                    },
                    r => r.map(drop),
                }
            };
            Done {
                name,
                uid,
                kind: Kind::Lease,
                result,
            }
        });
    }

    /// Refresh the node's conditions (`lastHeartbeatTime`) through `nodes/status`.
    fn refresh_status(&mut self, name: &str) {
        let Some(s) = self.served.get_mut(name) else {
            return;
        };
        if s.status_busy {
            return;
        }
        s.status_busy = true;
        let mut patch = heartbeat_patch(s.conditions.as_deref());
        // The UID makes the API server refuse the patch if the node was replaced.
        patch["metadata"] = serde_json::json!({ "uid": s.uid });
        let (name, uid) = (name.to_string(), s.uid.clone());
        let api = self.nodes_api.clone();
        let sem = self.sem.clone();
        self.writes.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let result = api
                .patch_status(&name, &util::patch_params(), &Patch::Strategic(&patch))
                .await
                .map(drop);
            Done {
                name,
                uid,
                kind: Kind::Status,
                result,
            }
        });
    }

    fn on_done(&mut self, done: Done) {
        let Some(s) = self.served.get_mut(&done.name) else {
            return;
        };
        if s.uid != done.uid {
            return;
        }
        match done.kind {
            Kind::Lease => s.lease_busy = false,
            Kind::Status => s.status_busy = false,
        }
        let Err(e) = &done.result else {
            return;
        };
        match done.kind {
            Kind::Status if util::is_not_found(e) => self.gone(&done.name, "not found"),
            // Early on the API server may not have made the lease namespace yet.
            Kind::Lease if util::is_not_found(e) => {
                tracing::debug!(node = %done.name, error = %e, "kube-testenv agent: lease not renewed")
            }
            kind => {
                tracing::warn!(node = %done.name, ?kind, error = %e, "kube-testenv agent: heartbeat write failed")
            }
        }
    }
}
