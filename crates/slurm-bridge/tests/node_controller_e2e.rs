//! The node controller end to end: real Slurm (slurm-testenv, no external nodes of its own) and a
//! real Kubernetes control plane (kube-testenv), through the kube-rs client. The test builds the
//! shared pieces the process would share (a node reflector, its change stream, the Slurm node
//! listing) and runs the controller on them.

mod e2e;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::registry::Registry;
use serde_json::json;
use slurm_bridge::controllers::node::slurm_view::CONDITION_TYPE;
use slurm_bridge::controllers::node::{
    self, NodeControllerOptions, NodeInputs, NodeMetrics, ownership,
};
use slurm_bridge::slurm::NodeControl;
use slurm_bridge::slurm::SlurmNodeCache;
use slurm_bridge::wellknown::{LABEL_EXTERNAL_NODE, TAINT_MANAGED_NODE};
use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Node as SlurmNode, NodeState, Shared};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(30);

struct Harness {
    slurm: slurm_testenv::Instance,
    kube_env: kube_testenv::Instance,
    kube: kube::Client,
    rest: slurm_rest::Client,
    metrics: Arc<NodeMetrics>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Harness {
    /// Slurm without external nodes, a control plane with Ready nodes node-1..N, and the node
    /// controller running on a node reflector and a Slurm node listing of 500 ms.
    async fn start(nodes: usize) -> Harness {
        Harness::start_with(nodes, |_, _| {}).await
    }

    /// As [`Harness::start`], with `before` run on both environments before the controller
    /// starts (Slurm nodes an admin made, labels set while the bridge was down).
    async fn start_with(
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
        let metrics = NodeMetrics::new(&mut registry);
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
    fn spawn_controller(&mut self) {
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
        };
        self.tasks.push(tokio::spawn(node::run(
            inputs,
            NodeControllerOptions {
                scheduler_name: e2e::SCHEDULER.into(),
                workers: 2,
                resync: Duration::from_secs(300),
            },
            self.metrics.clone(),
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )));
    }

    /// Stops the node controller and waits until it has ended (its passes in flight done).
    async fn stop_controller(&mut self) {
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

    fn kubectl(&self, args: &[&str]) -> String {
        self.kube_env
            .kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    fn scontrol(&self, args: &[&str]) {
        let mut argv = vec!["scontrol"];
        argv.extend_from_slice(args);
        let out = self.slurm.exec(&argv).expect("scontrol");
        assert!(
            out.status.success(),
            "scontrol {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn slurm_node(&self, name: &str) -> Option<SlurmNode> {
        NodeControl::node(&self.rest, name)
            .await
            .expect("GET Slurm node")
    }

    async fn kube_node(&self, name: &str) -> Node {
        Api::<Node>::all(self.kube.clone())
            .get(name)
            .await
            .expect("GET node")
    }

    /// Node events as (type, reason, message).
    async fn node_events(&self, name: &str) -> Vec<(String, String, String)> {
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

    async fn wait_event(&self, node: &str, reason: &str, contains: &[&str]) -> String {
        wait_for(&format!("event {reason} on {node}"), WAIT, || async {
            self.node_events(node)
                .await
                .into_iter()
                .find(|(_, r, m)| r == reason && contains.iter().all(|c| m.contains(c)))
                .map(|(_, _, m)| m)
        })
        .await
    }

    async fn wait_slurm(
        &self,
        name: &str,
        what: &str,
        ok: impl Fn(&SlurmNode) -> bool,
    ) -> SlurmNode {
        wait_for(&format!("Slurm node {name}: {what}"), WAIT, || async {
            self.slurm_node(name).await.filter(|n| ok(n))
        })
        .await
    }

    async fn wait_slurm_gone(&self, name: &str) {
        wait_for(&format!("Slurm node {name} removed"), WAIT, || async {
            self.slurm_node(name).await.is_none().then_some(())
        })
        .await
    }

    async fn wait_kube(&self, name: &str, what: &str, ok: impl Fn(&Node) -> bool) -> Node {
        wait_for(&format!("node {name}: {what}"), WAIT, || async {
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
    async fn pass_over_bridged(&self, name: &str) {
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
    async fn passes_over_unbridged(&self, name: &str) {
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
    async fn busy(&self, node: &str) -> u32 {
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
        wait_for(&format!("job {id} running"), WAIT, || async {
            let job = self.rest.job(id).await.ok()?;
            job.job_state.contains(&JobState::Running).then_some(())
        })
        .await;
        id
    }

    async fn shutdown(self) {
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

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn has_state(n: &SlurmNode, s: NodeState) -> bool {
    n.state.contains(&s)
}

fn is_drain(n: &SlurmNode) -> bool {
    has_state(n, NodeState::Drain)
}

fn managed_taint(n: &Node) -> Option<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|t| {
            t.iter()
                .find(|t| t.key == TAINT_MANAGED_NODE && t.effect == "NoExecute")
        })
        .map(|t| t.value.clone().unwrap_or_default())
}

fn condition(n: &Node) -> Option<(String, String, String)> {
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

fn label_arg() -> String {
    format!("{LABEL_EXTERNAL_NODE}=true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_node_registration_cordon_admin_drain_recreate_and_removal() {
    let h = Harness::start(2).await;

    // Registration: CPUs, memory, features, EXTERNAL; the taint on the Kubernetes node.
    h.kubectl(&[
        "annotate",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
    ]);
    h.kubectl(&["label", "node", "node-1", &label_arg()]);
    let s = h.wait_slurm("node-1", "registered", |_| true).await;
    assert_eq!(s.cpus, Some(8), "{s:?}");
    assert_eq!(s.real_memory, Some(16000), "{s:?}");
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    assert!(s.partitions.contains(&"slurm-bridge".to_string()), "{s:?}");
    assert!(has_state(&s, NodeState::External), "{s:?}");
    assert!(!is_drain(&s), "{s:?}");
    h.wait_kube("node-1", "managed taint", |n| {
        managed_taint(n).as_deref() == Some(e2e::SCHEDULER)
    })
    .await;
    h.wait_event("node-1", "SlurmNodeRegistered", &["NodeName=node-1"])
        .await;
    assert_eq!(h.metrics.nodes_registered.get(), 1);

    // Cordon drains with the bridge's reason; uncordon resumes.
    h.kubectl(&["cordon", "node-1"]);
    let s = h.wait_slurm("node-1", "drained", is_drain).await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("slurm-bridge:"),
        "{s:?}"
    );
    h.kubectl(&["uncordon", "node-1"]);
    h.wait_slurm("node-1", "resumed", |n| !is_drain(n)).await;

    // An admin's drain: left alone, shown as the condition and an Event.
    h.scontrol(&[
        "update",
        "nodename=node-1",
        "state=drain",
        "reason=maintenance",
    ]);
    let n = h
        .wait_kube("node-1", "SlurmNodeUnavailable condition", |n| {
            condition(n).is_some()
        })
        .await;
    let (status, reason, message) = condition(&n).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SlurmNodeDrained")
    );
    assert!(
        message.contains("DRAIN") && message.contains("maintenance"),
        "{message}"
    );
    let note = h
        .wait_event("node-1", "SlurmNodeDrained", &["maintenance"])
        .await;
    assert!(note.contains("DRAIN"), "{note}");
    // Cordon and uncordon do not undo it: after a pass that saw the cordon, and one that saw
    // the uncordon, the drain and its reason are the admin's.
    let drained_before = h.metrics.nodes_drained.get();
    h.kubectl(&["cordon", "node-1"]);
    h.pass_over_bridged("node-1").await;
    let s = h.slurm_node("node-1").await.expect("node-1");
    assert!(is_drain(&s), "the admin's drain stays when cordoned: {s:?}");
    assert_eq!(s.reason.as_deref(), Some("maintenance"), "{s:?}");
    h.kubectl(&["uncordon", "node-1"]);
    h.pass_over_bridged("node-1").await;
    let s = h.slurm_node("node-1").await.expect("node-1");
    assert!(is_drain(&s), "the admin's drain stays: {s:?}");
    assert_eq!(s.reason.as_deref(), Some("maintenance"), "{s:?}");
    assert_eq!(
        h.metrics.nodes_drained.get(),
        drained_before,
        "the cordon drained nothing over the admin's drain"
    );
    // Slurm resumes it: the condition goes, an Event says so.
    h.scontrol(&["update", "nodename=node-1", "state=resume"]);
    h.wait_kube("node-1", "condition removed", |n| condition(n).is_none())
        .await;
    h.wait_event("node-1", "SlurmNodeResumed", &["node-1"])
        .await;
    let drained_events = h
        .node_events("node-1")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "SlurmNodeDrained")
        .count();
    assert_eq!(drained_events, 1, "one Event per drain");

    // Capacity changed: the idle node is drained, removed and registered again.
    Api::<Node>::all(h.kube.clone())
        .patch_status(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"capacity": {"cpu": "16"}}})),
        )
        .await
        .expect("patch capacity");
    let s = h
        .wait_slurm("node-1", "re-created with 16 CPUs", |n| n.cpus == Some(16))
        .await;
    assert!(!is_drain(&s) && has_state(&s, NodeState::External), "{s:?}");
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    h.wait_event("node-1", "SlurmNodeRemoved", &["CPUs 8 -> 16"])
        .await;
    assert_eq!(h.metrics.nodes_registered.get(), 2);
    assert_eq!(h.metrics.nodes_removed.get(), 1);

    // Label removed from a busy node: drained, and the drain holds (no flip-flop, quirk 6)
    // while the job runs; removed once idle, and the taint goes.
    let job = h.busy("node-1").await;
    let drained_before = h.metrics.nodes_drained.get();
    h.kubectl(&[
        "label",
        "node",
        "node-1",
        &format!("{LABEL_EXTERNAL_NODE}-"),
    ]);
    let s = h
        .wait_slurm("node-1", "drained for removal", is_drain)
        .await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .contains("removing external node node-1"),
        "{s:?}"
    );
    // Passes over the busy node (each one seeing the drain it made) leave the drain as it is.
    for _ in 0..3 {
        h.pass_over_bridged("node-1").await;
        let s = h
            .slurm_node("node-1")
            .await
            .expect("still there while busy");
        assert!(is_drain(&s), "the removal drain holds: {s:?}");
    }
    assert_eq!(
        h.metrics.nodes_drained.get(),
        drained_before + 1,
        "drained once, never undrained in between"
    );
    h.rest.cancel_job(job, None, None).await.expect("cancel");
    h.wait_slurm_gone("node-1").await;
    h.wait_kube("node-1", "taint removed", |n| managed_taint(n).is_none())
        .await;
    assert_eq!(h.metrics.nodes_removed.get(), 2);

    // The unlabelled node was never registered nor tainted.
    assert!(h.slurm_node("node-2").await.is_none());
    assert_eq!(managed_taint(&h.kube_node("node-2").await), None);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_partition_is_reported_and_not_registered() {
    let h = Harness::start(1).await;
    h.kubectl(&[
        "annotate",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge,nope",
    ]);
    h.kubectl(&["label", "node", "node-1", &label_arg()]);
    let note = h
        .wait_event("node-1", "InvalidPartition", &["\"nope\""])
        .await;
    assert!(
        note.contains("existing partitions: \"slurm-bridge\""),
        "{note}"
    );
    // Passes after the Warning (the last of them complete): still not registered, no taint,
    // and the Warning not repeated.
    h.passes_over_unbridged("node-1").await;
    assert!(h.slurm_node("node-1").await.is_none(), "not registered");
    assert_eq!(managed_taint(&h.kube_node("node-1").await), None);
    let warnings = h
        .node_events("node-1")
        .await
        .into_iter()
        .filter(|(t, r, _)| t == "Warning" && r == "InvalidPartition")
        .count();
    assert_eq!(warnings, 1, "one Warning, not one per retry");

    // Fixed: registered.
    h.kubectl(&[
        "annotate",
        "--overwrite",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
    ]);
    let s = h.wait_slurm("node-1", "registered", |_| true).await;
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    h.shutdown().await;
}

/// `scontrol create` of an external node as an admin makes it: no comment, no bridge mark.
fn admin_node(slurm: &slurm_testenv::Instance, name: &str) {
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

fn events_with(events: &[(String, String, String)], reason: &str) -> usize {
    events.iter().filter(|(_, r, _)| r == reason).count()
}

/// Issue 21: a bridge never removes what it did not create. Admin-made external nodes behind
/// unlabelled Kubernetes nodes of the same names are left alone with one warning each; an
/// admin-commented one behind a labelled node is not taken over; the Go original's unmarked
/// registration behind a labelled node is adopted (marked), its mark survives a slurmctld
/// restart, and it is removed when its label goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_the_bridge_registered_are_changed_or_removed() {
    let h = Harness::start_with(5, |slurm, kube| {
        for n in 1..=5 {
            admin_node(slurm, &format!("node-{n}"));
        }
        let out = slurm
            .exec(&["scontrol", "update", "nodename=node-4", "comment=rack-4"])
            .expect("scontrol update");
        assert!(out.status.success());
        for n in ["node-4", "node-5"] {
            kube.kubectl(&["label", "node", n, &label_arg()])
                .expect("label");
        }
    })
    .await;

    // The original's registration (labelled, no comment): adopted.
    h.wait_slurm("node-5", "marked as the bridge's", |n| {
        n.comment.as_deref() == Some(ownership::owner_comment("node-5").as_str())
    })
    .await;
    // Each foreign node: one warning.
    for n in ["node-1", "node-2", "node-3"] {
        h.wait_event(
            n,
            "SlurmNodeNotOwned",
            &["not registered by slurm-bridge", "label"],
        )
        .await;
    }
    h.wait_event("node-4", "SlurmNodeNotOwned", &["rack-4", "hand it over"])
        .await;
    // Passes after the warnings (each seeing every change so far) change nothing and repeat no
    // warning.
    for n in ["node-1", "node-2", "node-3", "node-4"] {
        h.pass_over_bridged(n).await;
        h.pass_over_bridged(n).await;
    }
    for n in 1..=4 {
        let name = format!("node-{n}");
        let s = h.slurm_node(&name).await.expect("admin's node stays");
        assert!(!is_drain(&s), "{s:?}");
        let want = (n == 4).then_some("rack-4");
        assert_eq!(
            s.comment.as_deref().filter(|c| !c.is_empty()),
            want,
            "{s:?}"
        );
        let events = h.node_events(&name).await;
        assert_eq!(events_with(&events, "SlurmNodeNotOwned"), 1, "{events:?}");
        assert_eq!(events_with(&events, "SlurmNodeRemoved"), 0, "{events:?}");
    }
    assert_eq!(h.metrics.nodes_removed.get(), 0);
    assert_eq!(h.metrics.nodes_drained.get(), 0);

    // The mark is in slurmctld's saved state.
    tokio::task::block_in_place(|| h.slurm.restart_slurmctld()).expect("restart slurmctld");
    let s = h.slurm_node("node-5").await.expect("node-5 after restart");
    assert_eq!(
        s.comment.as_deref(),
        Some(ownership::owner_comment("node-5").as_str()),
        "{s:?}"
    );
    // So the adopted node is the bridge's: removed when its label goes.
    h.kubectl(&[
        "label",
        "node",
        "node-5",
        &format!("{LABEL_EXTERNAL_NODE}-"),
    ]);
    h.wait_slurm_gone("node-5").await;
    for n in 1..=4 {
        assert!(h.slurm_node(&format!("node-{n}")).await.is_some());
    }
    h.shutdown().await;
}

/// Issue 21: the Slurm node of a deleted Kubernetes node is drained at once and removed once
/// idle, also when the node was deleted while the bridge was down (compared at start-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_kubernetes_node_loses_its_slurm_node() {
    let mut h = Harness::start(3).await;
    for n in ["node-1", "node-2", "node-3"] {
        // In the partition, so a job can run there.
        h.kubectl(&[
            "annotate",
            "node",
            n,
            "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
        ]);
        h.kubectl(&["label", "node", n, &label_arg()]);
    }
    for n in ["node-1", "node-2", "node-3"] {
        let s = h
            .wait_slurm(n, "registered and marked", |s| {
                ownership::owner(s).is_some()
            })
            .await;
        assert_eq!(ownership::owner(&s), Some(n), "{s:?}");
    }

    // Idle: removed.
    h.kubectl(&["delete", "node", "node-1"]);
    h.wait_slurm_gone("node-1").await;

    // Busy: drained at once (no job starts there), removed when its job ends.
    let job = h.busy("node-2").await;
    h.kubectl(&["delete", "node", "node-2"]);
    let s = h.wait_slurm("node-2", "drained", is_drain).await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .contains("Kubernetes node node-2 is gone"),
        "{s:?}"
    );
    h.rest.cancel_job(job, None, None).await.expect("cancel");
    h.wait_slurm_gone("node-2").await;

    // Deleted while the bridge is down: removed when it starts.
    h.stop_controller().await;
    h.kubectl(&["delete", "node", "node-3"]);
    tokio::task::block_in_place(|| h.slurm.restart_slurmctld()).expect("restart slurmctld");
    assert!(
        h.slurm_node("node-3").await.is_some(),
        "still there while down"
    );
    h.spawn_controller();
    h.wait_slurm_gone("node-3").await;
    assert_eq!(h.metrics.nodes_removed.get(), 3);
    h.shutdown().await;
}
