//! The node controller on a real control plane and real Slurm, run as the controllers process
//! runs it, and what the tests read of both sides: Slurm nodes, Kubernetes nodes, node Events.

use crate::e2e::{self, wait_some};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::registry::Registry;
use slurm_bridge::controllers::metrics::ControllerMetrics;
use slurm_bridge::controllers::node::slurm_view::CONDITION_TYPE;
use slurm_bridge::controllers::node::{self, NodeControllerOptions, NodeInputs, NodeMetrics};
use slurm_bridge::slurm::NodeControl;
use slurm_bridge::slurm::SlurmNodeCache;
use slurm_bridge::wellknown::{LABEL_EXTERNAL_NODE, TAINT_MANAGED_NODE};
use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Node as SlurmNode, NodeState, Shared};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const WAIT: Duration = Duration::from_secs(30);

pub struct Harness {
    pub slurm: slurm_testenv::Instance,
    kube_env: kube_testenv::Instance,
    pub kube: kube::Client,
    pub rest: slurm_rest::Client,
    pub metrics: Arc<NodeMetrics>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Harness {
    /// Slurm without external nodes, a control plane with Ready nodes node-1..N, and the node
    /// controller running on a node reflector and a Slurm node listing of 500 ms.
    pub async fn start(nodes: usize) -> Harness {
        Harness::start_with(nodes, |_, _| {}).await
    }

    /// As [`Harness::start`], with `before` run on both environments before the controller
    /// starts (Slurm nodes an admin made, labels set while the bridge was down).
    pub async fn start_with(
        nodes: usize,
        before: impl FnOnce(&slurm_testenv::Instance, &kube_testenv::Instance),
    ) -> Harness {
        e2e::init_tracing();
        let slurm = tokio::task::spawn_blocking(|| {
            slurm_testenv::Instance::start(slurm_testenv::InstanceOptions {
                nodes: 0,
                ..Default::default()
            })
        });
        let kube_env =
            kube_testenv::Instance::start(kube_testenv::InstanceOptions::with_nodes(nodes))
                .await
                .expect("start the Kubernetes control plane");
        let slurm = slurm.await.unwrap().expect("start Slurm");
        let kube = kube_env.client();
        let rest = e2e::rest_client(&slurm);
        before(&slurm, &kube_env);
        let mut registry = Registry::default();
        // The families as the controllers process registers them (`controllers::run_with`).
        let controllers = ControllerMetrics::new(&mut registry);
        let metrics = NodeMetrics::with_reconcile(&mut registry, controllers.reconcile.clone());
        let (stop, _) = watch::channel(false);
        let mut h = Harness {
            slurm,
            kube_env,
            kube,
            rest,
            metrics,
            stop,
            tasks: Vec::new(),
        };
        h.spawn_controller();
        h
    }

    /// Starts the node controller on caches of its own (the previous one, if any, stopped by
    /// [`Harness::stop_controller`]).
    pub fn spawn_controller(&mut self) {
        let kube = self.kube.clone();
        let (store, writer) = reflector::store::<Node>();
        let (tx, rx) = futures::channel::mpsc::unbounded::<ObjectRef<Node>>();
        let api: Api<Node> = Api::all(kube.clone());
        self.tasks.push(tokio::spawn(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .for_each(move |ev| {
                    match ev {
                        Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n))
                        | Ok(watcher::Event::Delete(n)) => {
                            let _ = tx.unbounded_send(ObjectRef::from_obj(&n));
                        }
                        _ => {}
                    }
                    futures::future::ready(())
                }),
        ));
        // The ResourceSlice cache (no slices in these tests: registration from capacity).
        let (slices, slice_writer) = kube::runtime::reflector::store();
        let slice_api: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(kube.clone());
        self.tasks.push(tokio::spawn(
            watcher(slice_api, watcher::Config::default())
                .default_backoff()
                .reflect(slice_writer)
                .for_each(|_| futures::future::ready(())),
        ));
        let cache = SlurmNodeCache::new(Arc::new(self.rest.clone()), Duration::from_millis(500));
        self.tasks.push(tokio::spawn(cache.clone().run()));

        let (stop, mut stop_rx) = watch::channel(false);
        self.stop = stop;
        // What the controllers process hands the node controller (`controllers::run`).
        let inputs = NodeInputs {
            client: kube.clone(),
            slurm: Arc::new(self.rest.clone()),
            slurm_nodes: cache,
            nodes: store,
            node_changes: rx,
            slices,
            slice_changes: futures::stream::empty(),
            state_loss: None,
        };
        self.tasks.push(tokio::spawn(node::run(
            inputs,
            NodeControllerOptions {
                scheduler_name: e2e::SCHEDULER.into(),
                workers: 2,
                resync: Duration::from_secs(300),
                cluster: None,
                gres_drivers: Default::default(),
            },
            self.metrics.clone(),
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )));
    }

    /// Stops the node controller and waits until it has ended (its passes in flight done).
    pub async fn stop_controller(&mut self) {
        let _ = self.stop.send(true);
        let mut tasks = std::mem::take(&mut self.tasks);
        let controller = tasks.pop().expect("a running controller");
        tokio::time::timeout(WAIT, controller)
            .await
            .expect("the controller stops")
            .expect("the controller task");
        for t in tasks {
            t.abort();
        }
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kube_env
            .kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    pub fn scontrol(&self, args: &[&str]) {
        let mut argv = vec!["scontrol"];
        argv.extend_from_slice(args);
        let out = self.slurm.exec(&argv).expect("scontrol");
        assert!(
            out.status.success(),
            "scontrol {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub async fn slurm_node(&self, name: &str) -> Option<SlurmNode> {
        NodeControl::node(&self.rest, name)
            .await
            .expect("GET Slurm node")
    }

    pub async fn kube_node(&self, name: &str) -> Node {
        Api::<Node>::all(self.kube.clone())
            .get(name)
            .await
            .expect("GET node")
    }

    /// Node events as (type, reason, message).
    pub async fn node_events(&self, name: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.kube.clone(), "default");
        let mut events: Vec<Event> = api
            .list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(name)
            })
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        events
            .into_iter()
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect()
    }

    pub async fn wait_event(&self, node: &str, reason: &str, contains: &[&str]) -> String {
        wait_some(&format!("event {reason} on {node}"), WAIT, || async {
            self.node_events(node)
                .await
                .into_iter()
                .find(|(_, r, m)| r == reason && contains.iter().all(|c| m.contains(c)))
                .map(|(_, _, m)| m)
        })
        .await
    }

    pub async fn wait_slurm(
        &self,
        name: &str,
        what: &str,
        ok: impl Fn(&SlurmNode) -> bool,
    ) -> SlurmNode {
        wait_some(&format!("Slurm node {name}: {what}"), WAIT, || async {
            self.slurm_node(name).await.filter(|n| ok(n))
        })
        .await
    }

    pub async fn wait_slurm_gone(&self, name: &str) {
        wait_some(&format!("Slurm node {name} removed"), WAIT, || async {
            self.slurm_node(name).await.is_none().then_some(())
        })
        .await
    }

    pub async fn wait_kube(&self, name: &str, what: &str, ok: impl Fn(&Node) -> bool) -> Node {
        wait_some(&format!("node {name}: {what}"), WAIT, || async {
            Some(self.kube_node(name).await).filter(|n| ok(n))
        })
        .await
    }

    /// Proof that the controller has made a pass over the bridged node `name` that saw every
    /// change made to it so far: the managed taint, taken off by hand, is put back. The pass
    /// that puts it back read the node after the taint was gone, so after every earlier change
    /// too (the controller's cache takes a node's changes in order), and a pass runs its state
    /// step (drain, undrain, delete) before its taint step: what that pass decided for the Slurm
    /// node's state is done by the time the taint is back.
    pub async fn pass_over_bridged(&self, name: &str) {
        self.kubectl(&[
            "taint",
            "node",
            name,
            &format!("{TAINT_MANAGED_NODE}:NoExecute-"),
        ]);
        self.wait_kube(name, "managed taint put back", |n| {
            managed_taint(n).as_deref() == Some(e2e::SCHEDULER)
        })
        .await;
    }

    /// As [`Harness::pass_over_bridged`], for a node that is not bridged: a managed taint put
    /// on by hand is taken off again. Done twice, the second pass starts only after the first
    /// has ended (one pass per node at a time), so every step of the first, its Events
    /// included, is done by the time the second taint is gone.
    pub async fn passes_over_unbridged(&self, name: &str) {
        for _ in 0..2 {
            self.kubectl(&[
                "taint",
                "node",
                name,
                &format!("{TAINT_MANAGED_NODE}=e2e-marker:NoExecute"),
            ]);
            self.wait_kube(name, "stray managed taint removed", |n| {
                managed_taint(n).is_none()
            })
            .await;
        }
    }

    /// Submits an external job straight to Slurm on `node` and waits until it runs there.
    pub async fn busy(&self, node: &str) -> u32 {
        let desc = JobDescMsg {
            flags: Some(vec![JobFlag::ExternalJob]),
            nodes: Some("1".into()),
            partition: Some("slurm-bridge".into()),
            required_nodes: Some(vec![node.into()]),
            admin_comment: Some("{\"pods\":[\"default/busy\"]}".into()),
            current_working_directory: Some("/tmp".into()),
            user_id: Some("0".into()),
            group_id: Some("0".into()),
            shared: Some(vec![Shared::None]),
            ..Default::default()
        };
        let id = self.rest.submit_job(&desc).await.expect("submit").job_id;
        wait_some(&format!("job {id} running"), WAIT, || async {
            let job = self.rest.job(id).await.ok()?;
            job.job_state.contains(&JobState::Running).then_some(())
        })
        .await;
        id
    }

    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
        let Harness {
            slurm, kube_env, ..
        } = self;
        drop(kube_env);
        tokio::task::spawn_blocking(move || drop(slurm))
            .await
            .unwrap();
    }
}

pub fn has_state(n: &SlurmNode, s: NodeState) -> bool {
    n.state.contains(&s)
}

pub fn is_drain(n: &SlurmNode) -> bool {
    has_state(n, NodeState::Drain)
}

pub fn managed_taint(n: &Node) -> Option<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|t| {
            t.iter()
                .find(|t| t.key == TAINT_MANAGED_NODE && t.effect == "NoExecute")
        })
        .map(|t| t.value.clone().unwrap_or_default())
}

pub fn condition(n: &Node) -> Option<(String, String, String)> {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION_TYPE))
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

pub fn label_arg() -> String {
    format!("{LABEL_EXTERNAL_NODE}=true")
}

/// `scontrol create` of an external node as an admin makes it: no comment, no bridge mark.
pub fn admin_node(slurm: &slurm_testenv::Instance, name: &str) {
    let out = slurm
        .exec(&[
            "scontrol",
            "create",
            &format!("nodename={name}"),
            "nodeaddr=127.0.0.1",
            "state=external",
            "cpus=8",
            "realmemory=16000",
            "features=slurm-bridge",
        ])
        .expect("scontrol create");
    assert!(
        out.status.success(),
        "scontrol create {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn events_with(events: &[(String, String, String)], reason: &str) -> usize {
    events.iter().filter(|(_, r, _)| r == reason).count()
}
