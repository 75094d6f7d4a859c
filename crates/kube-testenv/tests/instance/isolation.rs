//! Two instances side by side are separate clusters, and dropping one stops all its processes.

use crate::common::{assert_all_gone, daemon_pgid, processes_naming, watchdog_of};
use crate::support::{object, start};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams, PostParams};
use kube_testenv::{Instance, InstanceOptions};
use serde_json::json;

/// Two instances side by side are separate clusters; dropping one stops all its processes
/// and removes its folder, and leaves the other running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_isolated_and_dropping_one_stops_everything() {
    let (a, b) = tokio::join!(
        start(InstanceOptions::default()),
        start(InstanceOptions::with_nodes(1))
    );
    assert_ne!(a.name(), b.name());
    assert_ne!(a.server(), b.server());
    assert_ne!(a.dir(), b.dir());
    assert!(a.kubeconfig().is_file() && b.kubeconfig().is_file());

    let ns: Namespace = object(json!({"metadata": {"name": "only-in-a"}}));
    Api::<Namespace>::all(a.client())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace in a");
    let in_b = Api::<Namespace>::all(b.client())
        .get_opt("only-in-a")
        .await
        .expect("get namespace in b");
    assert!(in_b.is_none(), "the instances share state");
    let count = |inst: &Instance| {
        let nodes: Api<Node> = Api::all(inst.client());
        async move {
            nodes
                .list(&ListParams::default())
                .await
                .expect("list nodes")
                .items
                .len()
        }
    };
    assert_eq!((count(&a).await, count(&b).await), (0, 1));

    let procs = processes_naming(a.dir());
    for daemon in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        assert!(
            procs
                .iter()
                .any(|p| p.args[0].ends_with(&format!("/{daemon}"))),
            "{daemon} of {} not found: {procs:?}",
            a.dir().display()
        );
    }
    let (dir_a, pgid_a, watchdog_a) = (
        a.dir().to_path_buf(),
        daemon_pgid(a.dir()),
        watchdog_of(a.dir()),
    );
    assert!(pgid_a > 0);
    drop(a);
    tokio::task::spawn_blocking(move || assert_all_gone(&dir_a, pgid_a, watchdog_a.pgid))
        .await
        .expect("check instance a is gone");

    // b is untouched.
    assert_eq!(count(&b).await, 1);
    let out = b
        .kubectl(&["get", "nodes", "-o", "name"])
        .expect("kubectl on b");
    assert_eq!(out.trim(), "node/node-1");
    let (dir_b, pgid_b, watchdog_b) = (
        b.dir().to_path_buf(),
        daemon_pgid(b.dir()),
        watchdog_of(b.dir()),
    );
    assert!(!processes_naming(&dir_b).is_empty());
    drop(b);
    tokio::task::spawn_blocking(move || assert_all_gone(&dir_b, pgid_b, watchdog_b.pgid))
        .await
        .expect("check instance b is gone");
}
